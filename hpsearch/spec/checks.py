"""Checks of single spec values that reach a batch script, a command line or a terminal, of
what a spec needs to run on this machine, and of pilots against the trials they must hold.
Each returns a problem (text) or None; the validator turns a problem into a BadInput at the
value's file, line and key path.
"""

from __future__ import annotations

import re
import unicodedata
from typing import TYPE_CHECKING

from hpsearch.errors import shown
from hpsearch.spec.durations import time_limit_seconds
from hpsearch.spec.model import PILOT_RESERVE, slot_width

if TYPE_CHECKING:
    from hpsearch.spec.model import Pilots, Resources

# Partition, account and qos names: what Slurm accepts, without whitespace, quotes or shell
# metacharacters (a comma separates several partitions).
SLURM_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.,+:@%-]{0,199}")
# One sbatch option per entry: --name or --name=value, the value one word without quotes.
SBATCH_OPTION_RE = re.compile(r"--[A-Za-z][A-Za-z0-9-]*(=[^\s\"'\\]+)?")
# Options hpsearch writes itself and finds its jobs and logs by: a second one would win.
OWN_SBATCH_OPTIONS = {"--job-name": "hpsearch names each job to find it again",
                      "--output": "each trial's output goes to its trial dir",
                      "--error": "each trial's output goes to its trial dir",
                      "--array": "hpsearch makes its own job arrays (executor.array)",
                      "--open-mode": "hpsearch appends to each trial's logs",
                      "--wrap": "hpsearch writes the batch script",
                      "--chdir": "set `workdir` instead"}
def control_character(text: str, allowed: str = "") -> str | None:
    """The first control character (C0, DEL, C1) in `text` that is not in `allowed`, as a
    problem: such a character in a name or an option can end a line of a batch script or
    rewrite a terminal. Unicode line separators, direction overrides and zero-width
    characters count too: they break a line, or show text other than what runs."""
    for index, char in enumerate(text):
        if (unicodedata.category(char) in ("Cc", "Zl", "Zp") or char in _INVISIBLE) \
                and char not in allowed:
            return (f"control character {_named(char)} at position {index + 1} is not "
                    "allowed here")
    return None


# Characters that reorder or hide text on a terminal ("Trojan Source"): bidi embeddings,
# overrides and isolates, zero-width spaces and joiners, the word joiner and a BOM.
_INVISIBLE = frozenset("\u200b\u200c\u200d\u200e\u200f\u202a\u202b\u202c\u202d\u202e"
                       "\u2060\u2066\u2067\u2068\u2069\ufeff")


def _named(char: str) -> str:
    names = {"\n": "newline", "\r": "carriage return", "\t": "tab", "\x1b": "escape",
             "\u2028": "line separator", "\u2029": "paragraph separator",
             "\u202e": "right-to-left override", "\u200b": "zero-width space"}
    code = f"U+{ord(char):04X}"
    return f"{code} ({names[char]})" if char in names else code


def slurm_name(text: str, what: str) -> str | None:
    """A problem with a partition, account or qos name, or None."""
    if SLURM_NAME_RE.fullmatch(text):
        return None
    return (f"expected a Slurm {what} name (letters, digits and _ . , + : @ % -, no spaces "
            f"or quotes); got {shown(text)}")


def sbatch_option(text: str) -> str | None:
    """A problem with one `resources.sbatch_extra` entry, or None."""
    problem = control_character(text)
    if problem:
        return problem
    if not text.startswith("--"):
        return f"expected an sbatch option such as '--constraint=a100'; got {shown(text)}"
    if not SBATCH_OPTION_RE.fullmatch(text):
        return ("expected one sbatch option, --name or --name=value, with no spaces or quotes "
                f"(give each option its own list entry); got {shown(text)}")
    name = text.split("=", 1)[0]
    if name in OWN_SBATCH_OPTIONS:
        return f"{name} is set by hpsearch: {OWN_SBATCH_OPTIONS[name]}"
    return None


def pilot_heartbeat(pilots: Pilots, heartbeat_given: bool) -> tuple[str, str] | None:
    """(key, problem) if a pilot's heartbeat is not shorter than its grace and idle timeout
    (one late beat must not read as a driver gone, or a pilot idle), or None. The key is
    heartbeat where it was given, else the value that is too short for its default."""
    for key in ("grace", "idle_timeout"):
        limit = getattr(pilots, key)
        if pilots.heartbeat < limit:
            continue
        if heartbeat_given:
            return "heartbeat", (f"expected a heartbeat shorter than {key} ({limit:g} s); "
                                 f"got {pilots.heartbeat:g} s")
        return key, (f"expected {key} longer than the heartbeat ({pilots.heartbeat:g} s, its "
                     f"default); got {limit:g} s")
    return None


def pilots_fit(resources: Resources, pilots: Pilots | None,
               slot: Resources | None = None) -> tuple[tuple[str, ...], str] | None:
    """(key path, problem) if no trial could ever run in a pilot: it needs more nodes than a
    pilot holds, more slots of a node than it has (`slot`: one slot's shape, Spec.slot), or
    a longer time limit than a whole pilot has; or None. With per-trial resources, each
    field holds its largest value (Resources.per_trial)."""
    if pilots is None:
        return None
    width = slot_width(resources, slot or resources)
    if width > pilots.slots_per_node:
        return ("executor", "pilots", "slots_per_node"), (
            f"the largest trial ({resources.size()}) takes {width} slots of a node, each "
            f"slot the smallest trial's share ({(slot or resources).size()}); expected "
            f"slots_per_node >= {width}")
    where = ("executor", "pilots")
    if resources.nodes > pilots.nodes:
        return where + ("nodes",), (f"a pilot of {pilots.nodes} node(s) cannot hold a trial of "
                                    f"{resources.nodes} nodes (resources.nodes); expected "
                                    f"nodes >= {resources.nodes}")
    needed = time_limit_seconds(resources.time) if resources.time else None
    limit = time_limit_seconds(pilots.time)  # None: no limit (validate() refuses one)
    if needed and limit is not None and needed + PILOT_RESERVE > limit:
        return where + ("time",), (f"a pilot of time {pilots.time} could never start a trial of "
                                   f"time {resources.time} (resources.time); expected a time "
                                   f"limit of at least {resources.time} plus "
                                   f"{PILOT_RESERVE:g} s (a pilot keeps them to start and stop)")
    return None

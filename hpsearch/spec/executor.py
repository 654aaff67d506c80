"""Validate `executor`: which executor runs the trials (a name from the executors' registry,
handed in through the Vocabulary), its timings, its pilot jobs (`executor.pilots`) and its
warm workers (`executor.warm`).

    executor: slurm                      # or a mapping:
    executor: {type: slurm, array: false, pilots: {nodes: 2, time: "02:00:00"}, warm: [torch]}
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Any

from hpsearch.spec import checks, durations
from hpsearch.spec.model import Executor, Pilots
from hpsearch.spec.space import is_int
from hpsearch.spec.yamlpos import KeyPath

if TYPE_CHECKING:
    from hpsearch.spec.validate import _Validator

EXECUTOR_KEYS = ("type", "gpus", "timeout", "grace", "array", "array_throttle", "poll_interval",
                 "lost_after", "pilots", "warm")
MODULE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
PILOT_KEYS = ("nodes", "time", "max", "slots_per_node", "idle_timeout", "grace", "heartbeat")


def executor(v: _Validator, value: Any, path: KeyPath) -> Executor:
    """A name (`slurm`) or a mapping of EXECUTOR_KEYS."""
    if isinstance(value, str):
        value = {"type": value}
    d = v.mapping(value, path, EXECUTOR_KEYS)
    kind = d.get("type", "local")
    types = v.vocabulary.executor_types()
    if kind not in types:
        raise v.fail(path + ("type",), f"unknown executor {checks.shown(kind)}; "
                                       f"expected one of {', '.join(types)}")
    gpus = d.get("gpus")
    if gpus is not None and gpus != "auto":
        v.typed(gpus, path + ("gpus",), lambda x: isinstance(x, list) and x and all(
            is_int(g) or isinstance(g, str) for g in x), "'auto' or a list of device ids")
        gpus = tuple(v.string(str(g), path + ("gpus", i)) for i, g in enumerate(gpus))
    timeout = v.optional(d, "timeout", path, v.duration)
    grace = v.optional(d, "grace", path, v.duration, 10.0)
    array = v.optional(d, "array", path, lambda x, p: v.typed(
        x, p, lambda b: isinstance(b, bool), "true or false"), True)
    throttle = v.optional(d, "array_throttle", path, lambda x, p: v.integer(x, p, 1))
    poll = v.optional(d, "poll_interval", path, v.duration, 5.0)
    lost_after = v.optional(d, "lost_after", path, v.duration, 300.0)
    pilots = v.optional(d, "pilots", path, functools.partial(_pilots, v))
    if pilots is not None and not v.vocabulary.executor(kind).on_slurm:
        # (`submit --executor local` comes later)
        written = f"it is {kind}" if "type" in d else f"without it, it is {kind}"
        raise v.fail(path + ("pilots",), "pilots run on Slurm: set executor.type: slurm "
                                         f"({written})")
    warm = v.optional(d, "warm", path, functools.partial(_warm, v))
    return Executor(type=kind, gpus=gpus, timeout=timeout, grace=grace, array=array,
                    array_throttle=throttle, poll_interval=poll, lost_after=lost_after,
                    pilots=pilots, warm=warm)


def _warm(v: _Validator, value: Any, path: KeyPath) -> tuple[str, ...] | None:
    """`true`, a list of modules to preload, or {preload: [...]}; `false`: off."""
    if isinstance(value, bool):
        return () if value else None
    if isinstance(value, dict):
        value = v.mapping(value, path, ("preload",)).get("preload", [])
        path = path + ("preload",)
    modules = v.strings(value, path)
    for i, name in enumerate(modules):
        if not MODULE_RE.fullmatch(name):
            raise v.fail(path + (i,), f"expected a module name such as torch or "
                                      f"sklearn.datasets; got {checks.shown(name)}")
    return modules


def _pilots(v: _Validator, value: Any, path: KeyPath) -> Pilots | None:
    """`true` or a mapping: pilot jobs, a default for each key not given; `false`: none."""
    if isinstance(value, bool):
        return Pilots() if value else None
    v.typed(value, path, lambda x: isinstance(x, dict), "true, false or a mapping with "
                                                        f"keys {', '.join(PILOT_KEYS)}")
    d = v.mapping(value, path, PILOT_KEYS)

    def count(x: Any, p: KeyPath) -> int:
        return v.integer(x, p, 1)

    pilots = Pilots(
        time=v.optional(d, "time", path, functools.partial(_slurm_time_limit, v), Pilots.time),
        **{k: v.optional(d, k, path, count, getattr(Pilots, k))
           for k in ("nodes", "max", "slots_per_node")},
        **{k: v.optional(d, k, path, v.duration, getattr(Pilots, k))
           for k in ("idle_timeout", "grace", "heartbeat")})
    found = checks.pilot_heartbeat(pilots, d.get("heartbeat") is not None)
    if found:
        raise v.fail(path + (found[0],), found[1])
    return pilots


def _slurm_time_limit(v: _Validator, value: Any, path: KeyPath) -> str:
    """A finite Slurm time limit as sbatch --time takes it, as written."""
    text = str(value).strip() if is_int(value) or isinstance(value, str) else ""
    v.typed(value, path, lambda _: durations.time_limit_seconds(text),
            "a Slurm time limit such as 90 (minutes), 01:30:00 or 2-00:00:00")
    return text

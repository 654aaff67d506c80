"""Whether a trial's command, its parameters substituted, fits what exec(2) and sbatch take.

Linux refuses an exec with E2BIG ("Argument list too long") when one argument or one
environment string holds MAX_ARG_STRLEN bytes or more (its NUL counted), or when all of them
together pass a quarter of the stack limit. Which strings a trial's command becomes depends
on the executor:

- local: the whole command (after the executor's trap lines) is the one argument of
  `/bin/sh -c`, and the driver's environment plus the trial's goes with it;
- slurm: the command is lines of a batch script, which sbatch sends to the controller as a
  file (at most Slurm's max_script_size, 4 MiB unless the site sets SchedulerParameters);
  bash then runs it, and each word it passes to a program is one argument. A launcher or a
  container puts the command in one word, `sh -c '<command>'`, so the longest word is the
  longest argument any exec of the trial sees.

Every trial gets $HPSEARCH_PARAMS (all parameters as JSON) in its environment on both.
Lengths are taken with each parameter at its longest value (a float at full precision) and
the highest trial id. On Slurm the size of a whole exec (arguments and environment together)
is not checked: the compute node's stack limit and the job's environment decide it there.
"""

from __future__ import annotations

import json
import math
import os
import re
import resource
import shlex
from typing import Any

from hpsearch.errors import shown
from hpsearch.executors.registry import facts
from hpsearch.launch.attempt import Launch, build_launch, shell_body
from hpsearch.spec.model import Param, Spec
from hpsearch.template import shell_value

MAX_ARG_STRLEN = 32 * 4096  # include/uapi/linux/binfmts.h: one string, its NUL included
MAX_SCRIPT_SIZE = 4 * 1024 * 1024  # slurm.conf max_script_size: the default
PARAMS_ENV = "HPSEARCH_PARAMS"
_MAX_ARGS_TOTAL = 6 * 1024 * 1024  # fs/exec.c: 3/4 of _STK_LIM, whatever the stack limit

Problem = tuple[tuple[str, ...], str]


def command_size_problem(spec: Spec) -> Problem | None:
    """(key path, problem) if a trial of `spec` is too large for exec(2) or sbatch on its
    executor; else None. The spec's launcher must already be known to build (launch_problem)."""
    params = {p.name: longest_value(p) for p in spec.search.space}
    recipe = spec.trial_recipe(facts(spec.executor).on_slurm)
    launch = build_launch(recipe, max(0, spec.search.trials - 1), 1, params)
    where = f"(trial {launch.trial_id}, each parameter at its longest value)"
    params_fit = _bytes(f"{PARAMS_ENV}={launch.env[PARAMS_ENV]}") < MAX_ARG_STRLEN
    hint = ("pass fewer values on the command line: a trial finds them all in "
            "$HPSEARCH_TRIAL_DIR/params.json" if params_fit else
            "use fewer parameters or shorter values (as JSON in $HPSEARCH_PARAMS, which "
            "every trial gets, they are too long as well)")
    if not facts(spec.executor).on_slurm:
        shell = shell_body(spec.checkpoints.signal, launch.command)  # as the local executor runs it
        problem = _local_problem(shell, where, hint)
    else:
        shell, problem = None, _slurm_problem(spec, launch, where, hint)
    return problem or _environment_problem(spec, launch.env, shell)


def _local_problem(shell: str, where: str, hint: str) -> Problem | None:
    size = _bytes(shell)
    if size < MAX_ARG_STRLEN:
        return None
    return ("command",), (
        f"the command is {size:,} bytes as the local executor runs it, its parameters "
        f"substituted {where}; it is one argument of /bin/sh -c, and Linux lets one argument "
        f"hold at most {MAX_ARG_STRLEN - 1:,} bytes (MAX_ARG_STRLEN): every trial would fail "
        f"with 'Argument list too long'; {hint}")


def _slurm_problem(spec: Spec, launch: Launch, where: str, hint: str) -> Problem | None:
    from hpsearch.slurm.sbatch import batch_script

    word = max(_words(launch.command), key=_bytes, default="")
    if _bytes(word) >= MAX_ARG_STRLEN:
        return ("command",), (
            f"one argument of the command is {_bytes(word):,} bytes once its parameters are "
            f"substituted {where}: {shown(word, 40)}; Linux lets one argument hold at most "
            f"{MAX_ARG_STRLEN - 1:,} bytes (MAX_ARG_STRLEN): every trial would fail with "
            f"'Argument list too long'; {hint}")
    size = _bytes(batch_script(spec.slurm_job(), launch))
    if size > MAX_SCRIPT_SIZE:
        return ("command",), (
            f"a trial's batch script is {size:,} bytes with the command's parameters "
            f"substituted {where}; Slurm refuses a batch script over {MAX_SCRIPT_SIZE:,} "
            f"bytes unless the site raises max_script_size; {hint}")
    return None


def _environment_problem(spec: Spec, env: dict[str, str], shell: str | None) -> Problem | None:
    """An environment string of the trial over MAX_ARG_STRLEN; with the local executor's
    `shell`, also the whole exec (argv and environment) over this machine's limit."""
    spec_env = {name for name, _ in spec.env}
    for name, value in env.items():
        size = _bytes(f"{name}={value}")
        if size < MAX_ARG_STRLEN:
            continue
        if name in spec_env:
            return ("env", name), (f"{name}=... is {size:,} bytes as an environment "
                                   f"string; Linux lets one hold at most "
                                   f"{MAX_ARG_STRLEN - 1:,} bytes (MAX_ARG_STRLEN): every "
                                   "trial would fail with 'Argument list too long'")
        return ("search", "space"), (
            f"the parameters are {size:,} bytes as ${name}, which every trial gets in its "
            f"environment (trial dir and parameters at their longest); Linux lets one "
            f"environment string hold at most {MAX_ARG_STRLEN - 1:,} bytes (MAX_ARG_STRLEN): "
            "every trial would fail with 'Argument list too long'; use fewer parameters or "
            "shorter values")
    if shell is None:
        return None
    strings = ["/bin/sh", "-c", shell] + [f"{k}={v}" for k, v in {**os.environ, **env}.items()]
    total, limit = sum(_bytes(s) + 1 + 8 for s in strings), exec_limit()
    if total > limit:
        return ("command",), (
            f"the command and the environment of a trial are {total:,} bytes together; one "
            f"exec on this machine may take at most {limit:,} bytes (a quarter of the stack "
            f"limit, `ulimit -s`): every trial would fail with 'Argument list too long'")
    return None


def exec_limit() -> int:
    """The bytes one exec may take here, its strings and their pointers together (Linux
    4.13 and later: a quarter of the stack limit, from 128 KiB up to 6 MiB)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_STACK)
    quarter = _MAX_ARGS_TOTAL if soft == resource.RLIM_INFINITY else soft // 4
    return max(MAX_ARG_STRLEN, min(_MAX_ARGS_TOTAL, quarter))


def longest_value(p: Param) -> Any:
    """A value of `p` whose text on a command line and in JSON is as long as any it takes:
    a sampled float has full precision, and is longest next to a bound or mid-range."""
    if p.kind == "fixed":
        return p.value
    if p.kind == "categorical":
        return max(p.choices, key=_text_length)
    if p.low is None or p.high is None:
        # validate() gives every int and float parameter both bounds.
        raise ValueError(f"{p.name}: a {p.kind} parameter needs low and high")
    if p.kind == "int":
        return max((p.low, p.high), key=lambda v: len(str(v)))
    low, high = float(p.low), float(p.high)
    return max((math.nextafter(low, high), math.nextafter(high, low), low + (high - low) / 3),
               key=_text_length)


def _text_length(value: Any) -> int:
    return len(shlex.quote(shell_value(value))) + len(json.dumps(value))


# A shell word as shlex.split (POSIX mode) reads it: unquoted text, '...', "..." (where a
# backslash escapes only " and itself) and backslash escapes, run together. The same words
# as shlex, in C: shlex reads a command one character at a time in Python (10.8 s for a
# 4.5 MB batch script's command against a fraction of a second).
_WORD = re.compile(r"""(?:[^ \t\r\n'"\\]+|'[^']*'|"(?:[^"\\]|\\.)*"|\\.)+""", re.S)
_PIECE = re.compile(r"""'([^']*)'|"((?:[^"\\]|\\.)*)"|\\(.)|([^'"\\]+)""", re.S)
_IN_DOUBLE = re.compile(r'\\(["\\])')


def _words(command: str) -> list[str]:
    """The words the shell passes as arguments, as far as shlex can tell; where it cannot
    (an unbalanced quote in a here-document), each line stands for a word."""
    if _bytes(command) < MAX_ARG_STRLEN:  # no word of it can be too long: not needed
        return [command]
    words = split_words(command)
    return command.splitlines() if words is None else words


def split_words(command: str) -> list[str] | None:
    """shlex.split(command), or None where shlex raises ValueError (an unbalanced quote,
    a backslash at the end)."""
    words, end = [], 0
    for match in _WORD.finditer(command):
        if command[end:match.start()].strip(" \t\r\n"):
            return None
        words.append(_unquoted(match.group()))
        end = match.end()
    return None if command[end:].strip(" \t\r\n") else words


def _unquoted(word: str) -> str:
    out = []
    for single, double, escaped, plain in _PIECE.findall(word):
        out.append(single or (_IN_DOUBLE.sub(r"\1", double) if double else "")
                   or escaped or plain)
    return "".join(out)


def _bytes(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))

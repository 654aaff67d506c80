"""What `submit`, `validate` and `plan` check on this machine's files before the first trial
(issue 38): the workdir, and the script or program the command starts."""

from __future__ import annotations

import os
import re
from pathlib import Path

from hpsearch.errors import BadInput
from hpsearch.executors.registry import facts
from hpsearch.launch.registry import RUNTIMES
from hpsearch.spec.model import Spec
from hpsearch.spec.yamlpos import load_yaml_with_lines


def check_here(spec: Spec, file: str | Path) -> None:
    """What `submit`, `validate` and `plan` check on this machine before the first trial,
    so that a typo does not fail every launch (issue 38): the workdir is a folder here, and
    on the local executor a script the command runs through `{python}` is in it. BadInput
    at the key's line. Not for specs read back from a store (another host may lack them).
    A command that starts with a path (`./train.sh`) must be an executable file there too
    (missing_here)."""
    lines = load_yaml_with_lines(spec.text, str(file))[1] if spec.text else {}
    if not spec.workdir.is_dir():
        given = ("workdir",) in lines
        raise BadInput(f"{spec.workdir} is not a folder here: every trial runs its command "
                       "there; make it, or fix " + ("workdir" if given else
                                                     "the spec's location (the default)"),
                       str(file), lines.get(("workdir",)), "workdir" if given else None)
    problem = missing_here(spec)
    if problem and not facts(spec.executor).on_slurm:
        raise BadInput(problem, str(file), lines.get(("command",)), "command")


def missing_here(spec: Spec) -> str | None:
    """What the command names that this machine's workdir lacks: a script it runs through
    `{python}`, or a program it starts with by path (`./train.sh`: an executable file;
    not in a container, where the path may be the image's). An error on the local executor
    (check_here); on Slurm a warning (the nodes may see another filesystem)."""
    match = re.search(r"\{python\}\s+([^\s{};|&<>'\"$`]+\.py)(?=\s|$)", spec.command)
    if match and not (spec.workdir / match.group(1)).is_file():
        return (f"{match.group(1)} is not a file in {spec.workdir}, where the trials run "
                "`{python} " + match.group(1) + "`; check its name and workdir")
    program = _PROGRAM.match(spec.command)
    if program is None or RUNTIMES.get(spec.container.runtime).uses_image:  # a path in it?
        return None
    path = spec.workdir / program.group(1)
    if not (path.is_file() and os.access(path, os.X_OK)):
        what = "not executable" if path.is_file() else "not a file"
        return (f"{program.group(1)} is {what} in {spec.workdir}, where the trials start "
                "their command with it; check its name, its mode (chmod +x) and workdir")
    return None


# A command that starts with a path of its own (`./train.sh`, `/opt/x/bin/train`), no
# placeholder or shell character in it: the local executor runs it from the workdir.
_PROGRAM = re.compile(r"\s*((?:\.{1,2}/|/)[^\s{};|&<>'\"$`()*?\[\]]+)(?=\s|$)")

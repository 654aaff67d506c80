"""The programs a trial's launch text starts on the host, outside any container, and those of
them that this machine's PATH lacks.

Each must be on PATH wherever a trial runs: here for the local executor, on every compute
node for Slurm (a batch script inherits the submitting shell's PATH, but a node may not have
the program, or the folder may not be there). `validate` and `plan` warn about a missing one
rather than fail: the login node may lack a program that the compute nodes have. torchrun in
a container runs inside the image, where this machine's PATH tells nothing.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from hpsearch.launch.registry import LAUNCHERS, RUNTIMES


def host_programs(launcher: str, launcher_args: tuple[str, ...], runtime: str,
                  warm: bool) -> list[tuple[str, str]]:
    """(spec key, program) for each program the launch text runs on the host: the
    launcher's (Launcher.host_program: none for `none`; none for torchrun inside a container,
    or replaced by hpsearch.warm with executor.warm and no launcher args), then the container
    runtime's (ContainerRuntime.program_for: none for `none` and pyxis)."""
    runtime_class = RUNTIMES.get(runtime)
    programs = [("launcher", LAUNCHERS.get(launcher)(launcher_args).host_program(
                    runtime_class.uses_image, warm)),
                ("container.runtime", runtime_class.program_for(runtime))]
    return [(key, program) for key, program in programs if program]


def missing_programs(launcher: str, launcher_args: tuple[str, ...], runtime: str, warm: bool,
                     slurm: bool, path: str | None = None) -> list[tuple[str, str]]:
    """(spec key, warning) for each host program (host_programs) not on `path` (default:
    $PATH); `slurm`: the trials run on compute nodes, not here."""
    warnings = []
    for key, program in host_programs(launcher, launcher_args, runtime, warm):
        if shutil.which(program, path=path if path is not None else os.environ.get("PATH")):
            continue
        if slurm:
            where = ("it must be on PATH on the compute nodes, or every trial fails with exit "
                     "code 127")
        else:
            where = "the local executor runs trials here: each would fail with exit code 127"
        warnings.append((key, f"{program} is not on PATH here; {where}{_next_to_python(program)}"
                              " (docs/trial.md#your-scripts-environment)"))
    return warnings


def _next_to_python(program: str) -> str:
    """A hint when `program` is in the folder of the Python running hpsearch (a virtual
    environment used without activating it): that folder is not on PATH."""
    beside = Path(sys.executable).parent / program
    if beside.is_file() and os.access(beside, os.X_OK):
        return (f"; it is in {beside.parent}, beside hpsearch's Python, which is not on "
                "PATH: activate that environment before submitting (trials and Slurm jobs "
                "inherit its PATH), or set PATH in the spec's env:")
    return ""

"""Launchers (how a trial's ranks start) and container runtimes (the image each rank runs in).

    launcher = make_launcher(spec.launcher)
    runtime = make_runtime(spec.container)
    layout = layout_for(spec.resources.for_params(params),  # the trial's own resources
                        master_port=port_for(spec.name, trial_id),
                        under_slurm=True, workdir=..., trial_dir=...)
    text = launcher.wrap(command, layout, runtime)   # batch script body, or local command

One file per launcher (none, srun, torchrun, mpirun, horovodrun) and per runtime (host,
apptainer, pyxis, charliecloud, podman); the seams are in base.py, the names in registry.py
(LAUNCHERS, RUNTIMES); docs/launchers.md shows every combination. attempt.py builds an
attempt's Launch (its quoted command and environment) from the spec's TrialRecipe, for the
driver and `plan` alike; programs.py names the programs a launch starts on the host, which
`validate` and `plan` look for on PATH.
"""

from __future__ import annotations

from hpsearch.launch.base import (
    RANK_ENV,
    TRIAL_ENV,
    ContainerRuntime,
    Launcher,
    LaunchError,
    RankLayout,
    layout_for,
    port_for,
)
from hpsearch.launch.registry import make_launcher, make_runtime

__all__ = [
    "RANK_ENV",
    "TRIAL_ENV",
    "ContainerRuntime",
    "LaunchError",
    "Launcher",
    "RankLayout",
    "layout_for",
    "make_launcher",
    "make_runtime",
    "port_for",
]

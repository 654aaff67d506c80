"""Launchers (how a trial's ranks start) and container runtimes (the image each rank runs in).

    launcher = make_launcher(spec.launcher)
    runtime = make_runtime(spec.container)
    layout = layout_for(spec.resources.for_params(params),  # the trial's own resources
                        master_port=port_for(spec.name, trial_id),
                        under_slurm=True, workdir=..., trial_dir=...)
    text = launcher.wrap(command, layout, runtime)   # batch script body, or local command

One file per launcher (none, srun, torchrun, mpirun, horovodrun) and per runtime (host,
apptainer, pyxis, charliecloud, podman); the seams are in base.py; docs/launchers.md shows
every combination.
"""

from __future__ import annotations

from collections.abc import Iterable

from hpsearch.launch.apptainer import ApptainerRuntime
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
from hpsearch.launch.charliecloud import CharliecloudRuntime
from hpsearch.launch.horovodrun import HorovodrunLauncher
from hpsearch.launch.host import HostRuntime
from hpsearch.launch.mpirun import MpirunLauncher
from hpsearch.launch.none import NoLauncher
from hpsearch.launch.podman import PodmanRuntime
from hpsearch.launch.pyxis import PyxisRuntime
from hpsearch.launch.srun import SrunLauncher
from hpsearch.launch.torchrun import TorchrunLauncher

LAUNCHERS: dict[str, type[Launcher]] = {
    "none": NoLauncher, "srun": SrunLauncher, "torchrun": TorchrunLauncher,
    "mpirun": MpirunLauncher, "horovodrun": HorovodrunLauncher,
}


def make_launcher(spec_launcher) -> Launcher:
    """From the spec's `launcher` (hpsearch.spec.model.Launcher, or just its type name)."""
    kind, args = ((spec_launcher, ()) if isinstance(spec_launcher, str)
                  else (spec_launcher.type, spec_launcher.args))
    if kind not in LAUNCHERS:
        raise LaunchError(f"launcher: {kind!r}: expected one of {', '.join(LAUNCHERS)}")
    return LAUNCHERS[kind](args)


def make_runtime(spec_container, spec_env_names: Iterable[str] = ()) -> ContainerRuntime:
    """From the spec's `container` (hpsearch.spec.model.Container), or None for no container.

    spec_env_names: the names of the spec's `env`; runtimes that pass variables by name
    (podman, pyxis's --container-env) pass them along with `container.env`.
    """
    if spec_container is None or spec_container.runtime == "none":
        return HostRuntime()
    c = spec_container
    if not c.image:
        raise LaunchError(f"container.image: runtime {c.runtime} needs an image")
    env = tuple(dict.fromkeys([*spec_env_names, *c.env]))
    if c.runtime in ("apptainer", "singularity"):
        return ApptainerRuntime(c.runtime, c.image, c.binds, c.args)
    if c.runtime == "pyxis":
        return PyxisRuntime(c.image, c.binds, env, c.args)
    if c.runtime == "charliecloud":
        return CharliecloudRuntime(c.image, c.binds, c.args)
    if c.runtime == "podman":
        return PodmanRuntime(c.image, c.binds, env, c.args)
    raise LaunchError(f"container.runtime: {c.runtime!r}: expected none, apptainer, "
                      "singularity, pyxis, charliecloud or podman")


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

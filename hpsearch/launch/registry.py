"""The launchers and container runtimes a spec may name, in the order docs/launchers.md lists
them: adding one is its own module, one line here (or an entry point in the groups
`hpsearch.launchers` and `hpsearch.runtimes`) and its tests, never a branch on its name
elsewhere. Facts the rest of hpsearch asks about one live on its class (`program`,
`uses_image`, `needs_srun_step`, `host_program()`), not in lists of names.

    launcher = make_launcher(spec.launcher)                 # LAUNCHERS[type](args)
    runtime = make_runtime(spec.container, env_names)       # RUNTIMES[runtime].from_spec(...)
"""

from __future__ import annotations

from collections.abc import Iterable

from hpsearch.launch.apptainer import ApptainerRuntime
from hpsearch.launch.base import ContainerRuntime, Launcher, LaunchError
from hpsearch.launch.charliecloud import CharliecloudRuntime
from hpsearch.launch.horovodrun import HorovodrunLauncher
from hpsearch.launch.host import HostRuntime
from hpsearch.launch.mpirun import MpirunLauncher
from hpsearch.launch.none import NoLauncher
from hpsearch.launch.podman import PodmanRuntime
from hpsearch.launch.pyxis import PyxisRuntime
from hpsearch.launch.srun import SrunLauncher
from hpsearch.launch.torchrun import TorchrunLauncher
from hpsearch.registry import Registry

LAUNCHERS: Registry[type[Launcher]] = Registry("launcher", "hpsearch.launchers")
LAUNCHERS.add("none", NoLauncher)  # the command runs once, as one rank
LAUNCHERS.add("srun", SrunLauncher)
LAUNCHERS.add("torchrun", TorchrunLauncher)
LAUNCHERS.add("mpirun", MpirunLauncher)
LAUNCHERS.add("horovodrun", HorovodrunLauncher)

RUNTIMES: Registry[type[ContainerRuntime]] = Registry("container runtime", "hpsearch.runtimes")
RUNTIMES.add("none", HostRuntime)  # ranks run on the host as they are
RUNTIMES.add("apptainer", ApptainerRuntime)
RUNTIMES.add("singularity", ApptainerRuntime)  # the same class: the name is the program
RUNTIMES.add("pyxis", PyxisRuntime)
RUNTIMES.add("charliecloud", CharliecloudRuntime)
RUNTIMES.add("podman", PodmanRuntime)


def make_launcher(spec_launcher) -> Launcher:
    """From the spec's `launcher` (hpsearch.spec.model.Launcher, or just its type name)."""
    kind, args = ((spec_launcher, ()) if isinstance(spec_launcher, str)
                  else (spec_launcher.type, spec_launcher.args))
    if kind not in LAUNCHERS:
        raise LaunchError(f"launcher: {kind!r}: expected one of {', '.join(LAUNCHERS.names())}")
    return LAUNCHERS.get(kind)(args)


def make_runtime(spec_container, spec_env_names: Iterable[str] = ()) -> ContainerRuntime:
    """From the spec's `container` (hpsearch.spec.model.Container), or None for no container.

    spec_env_names: the names of the spec's `env`; runtimes that pass variables by name
    (podman, pyxis's --container-env) pass them along with `container.env`.
    """
    name = "none" if spec_container is None else spec_container.runtime
    if name not in RUNTIMES:
        *names, last = RUNTIMES.names()
        raise LaunchError(f"container.runtime: {name!r}: expected {', '.join(names)} or {last}")
    return RUNTIMES.get(name).from_spec(name, spec_container, spec_env_names)

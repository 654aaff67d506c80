"""`runtime: apptainer` or `singularity`: `apptainer exec [--nv] --bind ... --pwd DIR IMAGE`.

Apptainer keeps the host's environment unless told --cleanenv, so the HPSEARCH_* and rank
variables (and `container.env`) reach the ranks with no flags; --cleanenv in `args` would
drop them and is refused. Apptainer is not installable on hpsearch's test machines: golden
files pin these command lines (tests/golden/launch/).
"""

from __future__ import annotations

from collections.abc import Sequence

from hpsearch.launch.base import ContainerRuntime, LaunchError, RankLayout, merged_binds

DROPS_ENV = ("--cleanenv", "-e")


class ApptainerRuntime(ContainerRuntime):
    """Registered as `apptainer` and as `singularity`: the name it is built with is the
    program it runs (Singularity's command line is Apptainer's)."""

    name = program = "apptainer"

    def __init__(self, image: str = "", binds: Sequence[str] = (), env: Sequence[str] = (),
                 args: Sequence[str] = (), name: str | None = None) -> None:
        super().__init__(image, binds, env, args, name)
        self.program = self.name  # apptainer | singularity
        dropping = [a for a in self.args if a in DROPS_ENV]
        if dropping:
            raise LaunchError(f"container.args: {dropping[0]} would drop the HPSEARCH_* "
                              "and rank variables the trial needs; pass only what is needed "
                              "with container.env instead")

    @classmethod
    def program_for(cls, name: str) -> str | None:
        return name

    def wrap(self, argv: list[str], layout: RankLayout) -> list[str]:
        binds = [arg for b in merged_binds(self.binds, layout) for arg in ("--bind", b.spec())]
        return [self.program, "exec", *(["--nv"] if layout.gpus_per_node > 0 else []), *binds,
                *(["--pwd", layout.workdir] if layout.workdir else []), *self.args,
                self.image, *argv]

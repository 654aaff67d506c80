"""`runtime: pyxis`: NVIDIA's srun plugin (enroot images): options on the srun step.

pyxis is not a program: `srun --container-image=IMG --container-mounts=... CMD` runs each task
of the step in the image, with the task's environment (HPSEARCH_*, rank variables, SLURM_*).
`container.env` names go to --container-env, so their host values win over the image's.
Only srun steps can use it: launcher none gets a one-task step, mpirun and horovodrun are
refused, and the local executor cannot use it. Golden files only (no pyxis here).
"""

from __future__ import annotations

from hpsearch.launch.base import ContainerRuntime, RankLayout, merged_binds


class PyxisRuntime(ContainerRuntime):
    name = "pyxis"
    needs_srun_step = True  # and no program of its own

    def wrap(self, argv: list[str], layout: RankLayout) -> list[str]:
        return list(argv)  # the srun options do it

    def srun_options(self, layout: RankLayout) -> list[str]:
        mounts = ",".join(b.spec() for b in merged_binds(self.binds, layout))
        return [f"--container-image={self.image}",
                *([f"--container-mounts={mounts}"] if mounts else []),
                *([f"--container-workdir={layout.workdir}"] if layout.workdir else []),
                *([f"--container-env={','.join(self.env)}"] if self.env else []),
                *self.args]

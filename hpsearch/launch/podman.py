"""`runtime: podman`: `podman run --rm --network=host --ipc=host -v ... -e ... IMAGE CMD`.

Podman starts from the image's environment, so every variable a rank needs is named with
-e (a trailing * passes all host variables with that prefix): HPSEARCH_*, the rank and
rendezvous variables, what Slurm, MPI and Horovod set for their tasks, CUDA_VISIBLE_DEVICES,
and `container.env`. Host networking lets ranks on several nodes meet; host IPC gives
NCCL, gloo and data loaders their shared memory. GPUs by CDI (--device nvidia.com/gpu=all).
Golden files only here.
"""

from __future__ import annotations

from hpsearch.launch.base import RANK_ENV, ContainerRuntime, RankLayout, merged_binds

PASSED = ("HPSEARCH_*", *RANK_ENV, "SLURM_*", "OMPI_*", "PMI_*", "PMIX_*", "MPI_LOCALRANKID",
          "HOROVOD_*", "CUDA_VISIBLE_DEVICES")


class PodmanRuntime(ContainerRuntime):
    name = program = "podman"

    def wrap(self, argv: list[str], layout: RankLayout) -> list[str]:
        volumes = [arg for b in merged_binds(self.binds, layout) for arg in ("-v", b.spec())]
        names = dict.fromkeys([*PASSED, *self.env])  # ordered, no repeats
        env = [arg for name in names for arg in ("-e", name)]
        gpus = ["--device", "nvidia.com/gpu=all"] if layout.gpus_per_node > 0 else []
        return [self.program, "run", "--rm", "--network=host", "--ipc=host", *gpus, *volumes,
                *(["-w", layout.workdir] if layout.workdir else []), *env, *self.args,
                self.image, *argv]

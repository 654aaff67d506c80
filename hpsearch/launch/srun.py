"""`launcher: srun`: one rank per Slurm task, nodes x tasks_per_node in all.

Each task's shell reads its rank from Slurm (SLURM_PROCID, SLURM_LOCALID, SLURM_NODEID)
inside the container. `args` go to srun (e.g. `--mpi=pmix` for an MPI program).
"""

from __future__ import annotations

from hpsearch.launch.base import (
    NODELIST,
    ContainerRuntime,
    Launcher,
    LaunchError,
    RankLayout,
    command_line,
    exports,
    preamble,
    rank_script,
    script,
    step_cpus_per_task,
)


class SrunLauncher(Launcher):
    name = program = "srun"

    def wrap(self, command: str, layout: RankLayout, runtime: ContainerRuntime) -> str:
        if not layout.under_slurm:
            raise LaunchError("launcher: srun starts ranks as Slurm tasks: it needs "
                              "`executor: slurm` (this trial runs on the local executor; "
                              "use launcher torchrun, mpirun or none there)")
        ranks = rank_script([exports({
            "RANK": '"$SLURM_PROCID"', "WORLD_SIZE": layout.world_size,
            "LOCAL_RANK": '"$SLURM_LOCALID"', "LOCAL_WORLD_SIZE": layout.tasks_per_node,
            "NODE_RANK": '"$SLURM_NODEID"'})], command, layout)
        argv = ["srun", f"--nodes={layout.nodes}", NODELIST, f"--ntasks={layout.world_size}",
                f"--ntasks-per-node={layout.tasks_per_node}",
                # Since Slurm 22.05 srun no longer takes --cpus-per-task from the allocation.
                # (in a pilot: all of the pilot's CPUs on the node; see CPU_NARROW)
                step_cpus_per_task(layout.tasks_per_node, layout.cpus_per_task),
                "--kill-on-bad-exit=1",
                *self.args, *runtime.srun_options(layout)]
        return script([*preamble(layout, runtime),
                       command_line(argv, runtime, ["sh", "-c", ranks], layout)])

"""`launcher: none`: the command runs once, as one rank (world size 1).

Under Slurm it runs on the allocation's first node, in the batch script itself; a command
that starts its own processes over the nodes still finds MASTER_ADDR and MASTER_PORT.
"""

from __future__ import annotations

from hpsearch.launch.base import (
    FIRST_NODE,
    ContainerRuntime,
    Launcher,
    LaunchError,
    RankLayout,
    command_line,
    exports,
    preamble,
    script,
    step_cpus_per_task,
)

ONE_RANK = {"RANK": 0, "WORLD_SIZE": 1, "LOCAL_RANK": 0, "LOCAL_WORLD_SIZE": 1, "NODE_RANK": 0}


class NoLauncher(Launcher):
    name = "none"

    def wrap(self, command: str, layout: RankLayout, runtime: ContainerRuntime) -> str:
        self.check(layout, runtime)
        if self.args:
            raise LaunchError("launcher.args: launcher none starts no program to pass them to")
        if not runtime.uses_image and not layout.under_slurm:
            return command  # a plain local process: nothing to set up, the command as written
        lines = [*preamble(layout, runtime), exports(ONE_RANK)]
        if not runtime.uses_image:
            return script([*lines, command])
        srun: list[str] = []
        if runtime.needs_srun_step:
            # pyxis starts containers only in srun steps: one step of one task.
            cpus = layout.tasks_per_node * layout.cpus_per_task
            srun = ["srun", "--nodes=1", FIRST_NODE, "--ntasks=1", step_cpus_per_task(1, cpus),
                    *runtime.srun_options(layout)]
        return script([*lines, command_line(srun, runtime, ["sh", "-c", command], layout)])

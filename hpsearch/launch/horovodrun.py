"""`launcher: horovodrun`: nodes x tasks_per_node ranks, `horovodrun -np N -H hosts`.

Like mpirun: horovodrun runs on the host, each rank starts its own container, and the host
list comes from the allocation (localhost locally). horovodrun passes its whole environment
to the ranks. Ranks read RANK from Horovod's Gloo launcher (HOROVOD_*), else from Open MPI.
"""

from __future__ import annotations

from hpsearch.launch.base import (
    ContainerRuntime,
    Launcher,
    RankLayout,
    command_line,
    exports,
    rank_script,
    script,
)
from hpsearch.launch.mpirun import host_list, node_rank_line


class HorovodrunLauncher(Launcher):
    name = program = "horovodrun"

    def wrap(self, command: str, layout: RankLayout, runtime: ContainerRuntime) -> str:
        lines, hosts = host_list(layout, runtime, self.name)
        ranks = rank_script([
            exports({"RANK": '"${HOROVOD_RANK:-$OMPI_COMM_WORLD_RANK}"',
                     "WORLD_SIZE": layout.world_size,
                     "LOCAL_RANK": '"${HOROVOD_LOCAL_RANK:-$OMPI_COMM_WORLD_LOCAL_RANK}"',
                     "LOCAL_WORLD_SIZE": layout.tasks_per_node}),
            node_rank_line(layout)], command, layout)
        horovodrun = ["horovodrun", "-np", str(layout.world_size), "-H", hosts, *self.args]
        return script([*lines, command_line(horovodrun, runtime, ["sh", "-c", ranks], layout)])

"""`launcher: mpirun` (Open MPI's): nodes x tasks_per_node ranks over the allocation's nodes.

mpirun runs in the batch script on the host; each rank starts its own container. The host
list comes from the allocation at run time (node1:2,node2:2); locally it is localhost.
Ranks read RANK from Open MPI (OMPI_COMM_WORLD_*), else from PMI (MPICH, Intel MPI). `-x`
passes MASTER_ADDR, MASTER_PORT and the HPSEARCH_* variables to remote ranks; add
`-x NAME` to `args` for others. pyxis cannot be used: use launcher srun with `--mpi=pmix`.
"""

from __future__ import annotations

from hpsearch.launch.base import (
    TRIAL_ENV,
    ContainerRuntime,
    Launcher,
    LaunchError,
    RankLayout,
    Ref,
    command_line,
    exports,
    hosts_line,
    preamble,
    rank_script,
    script,
)

PASSED = ("MASTER_ADDR", "MASTER_PORT", *TRIAL_ENV)


def host_list(layout: RankLayout, runtime: ContainerRuntime,
              program: str) -> tuple[list[str], str]:
    """(script lines that set MASTER_ADDR/PORT and the host list, the host list argument)."""
    if runtime.needs_srun_step:
        raise LaunchError(f"launcher: {program} cannot start {runtime.name} containers "
                          f"({runtime.name} applies only to srun steps): use launcher srun, "
                          "with args [--mpi=pmix] for an MPI program")
    if layout.under_slurm:
        return [*preamble(layout, runtime), hosts_line(layout)], Ref("$hpsearch_hosts")
    return preamble(layout, runtime), f"localhost:{layout.tasks_per_node}"


def node_rank_line(layout: RankLayout) -> str:
    # Ranks fill each host's slots in host order, so the node index is RANK / slots.
    return exports({"NODE_RANK": f'"$((RANK / {layout.tasks_per_node}))"'})


class MpirunLauncher(Launcher):
    name = "mpirun"

    def wrap(self, command: str, layout: RankLayout, runtime: ContainerRuntime) -> str:
        lines, hosts = host_list(layout, runtime, "mpirun")
        ranks = rank_script([
            exports({"RANK": '"${OMPI_COMM_WORLD_RANK:-$PMI_RANK}"',
                     "WORLD_SIZE": layout.world_size,
                     "LOCAL_RANK": '"${OMPI_COMM_WORLD_LOCAL_RANK:-$MPI_LOCALRANKID}"',
                     "LOCAL_WORLD_SIZE": layout.tasks_per_node}),
            node_rank_line(layout)], command)
        passed = [arg for name in PASSED for arg in ("-x", name)]
        mpirun = ["mpirun", "-np", str(layout.world_size), "--host", hosts, *passed, *self.args]
        return script([*lines, command_line(mpirun, runtime, ["sh", "-c", ranks], layout)])

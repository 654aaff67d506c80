"""`launcher: mpirun` (Open MPI's): nodes x tasks_per_node ranks over the allocation's nodes.

mpirun runs in the batch script on the host; each rank starts its own container. The host
list comes from the allocation at run time (node1:2,node2:2); locally it is localhost.
Ranks read RANK from Open MPI (OMPI_COMM_WORLD_*), else from PMI (MPICH, Intel MPI). `-x`
passes MASTER_ADDR, MASTER_PORT and the HPSEARCH_* variables to remote ranks; add
`-x NAME` to `args` for others. pyxis cannot be used: use launcher srun with `--mpi=pmix`.

Checked for real with Open MPI 4.1 (Debian 12) on the emulated cluster
(tests/slurm/test_mpirun.py), where these options were needed:
- `--allow-run-as-root`: mpirun refuses to start as root without it, and Slurm runs a job
  as its submitter, root in containers and CI. For other users the option changes nothing.
- `--bind-to none`: by default Open MPI binds each rank of a 1- or 2-rank job to one core
  (to a socket for more), which confines a rank's cpus_per_task threads to one core. The
  Slurm step already confines the node's ranks to the CPUs it was given.
- `--mca plm_slurm_args "--nodelist=$SLURM_JOB_NODELIST --cpus-per-task=T*C"`: under Slurm,
  Open MPI starts one orted per node with `srun --ntasks-per-node=1 --ntasks=N orted`. It
  takes the node list from SLURM_JOB_NODELIST, but srun places the step on the whole
  allocation and ignores that variable: a pilot that narrows SLURM_JOB_NODELIST (and
  SLURM_NNODES, SLURM_TASKS_PER_NODE) to a subset of its nodes for one trial would get its
  ranks on the allocation's first nodes instead, while Open MPI believes they run on the
  subset. `--nodelist` makes the daemons' step land on the named nodes (Open MPI appends
  its own --nodelist after it when it needs fewer daemons, and srun keeps the last).
  `--cpus-per-task` gives each node's daemon step the CPUs of that node's ranks: srun does
  not inherit cpus-per-task from the allocation (Slurm 22.05), and a one-CPU step would
  confine every rank on the node to one CPU where Slurm uses cgroups.
The subset must be in the allocation's order (docs/launchers.md says why).
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
# Why each is there: the module docstring.
OPEN_MPI_OPTIONS = ("--allow-run-as-root", "--bind-to", "none")


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


def daemon_step_lines(layout: RankLayout) -> tuple[list[str], list[str]]:
    """(script lines, mpirun options) that put Open MPI's orted step on the nodes of
    $SLURM_JOB_NODELIST with the CPUs of their ranks; nothing outside Slurm."""
    if not layout.under_slurm:
        return [], []
    cpus = layout.tasks_per_node * layout.cpus_per_task
    # in a pilot: all of the pilot's CPUs on the node (hpsearch.launch.base.CPU_NARROW)
    line = ('hpsearch_srun_args="--nodelist=$SLURM_JOB_NODELIST '
            f'--cpus-per-task=${{HPSEARCH_NODE_CPUS:-{cpus}}}"')
    return [line], ["--mca", "plm_slurm_args", Ref("$hpsearch_srun_args")]


class MpirunLauncher(Launcher):
    name = program = "mpirun"

    def wrap(self, command: str, layout: RankLayout, runtime: ContainerRuntime) -> str:
        lines, hosts = host_list(layout, runtime, self.name)
        step_lines, step_options = daemon_step_lines(layout)
        ranks = rank_script([
            exports({"RANK": '"${OMPI_COMM_WORLD_RANK:-$PMI_RANK}"',
                     "WORLD_SIZE": layout.world_size,
                     "LOCAL_RANK": '"${OMPI_COMM_WORLD_LOCAL_RANK:-$MPI_LOCALRANKID}"',
                     "LOCAL_WORLD_SIZE": layout.tasks_per_node}),
            node_rank_line(layout)], command, layout)
        passed = [arg for name in PASSED for arg in ("-x", name)]
        mpirun = ["mpirun", "-np", str(layout.world_size), "--host", hosts,
                  *OPEN_MPI_OPTIONS, *step_options, *passed, *self.args]
        return script([*lines, *step_lines,
                       command_line(mpirun, runtime, ["sh", "-c", ranks], layout)])

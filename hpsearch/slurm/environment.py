"""The environment a Slurm command, or a trial inside a pilot, gets: never the shape of the
allocation it happens to run in.

Inside a Slurm job (a `--driver-job` driver, salloc, a pipeline rule run as a job) the
environment holds Slurm's output variables: SLURM_JOB_ID, SLURM_MEM_PER_CPU (from
DefMemPerCPU), SLURM_CPUS_PER_TASK, SLURM_NTASKS... sbatch reads SLURM_*/SBATCH_* as input,
and a job it submits inherits the rest (--export=ALL): a trial submitted with `--mem` then
dies in its first srun, "SLURM_MEM_PER_CPU, SLURM_MEM_PER_GPU, and SLURM_MEM_PER_NODE are
mutually exclusive" (seen on the test cluster; snakemake#2230 is the same failure). So
Slurm commands run without them (`outside_allocation`): what a job gets is what its batch
script asks for.

A trial in a pilot is the other way round: its srun steps must run in the pilot's job
(SLURM_JOB_ID stays), but the job's shape is the pilot's, not the trial's: the pilot's
SLURM_NTASKS, SLURM_CPUS_PER_TASK or SLURM_MEM_PER_NODE would size the trial's own srun
steps. `for_pilot_trial` sets them afresh for the trial's nodes, tasks, CPUs and GPUs.

Outside an allocation nothing is removed: SLURM_*/SBATCH_* there are the user's own
settings (SBATCH_ACCOUNT in a login shell), which sbatch should see.

GPUs are named to programs by one list per vendor runtime (GPU_VISIBILITY); Slurm sets each
of them, as the gres.conf flags say, to the same list. Inside an allocation they are the
allocation's, like SLURM_*: a driver started in `salloc --gpus=2` must not hand its two GPUs
to a CPU-only trial's job (sbatch exports the environment). In a pilot each trial gets each
list the pilot has narrowed to its own GPUs, and all of them empty when it asked for none
(an empty CUDA_VISIBLE_DEVICES hides every GPU from CUDA; the other runtimes read an empty
list as their own documentation says: only cgroups, which a pilot's overlapping steps do not
get per trial, hide a device from a program that ignores them).
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping

# what a job or step sets for the programs in it (PMI/PMIx: the MPI plugins of srun)
_ALLOCATION = ("SLURM_", "SBATCH_", "SRUN_", "SALLOC_", "PMI_", "PMIX_", "OMPI_COMM_WORLD_")
_SET_BY_SLURM = frozenset({"OMPI_MCA_orte_precondition_transports", "OMPI_MCA_plm_slurm_args"})
# the user's, not the allocation's: where the cluster is and how commands print times
_KEEP = frozenset({"SLURM_CONF", "SLURM_TIME_FORMAT", "SLURM_CLUSTERS"})
# which GPUs a program may use, one list per runtime (CUDA, ROCm, HIP, oneAPI Level Zero,
# OpenCL/ROCclr); hpsearch.launch.base.GPU_NARROW narrows the same names in a step
GPU_VISIBILITY = ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
                  "ZE_AFFINITY_MASK", "GPU_DEVICE_ORDINAL")

# the job's shape, as a pilot's job has it: a trial in it gets its own (for_pilot_trial)
_SHAPE = ("SLURM_NTASKS", "SLURM_NPROCS", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE",
          "SLURM_CPUS_PER_TASK", "SLURM_CPUS_ON_NODE", "SLURM_JOB_CPUS_PER_NODE",
          "SLURM_MEM_PER_CPU", "SLURM_MEM_PER_NODE", "SLURM_MEM_PER_GPU",
          "SLURM_GPUS", "SLURM_GPUS_PER_NODE", "SLURM_GPUS_PER_TASK", "SLURM_GPUS_ON_NODE",
          "SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "SLURM_TRES_PER_TASK",
          "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_TASK_PID",
          "SLURM_STEP_ID", "SLURM_STEPID", "SLURM_STEP_NODELIST", "SLURM_STEP_NUM_NODES",
          "SLURM_STEP_NUM_TASKS", "SLURM_STEP_TASKS_PER_NODE", "SLURM_DISTRIBUTION",
          "SLURM_CPU_BIND", "SLURM_CPU_BIND_LIST", "SLURM_CPU_BIND_TYPE",
          "SLURM_CPU_BIND_VERBOSE", "SLURM_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NNODES",
          "SLURM_JOB_NUM_NODES")


def in_allocation(env: Mapping[str, str]) -> bool:
    return "SLURM_JOB_ID" in env or "SLURM_JOBID" in env


def outside_allocation(env: Mapping[str, str]) -> dict[str, str]:
    """`env` without what the Slurm job or step it runs in set, its GPU lists included
    (unchanged outside one)."""
    if not in_allocation(env):
        return dict(env)
    return {name: value for name, value in env.items()
            if name in _KEEP or not (name.startswith(_ALLOCATION) or name in _SET_BY_SLURM
                                     or name in GPU_VISIBILITY)}


def without_shape(env: Mapping[str, str]) -> dict[str, str]:
    """`env` without the allocation's shape: the base of every trial in a pilot."""
    return {name: value for name, value in env.items()
            if name not in _SHAPE and not name.startswith(("PMI_", "PMIX_"))}


def for_pilot_trial(nodes: str, n_nodes: int, tasks_per_node: int, cpus_per_task: int,
                    gpus: tuple[str, ...] | list[str], gpu_positions: list[int],
                    mem_mb: int | None, node_cpus: int = 0,
                    cpu_positions: list[int] | None = None,
                    pilot_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The Slurm variables of a trial on `n_nodes` nodes (`nodes`, compressed) of a pilot,
    as an allocation of the trial's own size would set them. `gpus`: its GPU ids on the
    pilot's first node (none: it asked for none); `gpu_positions`: where they are among the
    job's GPUs on each node (0-based; a slot has the same positions on every node), for its
    srun steps (HPSEARCH_GPU_FIELDS: hpsearch.launch.base.GPU_NARROW); `pilot_env`: the
    pilot's environment, whose GPU lists (GPU_VISIBILITY) the trial gets narrowed to those
    positions. `node_cpus`: the pilot's CPUs on each node; `cpu_positions`: the slot's among
    them (0-based), for CPU_NARROW: its steps ask for all `node_cpus` per node
    (SLURM_OVERCOMMIT), unbound (SLURM_CPU_BIND=none), and each narrows itself."""
    tasks = tasks_per_node * n_nodes
    env = {"SLURM_JOB_NODELIST": nodes, "SLURM_NODELIST": nodes,
           "SLURM_NNODES": str(n_nodes), "SLURM_JOB_NUM_NODES": str(n_nodes),
           "SLURM_NTASKS": str(tasks), "SLURM_NPROCS": str(tasks),
           "SLURM_NTASKS_PER_NODE": str(tasks_per_node),
           "SLURM_TASKS_PER_NODE": f"{tasks_per_node}(x{n_nodes})",
           "SLURM_CPUS_PER_TASK": str(cpus_per_task),
           "SLURM_CPUS_ON_NODE": str(tasks_per_node * cpus_per_task),
           "SLURM_JOB_CPUS_PER_NODE": f"{tasks_per_node * cpus_per_task}(x{n_nodes})"}
    env.update(pilot_gpu_lists(pilot_env or {}, gpu_positions))
    # HPSEARCH_GPU_FIELDS empty: no GPU (GPU_NARROW empties a step's lists)
    env.update({"CUDA_VISIBLE_DEVICES": ",".join(gpus),
                "HPSEARCH_GPU_FIELDS": ",".join(str(i + 1) for i in gpu_positions)})
    if gpus:
        # output variables only: SLURM_GPUS_PER_NODE would be srun's input, and every
        # overlapping step of the trial would get the node's first GPU
        env.update({"SLURM_GPUS_ON_NODE": str(len(gpus)), "SLURM_JOB_GPUS": ",".join(gpus)})
    if node_cpus and cpu_positions:
        # SLURM_OVERCOMMIT: srun's -O, so each step's --cpus-per-task=node_cpus is per
        # node, whatever its tasks (hpsearch.launch.base.step_cpus_per_task)
        env.update({"HPSEARCH_NODE_CPUS": str(node_cpus), "SLURM_CPU_BIND": "none",
                    "SLURM_OVERCOMMIT": "1",
                    "HPSEARCH_CPU_FIELDS": ",".join(str(i + 1) for i in cpu_positions)})
    if mem_mb:
        env["SLURM_MEM_PER_NODE"] = str(mem_mb)
    return env


def pilot_gpu_lists(pilot_env: Mapping[str, str], positions: list[int]) -> dict[str, str]:
    """Each GPU list the pilot has (GPU_VISIBILITY; Slurm sets them to the same list), cut
    to `positions` of it (0-based; none: an empty list)."""
    lists = {}
    for name in GPU_VISIBILITY:
        if name in pilot_env:
            ids = pilot_env[name].split(",")
            lists[name] = ",".join(ids[i] for i in positions if i < len(ids))
    return lists


def job_end(env: Mapping[str, str], timeout: float = 10.0) -> float | None:
    """When the job this process runs in reaches its time limit (Unix time): from
    SLURM_JOB_END_TIME where Slurm sets it (23.02 and later), else from squeue's `%e` (22.05
    sets no such variable); None outside a job, or when neither answers."""
    try:
        return float(env["SLURM_JOB_END_TIME"])
    except (KeyError, ValueError):
        pass
    job_id = env.get("SLURM_JOB_ID")
    if not job_id:
        return None
    try:
        proc = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%e"], capture_output=True,
                              text=True, timeout=timeout, check=False,
                              env={**env, "SLURM_TIME_FORMAT": "%s"})
        return float(proc.stdout.split()[0]) if proc.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return None


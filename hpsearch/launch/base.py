"""The Launcher and ContainerRuntime seams, and the shell pieces every launcher shares.

A trial's command runs as `launcher.wrap(command, layout, runtime)`: the launcher starts the
ranks and, inside each rank, asks the runtime to wrap `sh -c <rank script>` in the image. The
launcher composes the runtime (not the other way round, as the first design drew it) because a
container must start inside each rank on each node, and pyxis is not a program at all but a
set of srun options. docs/launchers.md shows what each combination produces.

Every value that differs between nodes or ranks (SLURM_PROCID, the first node's address) is
read from the environment by a shell at run time; everything Python knows is a literal,
quoted once by `shell_join`.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from hpsearch.errors import HpsearchError
from hpsearch.procs import module_argv

if TYPE_CHECKING:
    from hpsearch.spec.model import Container

# The trial contract's variables (docs/trial.md), passed into every rank and container.
TRIAL_ENV = ("HPSEARCH_EXPERIMENT", "HPSEARCH_TRIAL_ID", "HPSEARCH_ATTEMPT",
             "HPSEARCH_TRIAL_DIR", "HPSEARCH_CHECKPOINT_DIR", "HPSEARCH_PARAMS")
# What every launcher sets in every rank, with the same meaning as torchrun's.
RANK_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK",
            "MASTER_ADDR", "MASTER_PORT")

# Master ports are in 20000-32767: below Linux's ephemeral range (32768-60999 by default),
# from which any outgoing connection on the node (sacct, munge, NFS, another job's) takes its
# local port; a master port there was seen taken: torchrun's EADDRINUSE killed a DDP trial.
PORT_LOW, PORT_SPAN = 20000, 12768
LOCAL_ADDR = "127.0.0.1"


class LaunchError(HpsearchError):
    """A launcher/container combination that cannot work (exit code 2)."""


@dataclass(frozen=True)
class RankLayout:
    """Where a trial's ranks go, as the launcher needs it."""

    nodes: int = 1
    tasks_per_node: int = 1
    gpus_per_node: int = 0
    cpus_per_task: int = 1
    master_port: int = 29500   # unique per trial: see port_for()
    under_slurm: bool = False  # True: the text is a batch script's body in an allocation
    binds: tuple[str, ...] = ()  # host paths every runtime binds at the same path
    workdir: str | None = None   # the command's working directory (containers start there)
    gpu_sampler: str | None = None  # the python that samples GPUs on nodes after the first
    # executor.warm: the python whose `-m hpsearch.warm ranks` starts torchrun's workers
    warm_ranks: str | None = None

    @property
    def node_count(self) -> int:
        """Nodes the ranks span. The local executor runs a trial on this machine: one."""
        return self.nodes if self.under_slurm else 1

    @property
    def world_size(self) -> int:
        return self.node_count * self.tasks_per_node


def port_for(experiment: str, trial_id: int) -> int:
    """The trial's master port: a stable hash of the experiment, plus the trial id, so
    trials of one experiment never share a port (until 12768 trials apart)."""
    digest = hashlib.sha256(experiment.encode()).digest()
    return PORT_LOW + (int.from_bytes(digest[:8], "big") + trial_id) % PORT_SPAN


def layout_for(resources, *, master_port: int, under_slurm: bool, workdir: str,
               trial_dir: str, gpu_sampler: str | None = None,
               warm_ranks: str | None = None) -> RankLayout:
    """A RankLayout from the spec's `resources`, binding the workdir and the trial dir."""
    return RankLayout(resources.nodes, resources.tasks_per_node, resources.gpus_per_node,
                      resources.cpus_per_task, master_port, under_slurm,
                      (str(workdir), str(trial_dir)), str(workdir), gpu_sampler, warm_ranks)


# -- binds ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Bind:
    src: str
    dst: str
    opts: str = ""  # as written after the second colon (ro, rw, ...): runtime-specific

    def spec(self) -> str:
        """src:dst[:opts], the form apptainer, pyxis and podman all read."""
        return f"{self.src}:{self.dst}" + (f":{self.opts}" if self.opts else "")


def parse_bind(text: str) -> Bind:
    src, _, rest = text.partition(":")
    dst, _, opts = rest.partition(":")
    if not src.startswith("/") or (dst and not dst.startswith("/")):
        raise LaunchError(f"container.binds: {text!r}: expected src[:dst[:opts]] with "
                          "absolute paths")
    return Bind(src, dst or src, opts)


def _inside(path: str, parent: str) -> bool:
    return PurePosixPath(path).is_relative_to(PurePosixPath(parent))


def merged_binds(container_binds: Iterable[str], layout: RankLayout) -> list[Bind]:
    """The spec's binds, then the layout's same-path binds that no bind already shows at
    their own path; parents before children, so a bind inside another stays visible."""
    binds = [parse_bind(b) for b in container_binds]
    same_path = [b.dst for b in binds if b.src == b.dst]
    for path in layout.binds:
        if any(b.dst == path for b in binds) or any(_inside(path, p) for p in same_path):
            continue
        binds.append(Bind(path, path))
        same_path.append(path)
    return sorted(binds, key=lambda b: len(PurePosixPath(b.dst).parts))


# -- shell text -------------------------------------------------------------------------------

class Ref(str):
    """An argument with `$name` references that the batch script's shell expands (a host
    list computed at run time). shell_join double-quotes it instead of single-quoting it."""

    _SAFE = re.compile(r"[A-Za-z0-9_$:.,=/+{}()-]*")  # () for $((arithmetic)) only

    def __new__(cls, text: str) -> Ref:
        if not cls._SAFE.fullmatch(text):
            raise ValueError(f"Ref {text!r}: only names, $references, $((arithmetic)) "
                             "and , : . = / + -")
        return super().__new__(cls, text)


def shell_join(argv: Sequence[str]) -> str:
    """shlex.join, except that Ref arguments keep their $references live."""
    return " ".join(f'"{a}"' if isinstance(a, Ref) else shlex.quote(a) for a in argv)


def command_line(launcher_argv: Sequence[str], runtime: ContainerRuntime,
                 argv: list[str], layout: RankLayout) -> str:
    """The launcher's argv, then `argv` wrapped by the runtime, joined once: one line per
    part (launcher, runtime, program), continued with backslashes, so a reader sees each."""
    wrapped = runtime.wrap(argv, layout)
    if wrapped[len(wrapped) - len(argv):] != argv:
        raise AssertionError(f"{runtime.name}: wrap must end with the argv it wraps")
    parts = [launcher_argv, wrapped[:len(wrapped) - len(argv)], argv]
    return " \\\n    ".join(shell_join(p) for p in parts if p)


def exports(pairs: Mapping[str, str | int]) -> str:
    """`export A=x B=y`; values are literal ints or shell words written by this package."""
    return "export " + " ".join(f"{name}={value}" for name, value in pairs.items())


# The shell's own pid, in $hpsearch_pid, without `$$`: a rank's script reaches its shell
# through torchrun, which passes each argument through string.Template (its ${local_rank}
# macro), and that turns `$$` into `$`. `read` is a builtin: /proc/self is the shell.
SHELL_PID = "read -r hpsearch_pid _ </proc/self/stat"


# A trial in a pilot shares the pilot's nodes with other trials; its srun steps overlap the
# pilot's, and Slurm gives such a step all of the job's GPUs on each of its nodes (it cannot
# pick distinct GPUs for overlapping steps, and its --gpu-bind leaves a one-task step alone).
# The pilot tells the trial its GPUs' positions among the job's GPUs on every node
# (HPSEARCH_GPU_FIELDS, 1-based, as cut takes them; empty: it asked for none); in a step that
# got GPUs from Slurm, this narrows every GPU list slurmstepd set (CUDA, ROCm, HIP, oneAPI,
# OpenCL: hpsearch.slurm.environment.GPU_VISIBILITY) to those, and a trial of no GPUs gets
# every list empty in any step. Where the lists do not then name as many GPUs as the trial
# holds, its stderr says so. Elsewhere (a job of its own, no pilot) it does nothing.
_GPU_LISTS = ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
              "ZE_AFFINITY_MASK", "GPU_DEVICE_ORDINAL")


def _count(name: str) -> str:
    """Shell: how many comma-separated entries $name has (nothing when it is empty)."""
    return f"$(printf %s \"${{{name}-}}\" | awk -F, '{{print NF}}')"


GPU_NARROW = (
    'if [ -n "${HPSEARCH_GPU_FIELDS+set}" ]; then '
    'if [ -z "$HPSEARCH_GPU_FIELDS" ]; then '
    + " ".join(f"{name}=" for name in (*_GPU_LISTS, "SLURM_STEP_GPUS")) + "; export "
    + " ".join(_GPU_LISTS) + "; "
    'elif [ -n "${SLURM_STEP_GPUS-}" ]; then '
    # `%s,`: cut prints a line without its delimiter whole, whatever -f asks
    + " ".join(f'[ -z "${{{name}+set}}" ] || {{ {name}=$(printf %s, "${name}" | cut -d, '
               f'-f"$HPSEARCH_GPU_FIELDS"); export {name}; }};'
               for name in (*_GPU_LISTS, "SLURM_STEP_GPUS")) + " fi; "
    f'[ "{_count("CUDA_VISIBLE_DEVICES")}" = "{_count("HPSEARCH_GPU_FIELDS")}" ] || '
    'echo "hpsearch: warning: this step was not narrowed to the GPUs of its trial (positions '
    '$HPSEARCH_GPU_FIELDS of the pilot GPUs; CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset}'
    ' SLURM_STEP_GPUS=${SLURM_STEP_GPUS-unset}): it may use GPUs other trials hold" >&2; fi')


# The same for cores. Slurm binds an overlapping step to the lowest cores the job has on a
# node (task/affinity, and the step's cgroup), whatever other steps hold, and a --cpu-bind
# mask outside the step's cores is refused. So in a pilot every step of a trial asks for
# all of the pilot's CPUs on the node (HPSEARCH_NODE_CPUS, see step_cpus_per_task) with
# SLURM_CPU_BIND=none, and this narrows the shell, and all it starts, to the trial's slot:
# positions HPSEARCH_CPU_FIELDS (1-based) of the CPUs it is allowed. It narrows only where
# it is allowed exactly the pilot's CPUs on the node (else Slurm bound nothing, or bound the
# step to fewer: then there is no share to pick from) and where taskset is installed; where
# it cannot, the trial's stderr says so (the trial may then run on other trials' cores).
CPU_NARROW = (
    'if [ -n "${HPSEARCH_CPU_FIELDS-}" ]; then hpsearch_cpus=; '
    'command -v taskset >/dev/null 2>&1 && '
    'hpsearch_cpus=$(awk -v want="$HPSEARCH_CPU_FIELDS" -v all="${HPSEARCH_NODE_CPUS-0}" '
    "'/^Cpus_allowed_list:/ { n = split($2, r, \",\"); k = 0; "
    'for (i = 1; i <= n; i++) { m = split(r[i], b, "-"); hi = m > 1 ? b[2] : b[1]; '
    "for (c = b[1] + 0; c <= hi + 0; c++) cpu[++k] = c } "
    'if (k != all + 0) exit; m = split(want, w, ","); s = ""; '
    'for (j = 1; j <= m; j++) { if (w[j] + 0 > k) exit; s = s (j > 1 ? "," : "") cpu[w[j]] } '
    "print s }' /proc/self/status); "
    'if [ -n "$hpsearch_cpus" ]; then ' + SHELL_PID + '; '
    'taskset -pc "$hpsearch_cpus" "$hpsearch_pid" >/dev/null; else '
    'echo "hpsearch: warning: this step was not narrowed to the cores of its trial (positions '
    '$HPSEARCH_CPU_FIELDS of the pilot $HPSEARCH_NODE_CPUS CPUs on the node; it may run on '
    "CPUs $(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)"
    '$(command -v taskset >/dev/null 2>&1 || echo ", no taskset")): it may share cores '
    'with other trials" >&2; fi; fi')


def step_cpus_per_task(tasks_per_node: int, cpus_per_task: int) -> Ref:
    """srun's --cpus-per-task for a step of `tasks_per_node` tasks per node: the trial's own,
    or in a pilot all of the pilot's CPUs on the node (CPU_NARROW). There the pilot sets
    SLURM_OVERCOMMIT (srun's -O, hpsearch.slurm.environment.for_pilot_trial), which makes
    -c count per node, not per task: the step gets all of them whether or not its tasks
    divide them. (Before, $((cpus / tasks)) rounded down, Slurm bound the step to the node's
    lowest cores, the narrowing had no share to pick from, and the trial ran on another
    slot's cores.) `tasks_per_node` does not change the text: the same for every step."""
    return Ref(f"--cpus-per-task=${{HPSEARCH_NODE_CPUS:-{cpus_per_task}}}")


def rank_script(export_lines: Sequence[str], command: str, layout: RankLayout) -> str:
    """What one rank's `sh -c` runs: under Slurm its GPUs and cores in a pilot, its rank
    variables, (on a node after the first, local rank 0 starts the node's GPU sampler) then
    the user's command."""
    sampler = ([other_nodes_sampler_line(layout.gpu_sampler)]
               if layout.gpu_sampler and layout.node_count > 1 else [])
    return "\n".join([*([GPU_NARROW, CPU_NARROW] if layout.under_slurm else []),
                      *export_lines, *sampler, command])


# GPU sampling (hpsearch.gpu.sampler, docs/gpu.md): one sampler per node of a trial that asked
# for GPUs, on the GPUs it holds there. The first node's starts in the trial's launch text
# (hpsearch.launch.attempt), every other node's in its local rank 0. A subshell starts it, so
# a `wait` in the trial's command never waits for it; it watches the shell that started it
# (SHELL_PID, read before the subshell) and ends with it; its output goes nowhere, and
# nothing it does can fail the trial.
def gpu_sampler_line(python: str, node: str = "0") -> str:
    return (f"{SHELL_PID}; ( {shlex.join(module_argv(python, 'hpsearch.gpu.sampler'))} {node} "
            "\"$hpsearch_pid\" </dev/null >/dev/null 2>&1 & )")


def other_nodes_sampler_line(python: str) -> str:
    return ('if [ "${LOCAL_RANK-}" = 0 ] && [ "${NODE_RANK:-0}" != 0 ]; then '
            + gpu_sampler_line(python, '"$NODE_RANK"') + "; fi")


# srun steps name their nodes: in a job it is the whole allocation (what srun takes anyway);
# in a pilot the pilot narrows SLURM_JOB_NODELIST to the trial's nodes, which srun itself
# ignores (it places a step anywhere in the allocation), so it is passed on explicitly.
NODELIST = Ref("--nodelist=$SLURM_JOB_NODELIST")
FIRST_NODE = Ref("--nodelist=$hpsearch_first_node")  # a one-node step on the trial's first node

# The first node's NodeAddr: what slurmd listens on, so it reaches the node even where node
# names do not resolve (the emulated test cluster: every node is 127.0.0.1). A pilot tells
# its trials both (it asks slurmctld once for all its nodes, Slurm.node_addrs): two scontrol
# runs, one of them a call to slurmctld, cost 19 ms and 11 CPU-ms a trial here. Only a
# trial of that pilot's job takes them; one started under another job asks.
_SLURM_MASTER = (
    'if [ -n "${HPSEARCH_FIRST_NODE_ADDR-}" ] && [ -n "${HPSEARCH_FIRST_NODE-}" ] && '
    '[ "${HPSEARCH_PILOT_JOB-}" = "${SLURM_JOB_ID-}" ]; then '
    'hpsearch_first_node=$HPSEARCH_FIRST_NODE; MASTER_ADDR=$HPSEARCH_FIRST_NODE_ADDR; else',
    'hpsearch_first_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
    ('MASTER_ADDR=$(scontrol show node -o "$hpsearch_first_node"'
     " | sed -n 's/.* NodeAddr=\\([^ ]*\\).*/\\1/p'); fi"),
    'export MASTER_ADDR="${MASTER_ADDR:-${hpsearch_first_node:-$(hostname)}}"',
)


def preamble(layout: RankLayout, runtime: ContainerRuntime) -> list[str]:
    """The runtime's setup, then MASTER_ADDR and MASTER_PORT, exported in the script's shell."""
    if layout.under_slurm:
        master = [*_SLURM_MASTER, f"export MASTER_PORT={layout.master_port}"]
    else:
        master = [exports({"MASTER_ADDR": LOCAL_ADDR, "MASTER_PORT": layout.master_port})]
    return [*runtime.setup_lines(), *master]


# A host list in Open MPI / horovodrun form (node1:2,node2:2), from the allocation.
def hosts_line(layout: RankLayout) -> str:
    return ('hpsearch_hosts=$(scontrol show hostnames "$SLURM_JOB_NODELIST"'
            f" | sed 's/$/:{layout.tasks_per_node}/' | paste -sd, -)")


def script(lines: Sequence[str]) -> str:
    return "\n".join(lines)


# -- the seams --------------------------------------------------------------------------------

class ContainerRuntime(ABC):
    """Runs an argv inside an image on this node.

    Every runtime is built by `from_spec(name, container, env_names)` (make_runtime looks
    the class up in hpsearch.launch.registry.RUNTIMES and calls it), and holds the same
    settings: the image, the spec's binds, the variables passed by name, extra arguments."""

    name = "none"
    uses_image = True        # ranks run inside an image (False: the host runtime, `none`)
    program: str | None = None  # what it runs on the host, on PATH where trials run (ch-run);
                                # None: nothing (the host runtime; pyxis, srun options)
    needs_srun_step = False  # pyxis: the image applies only to srun steps

    def __init__(self, image: str = "", binds: Sequence[str] = (), env: Sequence[str] = (),
                 args: Sequence[str] = (), name: str | None = None) -> None:
        self.image, self.binds, self.env, self.args = image, tuple(binds), tuple(env), tuple(args)
        self.name = name or type(self).name  # the name it is registered under

    @classmethod
    def from_spec(cls, name: str, container: Container | None,
                  env_names: Iterable[str] = ()) -> ContainerRuntime:
        """The runtime registered as `name`, for the spec's `container` (None: none given)
        and the names of the spec's `env`, which runtimes that pass variables by name
        (podman, pyxis's --container-env) pass along with `container.env`."""
        if cls.uses_image and not (container and container.image):
            raise LaunchError(f"container.image: runtime {name} needs an image")
        if container is None:
            return cls(name=name)
        env = tuple(dict.fromkeys([*env_names, *container.env]))
        return cls(container.image or "", container.binds, env, container.args, name=name)

    @classmethod
    def program_for(cls, name: str) -> str | None:
        """The program the runtime registered as `name` runs on the host (`program`)."""
        return cls.program

    @abstractmethod
    def wrap(self, argv: list[str], layout: RankLayout) -> list[str]:
        """The argv that runs `argv` inside the image (same argv for no container)."""

    def srun_options(self, layout: RankLayout) -> list[str]:
        """Options an srun step needs to start its tasks in the image (pyxis only)."""
        return []

    def setup_lines(self) -> list[str]:
        """Shell lines the script runs first, in the host's shell (charliecloud: $USER)."""
        return []


class Launcher(ABC):
    """Starts a trial's command as its ranks; each rank in the runtime's image.

    Every launcher is built as `cls(args)` with the spec's `launcher.args` (make_launcher
    looks the class up in hpsearch.launch.registry.LAUNCHERS)."""

    name = "none"
    program: str | None = None  # what it runs on the host, on PATH where trials run (srun);
                                # None: nothing (launcher none)

    def __init__(self, args: Sequence[str] = ()) -> None:
        self.args = tuple(args)

    @abstractmethod
    def wrap(self, command: str, layout: RankLayout, runtime: ContainerRuntime) -> str:
        """The shell text the trial runs. Under Slurm it is the batch script's body (it runs
        on the allocation's first node and starts every rank); locally it runs as it is.
        Raises LaunchError for a combination that cannot work."""

    def host_program(self, in_image: bool, warm: bool) -> str | None:
        """The program the launch text runs on the host, outside any container, with a
        runtime that runs ranks in an image (`in_image`) or not, with `executor.warm` set
        or not (hpsearch.launch.programs warns when PATH lacks it)."""
        return self.program

    def checkpoint_signal_env(self, signal: str) -> dict[str, str]:
        """Variables the launcher needs to pass `signal` (SIGUSR1) on to the ranks."""
        return {}

    def check(self, layout: RankLayout, runtime: ContainerRuntime) -> None:
        if runtime.needs_srun_step and not layout.under_slurm:
            raise LaunchError(f"container.runtime: {runtime.name} is a Slurm srun plugin: it "
                              "needs `executor: slurm` (this trial runs on the local executor)")

"""Typed, validated experiment spec. Built only by hpsearch.spec.validate."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, get_args

DIRECTIONS = ("minimize", "maximize")
PLACEMENT_POLICIES = ("leaf-switch", "any")
PLACEMENT_MODES = ("auto", "switches", "nodelist")
SHARES = ("private", "group")  # who may read an experiment's folder (docs/security.md)


def same_value(a: Any, b: Any) -> bool:
    """Equal and of one type: a choice `1` is not `true` or `1.0` (JSON keeps each apart)."""
    return type(a) is type(b) and a == b


@dataclass(frozen=True)
class Condition:
    """`when: {parent: value or [values]}`: the parameter exists in a trial only where the
    categorical `parent`, defined earlier in the space, exists and has one of `values`."""

    parent: str
    values: tuple

    def holds(self, params: dict[str, Any]) -> bool:
        return self.parent in params and any(same_value(params[self.parent], v)
                                             for v in self.values)


@dataclass(frozen=True)
class Param:
    """One search dimension. kind is float | int | categorical | fixed. With `when`, it is
    conditional: present in a trial only where its condition holds (docs/spec.md)."""

    name: str
    kind: str
    low: float | int | None = None
    high: float | int | None = None
    log: bool = False
    step: float | int | None = None
    choices: tuple = ()
    value: Any = None
    when: Condition | None = None

    def active_in(self, params: dict[str, Any]) -> bool:
        """Whether this parameter takes part in a trial whose earlier parameters (in spec
        order, the active ones only) are `params`."""
        return self.when is None or self.when.holds(params)

    def grid_values(self) -> list:
        """Every value this parameter takes in a grid search."""
        if self.kind == "fixed":
            return [self.value]
        if self.kind == "categorical":
            return list(self.choices)
        low, high, step = self.low, self.high, self.step
        if low is None or high is None or step is None:
            # validate() gives every numeric parameter of a grid search all three.
            raise ValueError(f"{self.name}: a grid over a {self.kind} parameter needs low, "
                             f"high and step")
        n = int(round((high - low) / step))
        values = [low + i * step for i in range(n + 1)]
        if self.kind == "int":
            return [int(v) for v in values]
        # Round away float noise (0.1 * 3 = 0.30000000000000004) to the step's precision.
        decimals = max(0, -int(f"{step:e}".split("e")[1])) + 6
        return [round(float(v), decimals) for v in values if v <= high + 1e-12]


# What a trial cost, measured by the driver over all its attempts when it ends, usable as
# objective metrics (docs/spec.md#cost-as-an-objective); a trial's own report of one of these
# names does not count for the objective.
COST_METRICS = ("node_hours", "gpu_hours", "wall_s")


@dataclass(frozen=True)
class Objective:
    metric: str
    direction: str  # minimize | maximize

    @property
    def measured(self) -> bool:
        """A cost metric (COST_METRICS) the driver measures, not one the trial reports."""
        return self.metric in COST_METRICS


# Early stopping (docs/spec.md#searchpruner): Optuna's pruners, by the name the spec uses.
PRUNERS = ("none", "median", "percentile", "successive_halving", "hyperband", "wilcoxon",
           "patient", "threshold")
PRUNER_ALIASES = {"asha": "successive_halving"}
PRUNER_MODES = ("stop", "promotion")
PROMOTING = ("successive_halving", "hyperband")  # the pruners with a promotion mode


@dataclass(frozen=True)
class MaxFailures:
    """search.max_failures: when a search whose trials keep failing stops (exit 1) instead
    of spending its budget on the same error. Counted over trials that failed for good
    (after their retries); a pruned trial is no failure."""

    first: int = 5  # this many trials failed, none completed yet since the driver started
    fraction: float | None = None  # more than this share of finished trials failed, once
                                   # `first` (or 5, if first is 0) have finished

    @property
    def enabled(self) -> bool:
        return bool(self.first) or self.fraction is not None


@dataclass(frozen=True)
class Pruner:
    """Which trials stop early, judged on the objective's intermediate reports (one reported
    step = one unit of resource)."""

    type: str = "none"
    options: tuple[tuple[str, Any], ...] = ()  # the Optuna pruner's keyword arguments
    wrapped: Pruner | None = None  # patient only: the pruner it makes patient (None: none)
    # stop: a running trial is stopped when judged hopeless; promotion: each trial runs only
    # to its rung's step budget, and the best 1/reduction_factor are resumed to the next
    mode: str = "stop"
    max_resource: int | None = None  # promotion: the steps of a full trial (the last rung)

    @property
    def enabled(self) -> bool:
        return self.type != "none"

    @property
    def promotion(self) -> bool:
        return self.mode == "promotion"

    def option(self, name: str, default: Any = None) -> Any:
        return dict(self.options).get(name, default)


@dataclass(frozen=True)
class Search:
    strategy: str
    trials: int
    parallel: int
    seed: int | None
    space: tuple[Param, ...]
    pruner: Pruner = field(default_factory=Pruner)
    max_failures: MaxFailures = field(default_factory=MaxFailures)
    timeout: float | None = None  # seconds from the experiment's creation; then no new trial
    enqueue: tuple[dict, ...] = ()  # points asked first (parameters left out are sampled)
    warm_start: tuple[str, ...] = ()  # experiments whose finished trials the sampler learns
    reproducible: bool = False  # a seeded parallel search asks the same trials every run
    options: tuple[tuple[str, Any], ...] = ()  # the strategy's own settings, defaults filled

    def option(self, name: str) -> Any:
        return dict(self.options)[name]

    @property
    def tuned(self) -> tuple[Param, ...]:
        return tuple(p for p in self.space if p.kind != "fixed")

    @property
    def fixed(self) -> dict[str, Any]:
        return {p.name: p.value for p in self.space if p.kind == "fixed"}

    @property
    def conditional(self) -> bool:
        """Whether some parameter exists only in some trials (a `when`)."""
        return any(p.when is not None for p in self.space)

    def active(self, suggest) -> dict[str, Any]:
        """A trial's parameters, in spec order, active ones only: `suggest(param)` gives
        the value of each searched one, asked only once its condition is known to hold
        (define-by-run); fixed ones take their value."""
        params: dict[str, Any] = {}
        for p in self.space:
            if p.active_in(params):
                params[p.name] = p.value if p.kind == "fixed" else suggest(p)
        return params


# The fields of `resources` that may name a searched parameter ("{nodes}"): each trial then
# has its own value (docs/spec.md#per-trial-resources).
PER_TRIAL_FIELDS = ("nodes", "tasks_per_node", "gpus_per_node", "cpus_per_task", "mem", "time")


@dataclass(frozen=True)
class Resources:
    """What one trial needs. The local executor uses gpus_per_node; Slurm uses all of it.

    A field in `per_trial` takes each trial's value of a searched parameter (for_params);
    the field itself then holds the largest value that parameter takes: what a search-wide
    limit (the local executor's GPU slots, a pilot's size) must allow for."""

    nodes: int = 1
    tasks_per_node: int = 1
    gpus_per_node: int = 0
    cpus_per_task: int = 1
    mem: str | None = None
    time: str | None = None
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    sbatch_extra: tuple[str, ...] = ()
    per_trial: tuple[tuple[str, str], ...] = ()  # (field, the parameter it takes its value of)
    # Scouts (docs/brokerage.md#scouts): `time: auto 04:00:00`, `mem: auto 16G`: these
    # fields hold the ceiling, and trials ask for what the first `scouts` ones took.
    auto: tuple[str, ...] = ()
    scouts: int = 3

    def for_params(self, params: dict[str, Any]) -> Resources:
        """The resources of the trial whose parameters are `params`: the one place a
        trial's own size is made (launch, batch script, arrays, placement, GPU slots,
        retries, plan). Without per-trial fields, these resources themselves."""
        if not self.per_trial:
            return self
        own: dict[str, Any] = {}
        for name, param in self.per_trial:
            if param in params:  # validate() refuses a parameter some trials lack
                value = params[param]
                own[name] = int(value) if name not in ("mem", "time") else str(value)
        return replace(self, per_trial=(), **own)

    def size(self) -> str:
        """One trial's size as `plan` shows it, in the spec's words:
        'nodes=2 tasks_per_node=1 gpus_per_node=2 cpus_per_task=1 time=01:00:00'."""
        return " ".join(f"{name}={getattr(self, name)}" for name in PER_TRIAL_FIELDS
                        if getattr(self, name) is not None)


_MEM = re.compile(r"^(\d+)([KMGT]?)B?$", re.I)


def memory_mb(text: str) -> float:
    """A Slurm memory size (4G, 4000, 4000M, 512K, 1T) in megabytes (Slurm's default unit)."""
    found = _MEM.match(str(text).strip())
    if found is None:
        raise ValueError(f"not a Slurm memory size: {text!r} (expected e.g. 4G, 4000M, 512K)")
    number, unit = found.groups()
    return int(number) * {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024 ** 2}[unit.upper()]


def slot_width(own: Resources, slot: Resources) -> int:
    """How many of a pilot's slots (each the shape of `slot`: SlurmJob.slot) a trial of
    `own` resources takes on each of its nodes: enough for its tasks' CPUs, its GPUs and
    its memory."""
    width = -(-(own.tasks_per_node * own.cpus_per_task)
              // max(1, slot.tasks_per_node * slot.cpus_per_task))
    if own.gpus_per_node and slot.gpus_per_node:
        width = max(width, -(-own.gpus_per_node // slot.gpus_per_node))
    if own.mem and slot.mem:
        width = max(width, math.ceil(memory_mb(own.mem) / memory_mb(slot.mem) - 1e-9))
    return max(1, width)


# Why an attempt ended without a result (hpsearch.driver.retry.classify), each with its own rule.
FailureClass = Literal["exit", "no_objective", "timeout", "out_of_memory", "node_fail",
                       "boot_fail", "preempted", "interrupted", "launch_error", "lost", "other"]
FAILURE_CLASSES: tuple[FailureClass, ...] = get_args(FailureClass)


@dataclass(frozen=True)
class RetryRule:
    """What to do when an attempt fails with one class of failure (docs/spec.md#retries)."""

    max: int = 0             # extra attempts after failures of this class
    mem_factor: float = 1.0  # multiply resources.mem by this on each counted retry (Slurm)
    time_factor: float = 1.0  # multiply the time limit (resources.time; executor.timeout)
    exclude_node: bool = False  # keep the next attempts off the nodes this one ran on (Slurm)


# Failures of the infrastructure get retries by default; a trial's own (exit, no_objective,
# other) get `retries.max`, 0 unless set.
DEFAULT_RETRY_RULES = {
    "timeout": RetryRule(max=1, time_factor=2.0),
    "out_of_memory": RetryRule(max=2, mem_factor=1.5),
    "node_fail": RetryRule(max=3, exclude_node=True),
    "boot_fail": RetryRule(max=3, exclude_node=True),
    "preempted": RetryRule(max=10),
    "interrupted": RetryRule(max=10),
    "launch_error": RetryRule(max=1, exclude_node=True),
    "lost": RetryRule(max=3),
}


@dataclass(frozen=True)
class Retries:
    max: int = 0  # extra attempts after a failure of the trial's own (exit, no_objective, other)
    rules: tuple[tuple[str, RetryRule], ...] = ()  # the spec's rules: class or exit_<code>

    def rule(self, failure: str, exit_code: int | None = None) -> tuple[str, RetryRule]:
        """(the rule's name, the rule) for a failure class; `exit_<code>` before `exit`."""
        given = dict(self.rules)
        if failure == "exit" and f"exit_{exit_code}" in given:
            return f"exit_{exit_code}", given[f"exit_{exit_code}"]
        if failure in given:
            return failure, given[failure]
        return failure, DEFAULT_RETRY_RULES.get(failure, RetryRule(max=self.max))


# What a spec that writes neither keep_last nor keep_best keeps of each trial: the newest 2
# and the best 1 (every epoch's checkpoint was 9 .ckpt, 11 MB, a trial of a tiny MLP: issue 38)
KEEP_LAST, KEEP_BEST = 2, 1


@dataclass(frozen=True)
class Checkpoints:
    keep_last: int | None = None    # per trial: the newest n (highest step); None: not written
    keep_best: int | None = None    # per trial: the n with the best objective at their step
    keep_trials: int | None = None  # experiment: only the n best finished trials keep any
    signal: str | None = None       # sent to a trial before its time limit, e.g. "USR2"
    signal_before: float = 120.0    # seconds before the limit
    keep_all: bool = False          # `keep_last: all`: no checkpoint is deleted by keep_*

    def in_force(self) -> Checkpoints:
        """The policy the driver applies: keep_last and keep_best as written; with neither
        written, KEEP_LAST and KEEP_BEST; with `keep_last: all`, neither."""
        if self.keep_all:
            return replace(self, keep_last=None, keep_best=None)
        if self.keep_last is None and self.keep_best is None:
            return replace(self, keep_last=KEEP_LAST, keep_best=KEEP_BEST)
        return self


# Seconds of a pilot's time limit that no trial counts on: the pilot's own start, and its
# wind-down before its end (hpsearch.pilot.program).
PILOT_RESERVE = 30.0


@dataclass(frozen=True)
class Pilots:
    """PanDA-like pilot jobs (docs/pilots.md): Slurm allocations that take trials one after
    another, so a trial pays no queue wait or job launch of its own."""

    nodes: int = 1               # nodes per pilot job (>= resources.nodes)
    time: str = "01:00:00"       # each pilot's Slurm time limit, as written (sbatch --time)
    max: int = 2                 # the most pilots at once (pending and running)
    slots_per_node: int = 1      # trials side by side on each node (each one trial's CPUs/GPUs)
    idle_timeout: float = 60.0   # seconds: a pilot with nothing to run for this long exits
    grace: float = 300.0         # seconds pilots wait for an absent driver before they exit
    heartbeat: float = 2.0       # seconds between heartbeats, each way (< grace, idle_timeout)
    # trials on the pilot's other nodes start through one long-lived agent per node (true), or
    # each as an srun step of its own (false: a step launch per trial, and per-trial steps in
    # sacct); hpsearch.pilot.agents
    agents: bool = True


@dataclass(frozen=True)
class SitePilots:
    """A site's own pilot settings (`executor.sites[i].pilots`): a partition's MaxTime, its
    nodes' size differ from another's. None: executor.pilots' value."""

    time: str | None = None            # its pilots' time limit, as written
    nodes: int | None = None           # nodes per pilot there
    slots_per_node: int | None = None  # trials side by side on each of its nodes

    def over(self, pilots: Pilots) -> Pilots:
        """executor.pilots as this site's pilots are: its own values where it sets them."""
        return replace(pilots, time=self.time or pilots.time, nodes=self.nodes or pilots.nodes,
                       slots_per_node=self.slots_per_node or pilots.slots_per_node)


@dataclass(frozen=True)
class Site:
    """One place a search may send trials (issue 40, docs/brokerage.md): a partition, and
    optionally another cluster of the same slurmdbd (`sbatch -M`), an account and a qos.
    The broker (hpsearch.executors.brokerage) splits trials across sites by a weight it
    recomputes every poll; `weight` scales it, `max` caps the site's jobs in flight."""

    name: str
    partition: str | None = None
    cluster: str | None = None
    account: str | None = None
    qos: str | None = None
    max: int | None = None   # jobs in flight (pending and running) at once; None: no cap
    weight: float = 1.0      # a factor on the broker's weight (> 0)
    pilots: SitePilots | None = None  # its own pilot settings (`pilots: {time: ..., nodes: ...}`)


@dataclass(frozen=True)
class Executor:
    type: str = "local"
    gpus: tuple[str, ...] | str | None = None  # device ids, "auto" (detect), or None (no GPU slots)
    timeout: float | None = None  # seconds per trial attempt
    grace: float = 10.0  # seconds between SIGTERM and SIGKILL
    # slurm only
    array: bool = True  # ready single-node trials go as one job array
    array_throttle: int | None = None  # %N on arrays (default: search.parallel)
    poll_interval: float = 5.0  # seconds between batched state queries (backs off when idle)
    lost_after: float = 300.0  # a job Slurm no longer knows, whose trial dir is quiet this long
    # Trials run inside pilot jobs (late binding) when set. Written only with type slurm, but
    # `submit --executor local` keeps it: check type first (the local executor ignores it).
    pilots: Pilots | None = None
    # Python trials forked from a warm server that imported these modules first
    # (hpsearch.warm): `{python}` in the command runs through it. None: off.
    warm: tuple[str, ...] | None = None
    # Several partitions or clusters one search uses at once (executor.sites); (): the one
    # partition of `resources` (or Slurm's default).
    sites: tuple[Site, ...] = ()
    # With sites: a job pending this long at one site while another starts what it gets is
    # cancelled there and sent to that one; sooner (brokerage.QUICK_MOVE) to a site with
    # idle nodes for it (None: never moved).
    move_after: float | None = 120.0
    # With sites: "late", a single-node job names every open site of its cluster, account
    # and qos (`--partition=a,b`) and Slurm starts it where a node frees first
    # (hpsearch.executors.late_binding); "early", the broker's site alone.
    bind: str = "late"
    # The options of its type's own (ExecutorFacts.options: an executor from a plugin's
    # settings), defaults filled in, as (name, value).
    options: tuple[tuple[str, Any], ...] = ()

    def option(self, name: str) -> Any:
        return dict(self.options)[name]


@dataclass(frozen=True)
class Launcher:
    """How a trial's ranks start across its nodes (hpsearch.launch)."""

    type: str = "none"  # none | srun | torchrun | mpirun | horovodrun
    args: tuple[str, ...] = ()  # extra arguments for the launcher program


@dataclass(frozen=True)
class Container:
    """The image each rank runs in (hpsearch.launch)."""

    runtime: str = "none"  # none | apptainer | singularity | pyxis | charliecloud | podman
    image: str | None = None
    binds: tuple[str, ...] = ()  # "src[:dst[:opts]]"
    env: tuple[str, ...] = ()  # host variables passed into the container (HPSEARCH_* always are)
    args: tuple[str, ...] = ()  # extra arguments for the runtime


@dataclass(frozen=True)
class Placement:
    """Where a Slurm trial's nodes go (hpsearch.placement; docs/placement.md)."""

    policy: str = "leaf-switch"  # leaf-switch | any
    max_wait: float = 300.0  # seconds to wait for one leaf before taking the fewest leaves
    topology: Path | None = None  # topology.conf / topology.yaml / map, where Slurm has none
    mode: str = "auto"  # auto: --switches where the tree plugin is on, else --nodelist
    replan_after: float = 30.0  # a --nodelist job pending this long gets its nodes re-chosen


@dataclass(frozen=True)
class Spec:
    name: str
    command: str
    workdir: Path
    runs_dir: Path
    search: Search
    objectives: tuple[Objective, ...]
    resources: Resources = field(default_factory=Resources)
    retries: Retries = field(default_factory=Retries)
    checkpoints: Checkpoints = field(default_factory=Checkpoints)
    executor: Executor = field(default_factory=Executor)
    launcher: Launcher = field(default_factory=Launcher)
    container: Container = field(default_factory=Container)
    placement: Placement = field(default_factory=Placement)
    env: tuple[tuple[str, str], ...] = ()
    share: str = "private"  # group: results group-readable (0750/0640), never group-writable
    source: Path | None = None  # the YAML file it came from
    raw: dict = field(default_factory=dict, compare=False, repr=False)  # as written, for the store
    text: str = field(default="", compare=False, repr=False)  # the YAML as read, for the store
    # Which instance of the experiment this is, once its store exists (session.with_instance):
    # a tag in its Slurm job names, and its creation time, before which no job is its own.
    instance: str = field(default="", compare=False)
    created: float | None = field(default=None, compare=False)

    @property
    def multi_objective(self) -> bool:
        return len(self.objectives) > 1

    @property
    def experiment_dir(self) -> Path:
        return self.runs_dir / self.name

    def sizes(self, key: str) -> tuple[int, ...]:
        """Every value an integer field of `resources` takes in some trial, smallest first:
        its own value, or with a per-trial field every value its parameter can take."""
        return tuple(sorted({int(value) for value in self._values(key)}))

    def _values(self, key: str) -> list[Any]:
        """Every value a field of `resources` takes: its own, or its parameter's."""
        name = dict(self.resources.per_trial).get(key)
        param = next((p for p in self.search.space if p.name == name), None)
        if param is None:
            return [getattr(self.resources, key)]
        if param.kind == "categorical":
            return list(param.choices)
        if param.kind == "fixed":
            return [param.value]
        step = int(param.step or 1)  # an int parameter: low..high by its step
        return list(range(int(param.low or 0), int(param.high or 0) + 1, step))

    def least_gpus_per_node(self) -> int:
        """The fewest GPUs per node a trial asks for: resources.gpus_per_node, or with
        per-trial resources the smallest value of its parameter."""
        return self.sizes("gpus_per_node")[0]

    def slurm_job(self) -> SlurmJob:
        """The part of the spec its Slurm jobs (trials, arrays, pilots) are made of."""
        return SlurmJob(self.name, self.instance, self.created, self.experiment_dir,
                        self.search.parallel, self.resources, self.executor, self.placement,
                        self.checkpoints, self.sizes("nodes"), self.slot())

    def trial_recipe(self, under_slurm: bool) -> TrialRecipe:
        """The part of the spec a trial's launch is made of; under_slurm: its executor runs
        trials on Slurm (hpsearch.executors.registry.facts(spec.executor).on_slurm)."""
        return TrialRecipe(self.name, self.experiment_dir, self.command, self.env, self.workdir,
                           self.resources, self.launcher, self.container,
                           self.checkpoints.signal, under_slurm,
                           self.executor.warm)

    def slot(self) -> Resources:
        """One slot of a pilot (executor.pilots.slots_per_node per node): the smallest trial's
        share of a node, field by field (the fewest tasks, CPUs per task and GPUs, GPUs
        counting only trials that ask for some; the least memory). A larger trial takes
        several slots of each of its nodes (slot_width). Without per-trial fields, every
        trial's resources."""
        res = self.resources
        if not res.per_trial:
            return res
        gpus = [n for n in self.sizes("gpus_per_node") if n > 0]
        mems = [str(v) for v in self._values("mem")] if res.mem else []
        return replace(res, per_trial=(), nodes=self.sizes("nodes")[0],
                       tasks_per_node=self.sizes("tasks_per_node")[0],
                       cpus_per_task=self.sizes("cpus_per_task")[0],
                       gpus_per_node=gpus[0] if gpus else 0,
                       mem=min(mems, key=memory_mb) if mems else res.mem)


@dataclass(frozen=True)
class SlurmJob:
    """What the Slurm executors, the placement planner and the batch scripts are given of a
    spec (Spec.slurm_job): the experiment instance (in job names; no job submitted before
    `created` is its own), how many trials run at once, and the sections of the spec that
    make a job."""

    name: str
    instance: str
    created: float | None
    experiment_dir: Path
    parallel: int
    resources: Resources
    executor: Executor
    placement: Placement
    checkpoints: Checkpoints
    # Every node count a trial may take (Spec.sizes): trials of several sizes share pilots.
    node_sizes: tuple[int, ...] = ()
    # A pilot slot's shape (Spec.slot); None: `resources`, every trial's.
    slot_shape: Resources | None = None

    @property
    def slot(self) -> Resources:
        return self.slot_shape or self.resources


@dataclass(frozen=True)
class TrialRecipe:
    """What a trial's launch is made of (Spec.trial_recipe; hpsearch.launch.attempt): its
    command and environment, where it runs, how its ranks start and in which container, its
    resources (per-trial ones resolved against its parameters there), the signal it gets
    before its time limit, whether Slurm starts it, and the warm server's modules."""

    name: str
    experiment_dir: Path
    command: str
    env: tuple[tuple[str, str], ...]
    workdir: Path
    resources: Resources
    launcher: Launcher
    container: Container
    checkpoint_signal: str | None
    under_slurm: bool
    warm: tuple[str, ...] | None

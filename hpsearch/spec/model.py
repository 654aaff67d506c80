"""Typed, validated experiment spec. Built only by hpsearch.spec.validate."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STRATEGIES = ("grid", "random", "tpe", "gp", "cmaes", "qmc", "nsga2")
DIRECTIONS = ("minimize", "maximize")
EXECUTORS = ("local", "slurm")
LAUNCHERS = ("none", "srun", "torchrun", "mpirun", "horovodrun")
RUNTIMES = ("none", "apptainer", "singularity", "pyxis", "charliecloud", "podman")
PLACEMENT_POLICIES = ("leaf-switch", "any")
PLACEMENT_MODES = ("auto", "switches", "nodelist")


@dataclass(frozen=True)
class Param:
    """One search dimension. kind is float | int | categorical | fixed."""

    name: str
    kind: str
    low: float | int | None = None
    high: float | int | None = None
    log: bool = False
    step: float | int | None = None
    choices: tuple = ()
    value: Any = None

    def grid_values(self) -> list:
        """Every value this parameter takes in a grid search."""
        if self.kind == "fixed":
            return [self.value]
        if self.kind == "categorical":
            return list(self.choices)
        n = int(round((self.high - self.low) / self.step))
        values = [self.low + i * self.step for i in range(n + 1)]
        if self.kind == "int":
            return [int(v) for v in values]
        # Round away float noise (0.1 * 3 = 0.30000000000000004) to the step's precision.
        decimals = max(0, -int(f"{self.step:e}".split("e")[1])) + 6
        return [round(float(v), decimals) for v in values if v <= self.high + 1e-12]


@dataclass(frozen=True)
class Objective:
    metric: str
    direction: str  # minimize | maximize


@dataclass(frozen=True)
class Search:
    strategy: str
    trials: int
    parallel: int
    seed: int | None
    space: tuple[Param, ...]

    @property
    def tuned(self) -> tuple[Param, ...]:
        return tuple(p for p in self.space if p.kind != "fixed")

    @property
    def fixed(self) -> dict[str, Any]:
        return {p.name: p.value for p in self.space if p.kind == "fixed"}


@dataclass(frozen=True)
class Resources:
    """What one trial needs. The local executor uses gpus_per_node; Slurm uses all of it."""

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


@dataclass(frozen=True)
class Retries:
    max: int = 0  # extra attempts after a failure


@dataclass(frozen=True)
class Checkpoints:
    keep_last: int | None = None
    keep_best: int | None = None


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
    source: Path | None = None  # the YAML file it came from
    raw: dict = field(default_factory=dict, compare=False, repr=False)  # as written, for the store

    @property
    def multi_objective(self) -> bool:
        return len(self.objectives) > 1

    @property
    def experiment_dir(self) -> Path:
        return self.runs_dir / self.name

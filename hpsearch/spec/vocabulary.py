"""What the spec needs to know about each seam's pieces to check a spec: their names and a few
facts, handed down by the seams' registries (hpsearch.preflight.vocabulary builds one from
search/registry.py, executors/registry.py and launch/registry.py).

The spec is the bottom step: it imports nothing of the system above it, so it cannot ask the
registries itself; whoever parses a spec passes their Vocabulary in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Option:
    """A setting of one strategy, written under `search:` beside the common keys, or of one
    executor, under `executor:` (a piece's settings are its own: adding one touches its
    registry entry, not the spec).
    kind: int (>= low, <= high where set) | float (low < x <= high, or low <= x with
    `closed`) | floats (a non-empty list of numbers > low) | choice (one of choices) | names
    (a list of the space's searched parameters; the default () means all of them) |
    schedule (a list of {from_step, params}: from step 0 on, steps increasing, parameters
    of the space; the default () means none); names and schedule are a strategy's only. A
    `required` option has no default: a spec naming the piece must give it."""

    name: str
    kind: str
    default: Any
    low: float = 0
    choices: tuple = ()
    doc: str = ""
    high: float | None = None
    closed: bool = True            # float: low itself is allowed
    required: bool = False


@dataclass(frozen=True)
class StrategyFacts:
    """A search strategy, as the spec and the driver see it."""

    name: str
    enumerates: bool = False       # a finite set of points (grid): `trials` may be omitted,
                                   # numeric parameters need a step, known points must lie on it
    learns: bool = True            # its next point depends on results (TPE, GP, CMA-ES, NSGA-II)
    multi_objective: bool = True   # it can optimize several objectives at once
    seeded_order: bool = False     # with a seed it asks the same points in the same order
                                   # whatever the results (random, qmc): `plan` can show them
    # How many trials it runs in a space (a tuple of Params) with its options (a dict), where
    # `trials` may be omitted: an enumerating strategy's points (only the combinations that
    # exist, counted without listing them: the search package knows how), pbt's population.
    count: Callable[[Any, dict], int] | None = field(default=None, compare=False)
    options: tuple[Option, ...] = ()  # its own settings under `search:`
    segmented: bool = False        # it runs each trial in segments of its own choosing (pbt):
                                   # no pruner beside it, trials must checkpoint and resume
    optuna_class: str | None = None  # Optuna's class of it (TPESampler): a spec naming the
                                     # class is told this name (spec/names.py)


@dataclass(frozen=True)
class ExecutorFacts:
    """An executor, as the spec and the driver see it."""

    name: str
    on_slurm: bool = False         # trials run as Slurm jobs or steps, not on this machine
    job_per_attempt: bool = False  # each attempt is a Slurm job (or array task) of its own
    in_pilots: bool = False        # trials share long-lived pilot jobs (executor.pilots'
                                   # settings apply; cost counts a trial's share of a node)
    section: str | None = None     # chosen where this key of `executor:` is set (pilots)
    refines: str | None = None     # ... and executor.type is this one (slurm)
    options: tuple[Option, ...] = ()  # its own settings under `executor:` (for its type)


@dataclass(frozen=True)
class Vocabulary:
    strategies: tuple[StrategyFacts, ...]
    executors: tuple[ExecutorFacts, ...]
    launchers: tuple[str, ...]
    runtimes: tuple[str, ...]

    def strategy(self, name: str) -> StrategyFacts:
        return next(s for s in self.strategies if s.name == name)

    def strategy_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.strategies)

    def optuna_classes(self) -> dict[str, str]:
        """Optuna's class name -> the strategy's (TPESampler -> tpe)."""
        return {s.optuna_class: s.name for s in self.strategies if s.optuna_class}

    def option_names(self) -> tuple[str, ...]:
        """Every strategy's option names, once each, in registry order."""
        return tuple(dict.fromkeys(o.name for s in self.strategies for o in s.options))

    def executor_option_names(self) -> tuple[str, ...]:
        """Every executor's option names, once each, in registry order."""
        return tuple(dict.fromkeys(o.name for e in self.executors for o in e.options))

    def executor_types(self) -> tuple[str, ...]:
        """What `executor.type` may say."""
        return tuple(e.name for e in self.executors if e.refines is None)

    def executor(self, name: str) -> ExecutorFacts:
        return next(e for e in self.executors if e.name == name)

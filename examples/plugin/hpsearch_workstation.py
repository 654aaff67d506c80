"""An hpsearch plugin, outside hpsearch's own tree: an executor and a search strategy that
hpsearch finds through the entry points in pyproject.toml (docs/plugins.md).

- executor `nice`: the local executor, with each trial at a lower CPU priority (the
  plugin's own setting `niceness`, 0-19), so a search on a workstation leaves its
  interactive work responsive. `executor: {type: nice, niceness: 15}`.
- strategy `lhs`: Latin hypercube sampling, a design of experiments Optuna does not ship:
  each searched parameter's range is cut into `strata` equal parts, and every `strata`
  trials use each part of each parameter once (in an order shuffled per parameter), so a
  few trials already cover every range evenly. `search: {strategy: lhs, strata: 16}`.

Both go through hpsearch's registries as its built-in pieces do: the spec accepts the names
and the settings, `validate` checks them at their line, `plan` and the driver use them.
"""

from __future__ import annotations

import dataclasses
import math
import random
import zlib
from typing import Any

from hpsearch.executors.local import LocalExecutor
from hpsearch.executors.registry import ExecutorEntry
from hpsearch.search import optuna_compat as compat
from hpsearch.search.registry import SamplerStrategy
from hpsearch.spec.vocabulary import ExecutorFacts, Option, StrategyFacts

SEED_ATTR = "lhs:seed"  # in the study's system attrs, which hpsearch keeps across a resume


class NiceExecutor(LocalExecutor):
    """Trials start at `niceness`: the trial's shell lowers its own priority before it runs
    the command, so every process of the trial inherits it (the shell stays the trial's
    parent: hpsearch's stop and exit-code traps are unchanged)."""

    niceness = 10

    @classmethod
    def from_spec(cls, spec, store, ask_ahead):
        executor = super().from_spec(spec, store, ask_ahead)
        executor.niceness = spec.executor.option("niceness")
        return executor

    def submit(self, launch):
        # `renice N -p PID` sets N itself in util-linux, BusyBox and the BSDs alike (`-n N`
        # adds N in some of them). Raising a priority needs privileges: a trial of a
        # search already niced further stays where it is, the refusal in its stderr.log.
        command = f"renice {int(self.niceness)} -p $$ >/dev/null\n{launch.command}"
        super().submit(dataclasses.replace(launch, command=command))


NICE = ExecutorEntry(
    ExecutorFacts("nice", options=(
        Option("niceness", "int", 10, low=0, high=19,
               doc="the trials' CPU priority, as nice(1): 0 normal, 19 lowest"),)),
    "hpsearch_workstation:NiceExecutor")


def _lhs_sampler(samplers: Any, sampling: Any) -> Any:
    """A sampler class made from Optuna's base class the first time it is needed: the
    plugin imports Optuna only when a search uses `lhs`, as hpsearch does."""

    class LatinHypercubeSampler(samplers.BaseSampler):
        def __init__(self, strata: int, seed: int | None) -> None:
            self.strata = strata
            self.seed = seed if seed is not None else random.SystemRandom().randrange(2**31)

        def infer_relative_search_space(self, study, trial):
            return {}

        def sample_relative(self, study, trial, search_space):
            return {}

        def sample_independent(self, study, trial, name, distribution):
            storage, study_id = compat.storage(study), compat.study_id(study)
            seed = storage.get_study_system_attrs(study_id).get(SEED_ATTR)
            if seed is None:  # the first design: its seed is kept for a resumed search
                seed = self.seed
                storage.set_study_system_attr(study_id, SEED_ATTR, seed)
            design, row = divmod(trial.number, self.strata)
            rng = random.Random(f"{seed}:{design}:{zlib.crc32(name.encode())}")
            order = list(range(self.strata))
            rng.shuffle(order)  # this parameter's strata, in this design's order
            within = [rng.random() for _ in order]  # where in its stratum each row falls
            u = (order[row] + within[row]) / self.strata
            return _value(distribution, u)

    return LatinHypercubeSampler(sampling.options["strata"], sampling.seed)


def _value(distribution: Any, u: float) -> Any:
    """The point at quantile u in [0, 1) of an Optuna distribution."""
    if hasattr(distribution, "choices"):
        choices = distribution.choices
        return choices[min(int(u * len(choices)), len(choices) - 1)]
    low, high = distribution.low, distribution.high
    if distribution.log:
        x = math.exp(math.log(low) + u * (math.log(high) - math.log(low)))
    else:
        x = low + u * (high - low)
    step = getattr(distribution, "step", None)
    if step is not None:
        x = low + round((x - low) / step) * step
    x = min(max(x, low), high)
    return int(round(x)) if isinstance(low, int) and isinstance(high, int) else x


LHS = SamplerStrategy(
    StrategyFacts("lhs", learns=False, seeded_order=True, multi_objective=True, options=(
        Option("strata", "int", 10, low=1,
               doc="equal parts of each parameter's range, each used once per this many "
                   "trials"),)),
    _lhs_sampler, fixed_seed=True)

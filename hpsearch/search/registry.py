"""The search strategies a spec may name (`search.strategy`), each with what it is: the facts
the spec and the driver ask about it, the optional packages it needs, and how its search is
built. Adding a strategy is one entry here (and its module, if it is not an Optuna sampler):
the schema, `validate`, `plan`, the docs' table and the messages take their names from
STRATEGIES (hpsearch/registry.py; tests/test_registries.py checks docs/spec.md agrees).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hpsearch.registry import Registry
from hpsearch.spec.vocabulary import StrategyFacts

if TYPE_CHECKING:
    from hpsearch.search.base import Search
    from hpsearch.spec.model import Objective
    from hpsearch.spec.model import Search as SearchSection


class Strategy(ABC):
    """One search strategy. `needs`: (module, how to install it) for each optional package
    it imports when it samples (pyproject.toml's extras)."""

    def __init__(self, facts: StrategyFacts, needs: tuple[tuple[str, str], ...] = ()) -> None:
        self.facts, self.needs = facts, needs

    @property
    def name(self) -> str:
        return self.facts.name

    @abstractmethod
    def search(self, section: SearchSection, objectives: tuple[Objective, ...]) -> Search:
        """The search of a spec's `search` section that names this strategy."""


class GridStrategy(Strategy):
    def search(self, section: SearchSection, objectives: tuple[Objective, ...]) -> Search:
        from hpsearch.search.grid import GridSearch
        return GridSearch(section)


class SamplerStrategy(Strategy):
    """An Optuna sampler asked and told (optuna_search.OptunaSearch). `sampler(seed,
    parallel, conditional)` makes it; `fixed_seed`: a sequence (QMC) whose seed must stay
    the same at every ask of a reproducible search, where others take one seed per ask."""

    def __init__(self, facts: StrategyFacts, sampler: Callable[[Any, int | None, int, bool], Any],
                 needs: tuple[tuple[str, str], ...] = (), fixed_seed: bool = False) -> None:
        super().__init__(facts, needs)
        self._sampler, self.fixed_seed = sampler, fixed_seed

    def sampler(self, seed: int | None, parallel: int, conditional: bool) -> Any:
        from hpsearch.search.optuna_search import _optuna
        return self._sampler(_optuna().samplers, seed, parallel, conditional)

    def search(self, section: SearchSection, objectives: tuple[Objective, ...]) -> Search:
        from hpsearch.search.optuna_search import OptunaSearch
        search = OptunaSearch(section, objectives, self)
        if section.reproducible:
            from hpsearch.search.ordered import OrderedSearch
            return OrderedSearch(search)
        return search


def _grid_count(space: Any) -> int:
    from hpsearch.search.grid import grid_size  # only the combinations that exist
    return grid_size(space)


STRATEGIES: Registry[Strategy] = Registry("strategy", group="hpsearch.strategies")


def _add(entry: Strategy) -> None:
    STRATEGIES.add(entry.name, entry)


_add(GridStrategy(StrategyFacts("grid", enumerates=True, learns=False, count=_grid_count)))
_add(SamplerStrategy(StrategyFacts("random", learns=False, seeded_order=True),
                     lambda s, seed, parallel, conditional: s.RandomSampler(seed=seed)))
# constant_liar keeps parallel workers from sampling next to each other; group models each
# set of parameters that occur together (a conditional space), where plain multivariate TPE
# would fall back to independent sampling.
_add(SamplerStrategy(StrategyFacts("tpe"), lambda s, seed, parallel, conditional: s.TPESampler(
    seed=seed, multivariate=True, constant_liar=parallel > 1, group=conditional)))
_add(SamplerStrategy(StrategyFacts("gp"),
                     lambda s, seed, parallel, conditional: s.GPSampler(seed=seed),
                     needs=(("torch", "pip install 'hpsearch[gp]'"),
                            ("scipy", "pip install scipy"))))
_add(SamplerStrategy(StrategyFacts("cmaes", multi_objective=False),
                     lambda s, seed, parallel, conditional: s.CmaEsSampler(
                         seed=seed, warn_independent_sampling=False),
                     needs=(("cmaes", "pip install cmaes"),)))
_add(SamplerStrategy(StrategyFacts("qmc", learns=False, seeded_order=True),
                     lambda s, seed, parallel, conditional: s.QMCSampler(
                         seed=seed, scramble=seed is not None, warn_asynchronous_seeding=False,
                         warn_independent_sampling=False),
                     needs=(("scipy", "pip install scipy"),), fixed_seed=True))
_add(SamplerStrategy(StrategyFacts("nsga2"),
                     lambda s, seed, parallel, conditional: s.NSGAIISampler(seed=seed)))


def strategy(name: str) -> Strategy:
    return STRATEGIES.get(name)

"""The search strategies a spec may name (`search.strategy`), each with what it is: the facts
the spec and the driver ask about it, the optional packages it needs, and how its search is
built. Adding a strategy is one entry here (and its module, if it is not an Optuna sampler):
the schema, `validate`, `plan`, the docs' table and the messages take their names from
STRATEGIES (hpsearch/registry.py; tests/test_registries.py checks docs/spec.md agrees).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hpsearch.registry import Registry
from hpsearch.spec.vocabulary import Option, StrategyFacts

if TYPE_CHECKING:
    from hpsearch.search.base import Search
    from hpsearch.spec.model import Objective
    from hpsearch.spec.model import Search as SearchSection


class Strategy(ABC):
    """One search strategy. `needs`: (module, how to install it) for each optional package
    it imports when it samples (pyproject.toml's extras). `segments`: for a strategy that
    runs trials in segments itself (facts.segmented), "module:Class" of what decides them,
    built by the driver's policies with `from_spec(spec, store, search, on_event)` and
    asked as the promoter is (hpsearch.pruning.promoter.Segments)."""

    explorer: str | None = None  # segmented strategies: see PopulationStrategy

    def __init__(self, facts: StrategyFacts, needs: tuple[tuple[str, str], ...] = (),
                 segments: str | None = None) -> None:
        self.facts, self.needs, self.segments = facts, needs, segments

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


@dataclass(frozen=True)
class Sampling:
    """What an Optuna sampler is made from: the seed, the trials in flight, whether the space
    is conditional, and the strategy's own settings (its Options, defaults filled in)."""

    seed: int | None
    parallel: int
    conditional: bool
    options: dict[str, Any]


class SamplerStrategy(Strategy):
    """An Optuna sampler asked and told (optuna_search.OptunaSearch). `sampler(samplers,
    sampling)` makes it from optuna.samplers; `fixed_seed`: a sequence (QMC) whose seed must
    stay the same at every ask of a reproducible search, where others take one per ask.
    `forgets`: its sampler uses no past trial (random), so the search keeps only the trials
    in flight in its study (optuna_search.OptunaSearch._compact)."""

    def __init__(self, facts: StrategyFacts, sampler: Callable[[Any, Sampling], Any],
                 needs: tuple[tuple[str, str], ...] = (), fixed_seed: bool = False,
                 segments: str | None = None, forgets: bool = False) -> None:
        super().__init__(facts, needs, segments)
        self._sampler, self.fixed_seed, self.forgets = sampler, fixed_seed, forgets

    def sampler(self, seed: int | None, section: SearchSection) -> Any:
        from hpsearch.search.optuna_search import _optuna
        return self._sampler(_optuna().samplers, Sampling(seed, section.parallel,
                                                          section.conditional,
                                                          dict(section.options)))

    def search(self, section: SearchSection, objectives: tuple[Objective, ...]) -> Search:
        from hpsearch.search.optuna_search import OptunaSearch
        search = OptunaSearch(section, objectives, self)
        if section.reproducible:
            from hpsearch.search.ordered import OrderedSearch
            return OrderedSearch(search)
        return search


class PopulationStrategy(Strategy):
    """pbt and pb2: the population's first parameters (search/population.py); the segments
    and their decisions are the driver's, from `segments`. `explorer`: "module:function"
    choosing an exploit's new parameters (pbt_policy.Explorer), None for PBT's own."""

    def __init__(self, facts: StrategyFacts, needs: tuple[tuple[str, str], ...] = (),
                 segments: str | None = None, explorer: str | None = None) -> None:
        super().__init__(facts, needs, segments)
        self.explorer = explorer

    def search(self, section: SearchSection, objectives: tuple[Objective, ...]) -> Search:
        from hpsearch.search.population import PopulationSearch
        return PopulationSearch(section)


def _grid_count(space: Any, options: dict) -> int:
    from hpsearch.search.grid import grid_size  # only the combinations that exist
    return grid_size(space)


STRATEGIES: Registry[Strategy] = Registry("strategy", group="hpsearch.strategies")


def _add(entry: Strategy) -> None:
    STRATEGIES.add(entry.name, entry)


_add(GridStrategy(StrategyFacts("grid", enumerates=True, learns=False, count=_grid_count,
                                optuna_class="GridSampler")))
_add(SamplerStrategy(StrategyFacts("random", learns=False, seeded_order=True,
                                   optuna_class="RandomSampler"),
                     lambda s, a: s.RandomSampler(seed=a.seed), forgets=True))
# constant_liar keeps parallel workers from sampling next to each other; group models each
# set of parameters that occur together (a conditional space), where plain multivariate TPE
# would fall back to independent sampling.
_STARTUP = Option("n_startup_trials", "int", 10, low=0,
                  doc="trials sampled at random before the model is used (Optuna's default)")
_add(SamplerStrategy(StrategyFacts("tpe", options=(_STARTUP,), optuna_class="TPESampler"),
                     lambda s, a: s.TPESampler(
    seed=a.seed, multivariate=True, constant_liar=a.parallel > 1, group=a.conditional,
    n_startup_trials=a.options["n_startup_trials"])))
_add(SamplerStrategy(StrategyFacts("gp", options=(_STARTUP,), optuna_class="GPSampler"),
                     lambda s, a: s.GPSampler(seed=a.seed,
                                              n_startup_trials=a.options["n_startup_trials"]),
                     needs=(("torch", "pip install 'hpsearch[gp]'"),
                            ("scipy", "pip install scipy"))))
_add(SamplerStrategy(StrategyFacts("cmaes", multi_objective=False, optuna_class="CmaEsSampler"),
                     lambda s, a: s.CmaEsSampler(seed=a.seed, warn_independent_sampling=False),
                     needs=(("cmaes", "pip install cmaes"),)))
_add(SamplerStrategy(StrategyFacts("qmc", learns=False, seeded_order=True,
                                   optuna_class="QMCSampler", options=(
    Option("qmc_type", "choice", "sobol", choices=("sobol", "halton"),
           doc="the low-discrepancy sequence"),)),
                     lambda s, a: s.QMCSampler(
                         qmc_type=a.options["qmc_type"], seed=a.seed,
                         scramble=a.seed is not None, warn_asynchronous_seeding=False,
                         warn_independent_sampling=False),
                     needs=(("scipy", "pip install scipy"),), fixed_seed=True))
_POPULATION_SIZE = Option("population_size", "int", 50, low=2,
                          doc="individuals in a generation")
_add(SamplerStrategy(StrategyFacts("nsga2", options=(_POPULATION_SIZE,),
                                   optuna_class="NSGAIISampler"),
                     lambda s, a: s.NSGAIISampler(seed=a.seed,
                                                  population_size=a.options["population_size"])))
# NSGA-III (Deb and Jain 2014): NSGA-II's selection by reference points spread over the
# objective space, for three objectives and more (accuracy, GPU-hours and latency), where
# NSGA-II's crowding distance leaves parts of the front empty.
_add(SamplerStrategy(StrategyFacts("nsga3", options=(_POPULATION_SIZE,),
                                   optuna_class="NSGAIIISampler"),
                     lambda s, a: s.NSGAIIISampler(seed=a.seed,
                                                   population_size=a.options["population_size"])))

# Population-based training (Jaderberg et al. 2017) as Ray Tune's PopulationBasedTraining:
# the population starts from seeded random draws, then hpsearch.pruning.pbt runs each member in
# segments and exploits and explores at their boundaries (hpsearch.search.pbt_policy).
_POPULATION = (
    Option("population", "int", 8, low=2, doc="members trained side by side (`trials` caps "
                                              "it)"),
    Option("perturbation_interval", "int", None, low=1, required=True,
           doc="reported steps per segment: a member is judged every this many steps"),
    Option("max_resource", "int", None, low=1, required=True,
           doc="the steps each member runs in all"),
    Option("burn_in_period", "int", 0, doc="no member is exploited before this step"),
    Option("quantile_fraction", "float", 0.25, high=0.5, closed=False,
           doc="the bottom fraction exploits the top fraction"),
    Option("resample_probability", "float", 0.25, high=1.0,
           doc="a mutated parameter is drawn anew, else perturbed"),
    Option("perturbation_factors", "floats", (0.8, 1.2),
           doc="a perturbed number is multiplied by one of these"),
    Option("mutations", "names", (), doc="the parameters that change (default: every "
                                         "searched one)"),
    Option("replay", "schedule", (), doc="one member trained with these parameters from each "
                                         "step on, no population (`hpsearch replay` writes "
                                         "it)"))


def _population(name: str, explorer: str | None = None,
                needs: tuple[tuple[str, str], ...] = ()) -> PopulationStrategy:
    return PopulationStrategy(StrategyFacts(
        name, learns=False, seeded_order=True, segmented=True, options=_POPULATION,
        count=lambda space, o: 1 if o["replay"] else o["population"]),
        needs, segments="hpsearch.pruning.pbt:PbtSegments", explorer=explorer)


_add(_population("pbt"))
# PB2 (Parker-Holder et al. 2020): PBT whose explore is a GP-bandit over the numeric mutable
# parameters' bounds (hpsearch.search.pb2_explore, scikit-learn's Gaussian process).
_add(_population("pb2", "hpsearch.search.pb2_explore:explore",
                 needs=(("sklearn", "pip install scikit-learn"),)))


def strategy(name: str) -> Strategy:
    return STRATEGIES.get(name)

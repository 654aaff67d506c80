"""Searches behind one seam (base: ask for a trial's params, tell how it ended): grid (decoded
point by point, never expanded), optuna_search (Optuna's samplers, by ask/tell), ordered
(search.reproducible: a seeded parallel search that asks the same trials on every run).
registry (STRATEGIES) holds each strategy's facts, packages and search; make_search builds
the one a spec's `search` section names. optuna_compat is Optuna's private API, in one place.
"""

from __future__ import annotations

from hpsearch.search.base import Asked, Search
from hpsearch.spec.model import Objective
from hpsearch.spec.model import Search as SearchSection


def make_search(section: SearchSection, objectives: tuple[Objective, ...]) -> Search:
    """The search a spec's `search` section asks for, towards its objectives."""
    from hpsearch.search.registry import strategy
    return strategy(section.strategy).search(section, objectives)


__all__ = ["Asked", "Search", "make_search"]

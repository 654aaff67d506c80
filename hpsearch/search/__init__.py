"""Searches: grid (decoded point by point, never expanded) and Optuna samplers (ask/tell)."""

from __future__ import annotations

from hpsearch.search.base import Asked, Search
from hpsearch.spec.model import Objective
from hpsearch.spec.model import Search as SearchSection


def make_search(section: SearchSection, objectives: tuple[Objective, ...]) -> Search:
    """The search a spec's `search` section asks for, towards its objectives."""
    if section.strategy == "grid":
        from hpsearch.search.grid import GridSearch
        return GridSearch(section)
    from hpsearch.search.optuna_search import OptunaSearch
    search = OptunaSearch(section, objectives)
    if section.reproducible:
        from hpsearch.search.ordered import OrderedSearch
        return OrderedSearch(search)
    return search


__all__ = ["Asked", "Search", "make_search"]

"""Searches: grid (decoded point by point, never expanded) and Optuna samplers (ask/tell)."""

from __future__ import annotations

from hpsearch.search.base import Asked, Search
from hpsearch.spec.model import Spec


def make_search(spec: Spec) -> Search:
    if spec.search.strategy == "grid":
        from hpsearch.search.grid import GridSearch
        return GridSearch(spec.search)
    from hpsearch.search.optuna_search import OptunaSearch
    search = OptunaSearch(spec.search, spec.objectives)
    if spec.search.reproducible:
        from hpsearch.search.ordered import OrderedSearch
        return OrderedSearch(search)
    return search


__all__ = ["Asked", "Search", "make_search"]

"""Searches: grid (decoded point by point, never expanded) and Optuna samplers (ask/tell)."""

from __future__ import annotations

from hpsearch.search.base import Asked, Search
from hpsearch.spec.model import Spec


def make_search(spec: Spec) -> Search:
    if spec.search.strategy == "grid":
        from hpsearch.search.grid import GridSearch
        return GridSearch(spec.search)
    from hpsearch.search.optuna_search import OptunaSearch
    return OptunaSearch(spec.search, spec.objectives)


__all__ = ["Asked", "Search", "make_search"]

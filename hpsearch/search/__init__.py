"""Searches: grid (decoded point by point, never expanded) and Optuna samplers (ask/tell)."""

from __future__ import annotations

from hpsearch.search.base import Asked, Search
from hpsearch.spec.model import Objective
from hpsearch.spec.model import Search as SearchSection


def make_search(section: SearchSection, objectives: tuple[Objective, ...]) -> Search:
    """The search a spec's `search` section asks for, towards its objectives."""
    from hpsearch.search.registry import strategy
    return strategy(section.strategy).search(section, objectives)


__all__ = ["Asked", "Search", "make_search"]

"""Grid search: the full cartesian product, in a fixed order; trial id = grid index."""

from __future__ import annotations

import itertools
import math

from hpsearch.search.base import Asked, Search
from hpsearch.spec.model import Search as SearchSpec


def grid_points(search: SearchSpec) -> list[dict]:
    """Every point of the grid, in order (the last parameter varies fastest)."""
    names = [p.name for p in search.space]
    axes = [p.grid_values() for p in search.space]
    return [dict(zip(names, combo)) for combo in itertools.product(*axes)]


def grid_size(search: SearchSpec) -> int:
    return math.prod(len(p.grid_values()) for p in search.space)


class GridSearch(Search):
    def __init__(self, search: SearchSpec) -> None:
        self.points = grid_points(search)
        self.total = min(search.trials, len(self.points))
        self.next_id = 0

    def rebuild(self, trials, study_attrs) -> None:
        self.next_id = max((t.id + 1 for t in trials), default=0)

    def ask(self) -> Asked | None:
        if self.next_id >= self.total:
            return None
        asked = Asked(self.next_id, dict(self.points[self.next_id]))
        self.next_id += 1
        return asked

    def tell(self, trial_id, state, values) -> dict | None:
        return None

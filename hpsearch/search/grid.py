"""Grid search: the cartesian product, in a fixed order; trial id = grid index.

The grid is never expanded in memory: its size is the product of the axis lengths and
point k is decoded from k in mixed radix (the last parameter is the fastest digit), so a
10^8-point grid capped at 100 trials costs 100 points, and resume jumps straight to its
next trial.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence

from hpsearch.search.base import Asked, Search
from hpsearch.spec.model import Search as SearchSpec


class GridPoints(Sequence):
    """The points of a grid, in order (the last parameter varies fastest), computed on
    demand: len() multiplies, [k] decodes, iteration walks itertools.product."""

    def __init__(self, search: SearchSpec) -> None:
        self.names = [p.name for p in search.space]
        self.axes = [p.grid_values() for p in search.space]
        self.size = math.prod(len(axis) for axis in self.axes)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self.size))]
        if index < 0:
            index += self.size
        if not 0 <= index < self.size:
            raise IndexError(f"grid point {index} out of range (the grid has {self.size})")
        values = []
        for axis in reversed(self.axes):  # the last axis is the least significant digit
            index, digit = divmod(index, len(axis))
            values.append(axis[digit])
        return dict(zip(self.names, reversed(values)))

    def __iter__(self) -> Iterator[dict]:
        return (dict(zip(self.names, combo)) for combo in itertools.product(*self.axes))

    def __eq__(self, other) -> bool:
        if not isinstance(other, Sequence) or len(other) != self.size:
            return NotImplemented if not isinstance(other, Sequence) else False
        return all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]


def grid_points(search: SearchSpec) -> GridPoints:
    """Every point of the grid, in order, as a lazy sequence (nothing is expanded)."""
    return GridPoints(search)


def grid_size(search: SearchSpec) -> int:
    """How many points the grid has (the product of the axis lengths)."""
    return GridPoints(search).size  # len() stops at sys.maxsize; a grid may be larger


class GridSearch(Search):
    def __init__(self, search: SearchSpec) -> None:
        self.points = GridPoints(search)
        self.total = min(search.trials, self.points.size)
        self.next_id = 0

    def rebuild(self, trials, study_attrs) -> None:
        # Trial ids are grid indices: resume decodes point next_id, it does not iterate to it.
        self.next_id = max((t.id + 1 for t in trials), default=0)

    def ask(self) -> Asked | None:
        if self.next_id >= self.total:
            return None
        asked = Asked(self.next_id, self.points[self.next_id])
        self.next_id += 1
        return asked

    def tell(self, trial_id, state, values, intermediate=None) -> dict | None:
        return None

"""Grid search: every combination, in a fixed order; trial id = grid index.

The grid is never expanded in memory. Point k is decoded from k like a mixed-radix number in
spec order (the last parameter is the fastest digit), so a 10^8-point grid capped at 100
trials costs 100 points, and resume jumps straight to its next trial. A conditional
parameter (`when`) is a digit only in the points where its condition holds: the grid holds
the combinations that exist (sgd rows times momentum values plus adam rows times beta1
values), each once. The count of points below a categorical that gates others depends on
its value, and is computed per gating value (memoized), never by enumerating points.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload

from hpsearch.search.base import Asked, Search
from hpsearch.spec.model import Param
from hpsearch.spec.model import Search as SearchSpec

Chosen = tuple[tuple[int, int], ...]  # (parameter index, value index) of each gate so far


class GridPoints(Sequence[dict[str, Any]]):
    """The points of a grid, in order (the last parameter varies fastest), computed on
    demand: len() counts, [k] decodes, iteration walks the tree of active parameters."""

    def __init__(self, space: SearchSpec | tuple[Param, ...]) -> None:
        self.space = tuple(space.space if isinstance(space, SearchSpec) else space)
        self.axes = [p.grid_values() for p in self.space]
        parents = {p.when.parent for p in self.space if p.when is not None}
        self.gates = {i for i, p in enumerate(self.space) if p.name in parents}
        self._counts: dict[tuple[int, Chosen], int] = {}
        self.size = self._count(0, ())

    def _values(self, chosen: Chosen) -> dict[str, Any]:
        return {self.space[i].name: self.axes[i][k] for i, k in chosen}

    def _count(self, start: int, chosen: Chosen) -> int:
        """Points of the parameters from `start` on, given the gates' values so far."""
        key = (start, chosen)
        if key not in self._counts:
            known, total = self._values(chosen), 1
            for i in range(start, len(self.space)):
                if not self.space[i].active_in(known):
                    continue
                if i in self.gates:  # each value has its own subtree below
                    total *= sum(self._count(i + 1, chosen + ((i, k),))
                                 for k in range(len(self.axes[i])))
                    break
                total *= len(self.axes[i])
            self._counts[key] = total
        return self._counts[key]

    def __len__(self) -> int:
        return self.size

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self.size))]
        if index < 0:
            index += self.size
        if not 0 <= index < self.size:
            raise IndexError(f"grid point {index} out of range (the grid has {self.size})")
        point: dict[str, Any] = {}
        chosen: Chosen = ()
        for i, p in enumerate(self.space):
            if not p.active_in(point):
                continue
            if i in self.gates:
                digit = 0
                while index >= (below := self._count(i + 1, chosen + ((i, digit),))):
                    index -= below
                    digit += 1
                chosen += ((i, digit),)
            else:
                digit, index = divmod(index, self._count(i + 1, chosen))
            point[p.name] = self.axes[i][digit]
        return point

    def __iter__(self) -> Iterator[dict]:
        return self._walk(0, {})

    def _walk(self, start: int, point: dict) -> Iterator[dict]:
        for i in range(start, len(self.space)):
            p = self.space[i]
            if p.active_in(point):
                for value in self.axes[i]:
                    point[p.name] = value
                    yield from self._walk(i + 1, point)
                del point[p.name]
                return
        yield dict(point)

    def __eq__(self, other) -> bool:
        if not isinstance(other, Sequence) or len(other) != self.size:
            return NotImplemented if not isinstance(other, Sequence) else False
        return all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]


def grid_points(search: SearchSpec | tuple[Param, ...]) -> GridPoints:
    """Every point of the grid, in order, as a lazy sequence (nothing is expanded)."""
    return GridPoints(search)


def grid_size(search: SearchSpec | tuple[Param, ...]) -> int:
    """How many points the grid has (the combinations that exist; no conditional parameter:
    the product of the axis lengths)."""
    return GridPoints(search).size  # len() stops at sys.maxsize; a grid may be larger


def grid_summary(search: SearchSpec) -> str:
    """`3 x 3 x 2 = 18 points`; with conditional parameters, `14 points (conditional:
    only the combinations that exist)`."""
    size = grid_size(search)
    if search.conditional:
        return f"{size} points (conditional: only the combinations that exist)"
    return f"{' x '.join(str(len(p.grid_values())) for p in search.space)} = {size} points"


class GridSearch(Search):
    def __init__(self, search: SearchSpec) -> None:
        self.points = GridPoints(search)
        self.total = min(search.trials, self.points.size)
        self.next_id = 0

    @property
    def asked(self) -> int:
        return self.next_id

    def rebuild(self, trials, study_attrs, warm=()) -> None:
        # Trial ids are grid indices: resume decodes point next_id, it does not iterate to it.
        self.next_id = max((t.id + 1 for t in trials), default=0)

    def ask(self, fixed=None, mark=None) -> Asked | None:
        assert not fixed, "a grid runs its own points (the spec refuses enqueue for a grid)"
        if self.next_id >= self.total:
            return None
        asked = Asked(self.next_id, self.points[self.next_id])
        self.next_id += 1
        return asked

    def tell(self, trial_id, state, values, intermediate=None) -> dict | None:
        return None

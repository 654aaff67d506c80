"""search.reproducible: a seeded parallel search that asks the same trials on every run.

With `parallel: P`, trials finish in an order set by the machine, and a sampler asked when a
slot frees sees whichever trials happen to have finished: two runs of one seeded spec drift
apart. Here trial k is asked only once trials 0..k-P have all finished, and the sampler then
knows exactly those as finished (results of later trials that finished early are held back
and told in trial order), the others as running; and the sampler is seeded afresh for each
ask from (seed, k). So trial k's parameters depend only on the seed and the results of
trials 0..k-P, however the run goes, also across a driver restart (the store's trials are
rebuilt the same way). The cost: a free slot waits while the oldest running trial is still
running (at most P trials in flight, always P consecutive ones).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from typing import Any

from hpsearch.search.base import Asked, Search, WarmTrial
from hpsearch.search.optuna_search import OptunaSearch, _pruned_curve
from hpsearch.store import rows

_Result = tuple[str, "list[float] | None", "dict[int, float] | None"]


def ask_seed(seed: int, k: int) -> int:
    digest = hashlib.sha256(f"hpsearch-reproducible:{seed}:{k}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


class OrderedSearch(Search):
    def __init__(self, inner: OptunaSearch) -> None:
        self.inner = inner
        self.parallel = inner.spec.parallel
        self.finished: set[int] = set()  # trials with a result (told or held)
        self.held: dict[int, _Result] = {}  # finished, not yet told to the sampler

    @property
    def total(self) -> int:
        return self.inner.total

    @total.setter
    def total(self, value: int) -> None:
        self.inner.total = value

    @property
    def asked(self) -> int:
        return self.inner.asked

    def rebuild(self, trials: list[rows.TrialRow], study_attrs: dict,
                warm: Sequence[WarmTrial] = ()) -> None:
        """As the uninterrupted run had it before asking trial len(trials): the results of
        trials after len(trials) - P are held back (rebuilt as running)."""
        first_held = len(trials) - self.parallel + 1
        seen = []
        for t in trials:
            result = _result(t)
            if result is not None:
                self.finished.add(t.id)
                if t.id >= first_held:
                    self.held[t.id] = result
                    t = dataclasses.replace(t, state=rows.RUNNING)
            seen.append(t)
        self.inner.rebuild(seen, study_attrs, warm)

    def ask(self, fixed: dict[str, Any] | None = None, mark: dict | None = None) -> Asked | None:
        k = self.inner.asked
        if k >= self.inner.total:
            return None
        due = range(0, k - self.parallel + 1)  # what trial k's sampler knows as finished
        if any(tid not in self.finished for tid in due):
            return None  # an earlier trial still runs: its slot waits (the driver polls)
        for tid in sorted(t for t in self.held if t in due):
            self.inner.tell(tid, *self.held.pop(tid))
        spec = self.inner.spec
        if self.inner.strategy.fixed_seed:
            seed = spec.seed
        elif spec.seed is None:  # validate() refuses a reproducible search without a seed
            raise ValueError("a reproducible search needs search.seed")
        else:
            seed = ask_seed(spec.seed, k)
        self.inner.built_study().sampler = self.inner.strategy.sampler(seed, spec)
        return self.inner.ask(fixed, mark)

    def tell(self, trial_id: int, state: str, values: list[float] | None,
             intermediate: dict[int, float] | None = None) -> dict | None:
        self.finished.add(trial_id)
        if trial_id <= self.inner.asked - self.parallel:  # the next ask knows it anyway
            return self.inner.tell(trial_id, state, values, intermediate)
        self.held[trial_id] = (state, values, intermediate)
        return None  # its sampler attrs stay as asked


def _result(t: rows.TrialRow) -> _Result | None:
    """What the sampler is told of a finished trial (as the driver tells it), else None."""
    if t.state == rows.COMPLETED and t.objective_values is not None:
        return rows.COMPLETED, t.objective_values, None
    if t.state == rows.FAILED:
        return rows.FAILED, None, None
    if t.state == rows.PRUNED:
        return rows.PRUNED, None, _pruned_curve(t)
    return None

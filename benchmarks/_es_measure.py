"""What one early-stopping search used and found, read from its store.

Resource: one step (one report of the objective at a step) is one unit. A trial's resource is
the number of distinct steps of the objective metric in the store's metrics table: every step
its attempts (segments) ran and reported, a step reported again by a retried attempt counted
once. A step cut short by a stop before it reported is not counted.

A trial's value at full fidelity is what it reported at the last step (steps - 1): values at
lower steps (a pruned or paused trial's) are never taken as results. "Resource to reach a
target": the objective reports of all trials in the order of their report times, counted
until the first full-fidelity report within the target.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from hpsearch.store.store import STORE_FILE, Reader


@dataclass(frozen=True)
class Report:
    time: float
    trial: int
    step: int
    value: float


@dataclass
class Search:
    """One finished search."""

    steps: int                 # a full trial's steps
    maximize: bool
    reports: list[Report]      # every objective report, in time order
    trials: int
    segments: int              # attempts started (a promotion is a new attempt)
    states: dict[str, int]     # final trial states: completed, pruned, paused, failed
    seconds: float

    @property
    def resource(self) -> int:
        return len(self.reports)

    def full_values(self) -> list[float]:
        return [r.value for r in self.reports if r.step == self.steps - 1]

    def best(self) -> float:
        """The best full-fidelity value (nan when no trial ran all its steps)."""
        values = self.full_values()
        if not values:
            return math.nan
        return max(values) if self.maximize else min(values)

    def resource_to(self, target: float) -> float:
        """Steps run (reported) by all trials until a full-fidelity value within `target`
        (at least it when maximizing, at most it when minimizing); inf if never."""
        for n, r in enumerate(self.reports, start=1):
            if r.step == self.steps - 1 and (r.value >= target if self.maximize
                                             else r.value <= target):
                return float(n)
        return math.inf


def read(exp_dir: Path, metric: str, steps: int, maximize: bool, seconds: float) -> Search:
    """The search of an experiment dir (its store, read-only)."""
    store = Reader(exp_dir / STORE_FILE)
    try:
        rows = store.db.execute(
            "select time, trial, step, value from metrics where name = ? order by time, trial,"
            " step", [metric]).fetchall()
        trials = store.trials()
        segments = sum(len(store.attempts(t.id)) for t in trials)
        states = store.state_counts()
    finally:
        store.close()
    reports = [Report(*row) for row in rows]
    return Search(steps, maximize, reports, len(trials), segments, states, seconds)

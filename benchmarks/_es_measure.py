"""What one early-stopping search used and found, read from its store.

Resource is hpsearch's own budget accounting (hpsearch.report.budget, what `status` prints as
"resource used"): one step (one report of the objective at a step) is one unit; a trial's
steps are the distinct steps of the objective in the store's metrics table, over all its
attempts (segments), a step reported again by a retried attempt counted once; a step cut
short by a stop before it reported is not counted. Node-seconds are every attempt's run
time (start to end, from the store) times its nodes: what the trial processes held,
process starts included, which steps do not show.

A trial's value at full fidelity is what it reported at the last step (steps - 1): values at
lower steps (a pruned or paused trial's) are never taken as results. "Resource to reach a
target": the objective reports of all trials in the order of their report times, counted
until the first full-fidelity report within the target.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from hpsearch.report import budget
from hpsearch.report.data import collect
from hpsearch.store.reader import Reader
from hpsearch.store.runs import STORE_FILE


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
    resource: int              # steps used by all trials (hpsearch's budget accounting)
    node_seconds: float        # what the attempts held (hpsearch's budget accounting)
    segments: int              # attempts that ran (a promotion is a new attempt)
    states: dict[str, int]     # final trial states: completed, pruned, paused, failed
    seconds: float             # the search's wall time

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
    finally:
        store.close()
    data = collect(exp_dir, use_sacct=False)
    spent = budget.trial_budgets(data.trials, data.curves, data.usage)
    total = budget.split(spent)[-1]
    states: dict[str, int] = {}
    for t in data.trials:
        states[t.state] = states.get(t.state, 0) + 1
    return Search(steps, maximize, [Report(*row) for row in rows], total.steps,
                  total.node_hours * 3600, sum(b.segments for b in spent), states, seconds)

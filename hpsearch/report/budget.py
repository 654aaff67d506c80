"""Budget accounting: the resource each trial and the whole search actually consumed.

Resource is counted three ways: steps (the distinct steps of the objective a trial reported:
one step is one unit of resource, as the pruners count it), node-hours and GPU-hours (every
attempt, or promotion segment, of the trial, from hpsearch.report.data's usage). A trial's
resource falls in the class of how the trial ended: completed, pruned (stopped early),
paused (promotion mode: it waits at a rung, or the search ended there), failed, or other
(still running, queued, cancelled).
"""

from __future__ import annotations

from dataclasses import dataclass

from hpsearch.store.rows import COMPLETED, FAILED, PAUSED, PRUNED, TrialRow

KINDS = ("completed", "pruned", "paused", "failed", "other")


@dataclass
class TrialBudget:
    trial: int
    kind: str          # one of KINDS
    steps: int
    node_hours: float
    gpu_hours: float
    segments: int      # attempts that ran (promotion: segments)
    rung: int | None   # promotion: the rung of its last segment


@dataclass
class BudgetRow:
    kind: str          # one of KINDS, or "total"
    trials: int = 0
    steps: int = 0
    node_hours: float = 0.0
    gpu_hours: float = 0.0

    def add(self, b: TrialBudget) -> None:
        self.trials += 1
        self.steps += b.steps
        self.node_hours += b.node_hours
        self.gpu_hours += b.gpu_hours


def kind_of(state: str) -> str:
    return state if state in (COMPLETED, PRUNED, PAUSED, FAILED) else "other"


def trial_budgets(trials: list[TrialRow], curves: dict[int, list], usage: list
                  ) -> list[TrialBudget]:
    """Per trial: `curves` are the objective's reported (step, value) pairs by trial, `usage`
    the AttemptUsage records of hpsearch.report.data."""
    hours: dict[int, list[float]] = {}
    for u in usage:
        acc = hours.setdefault(u.trial, [0.0, 0.0, 0])
        acc[0] += u.node_hours
        acc[1] += u.gpu_hours
        acc[2] += 1
    out = []
    for t in trials:
        node_h, gpu_h, ran = hours.get(t.id, [0.0, 0.0, 0])
        out.append(TrialBudget(t.id, kind_of(t.state), len({s for s, _ in curves.get(t.id, [])}),
                               node_h, gpu_h, int(ran), t.rung))
    return out


def split(budgets: list[TrialBudget]) -> list[BudgetRow]:
    """One row per kind that has trials, then the total."""
    rows = {kind: BudgetRow(kind) for kind in KINDS}
    total = BudgetRow("total")
    for b in budgets:
        rows[b.kind].add(b)
        total.add(b)
    return [row for row in rows.values() if row.trials] + [total]


def describe(rows: list[BudgetRow]) -> str:
    """One line: 'resource used: 41 steps, 0.012 node-h (completed 9 steps, ...)'."""
    total = rows[-1]
    parts = [f"{row.kind} {row.steps} steps" for row in rows[:-1]]
    gpu = f", {total.gpu_hours:.3g} GPU-h" if total.gpu_hours else ""
    return (f"resource used: {total.steps} steps, {total.node_hours:.3g} node-h{gpu} "
            f"({', '.join(parts)})")

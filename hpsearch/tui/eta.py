"""How long a search has run and has left, as the live view tells it.

The clock runs from the first trial's creation to the search's end: the last trial's end
once nothing is in flight and the search is over (its status is no longer `running`, or
every requested trial finished), else the status change for an ended search whose last
trials recorded no end, else now. So it stops when the last trial ends, not when the driver
gets round to exiting (pilots winding down) or never (an `interrupted` search with nothing
left in flight keeps its end).

The ETA extrapolates the rate so far, elapsed x (planned - done) / done, in the unit of work
the search is made of: trials, where each runs to its end or is stopped early; steps in
promotion mode (search.pruner.mode: promotion), where a paused trial may run again and the
segments late in a search are the long ones. There done is every trial's distinct reported
steps of the objective (one step, one unit of resource, as the pruners count it) and planned
is `planned_steps`. No ETA before any work is done, nor once the work done reaches the plan
while the search still runs.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hpsearch.store import rows

if TYPE_CHECKING:
    from hpsearch.pruning.promotion import Promotion
    from hpsearch.store.reader import Reader


@dataclass(frozen=True)
class Progress:
    """Work done and planned, in `unit` ("trials" or "steps")."""

    unit: str
    done: float
    planned: float


def end_of_search(running: bool, in_flight: int, done: int, requested: int,
                  last_end: float | None, status_time: float) -> float | None:
    """When the clock stopped (see the module's docstring), None while it runs. running:
    the store's status is `running`; in_flight: trials queued, submitting or running; done:
    trials finished for now (hpsearch.store.rows.DONE); last_end: the latest end of a
    trial, if any; status_time: when the status last changed."""
    over = not running or done >= requested
    if over and in_flight == 0 and last_end is not None:
        return last_end
    return None if running else status_time


def eta(elapsed: float, progress: Progress) -> float | None:
    """Seconds left at the rate so far; None where that says nothing (see above)."""
    if elapsed <= 0 or progress.done <= 0 or progress.done >= progress.planned:
        return None
    return elapsed * (progress.planned - progress.done) / progress.done


def planned_steps(promotion: Promotion, trials: int, reached: dict[int, int]) -> float:
    """The steps a promotion search of `trials` trials is expected to run in all. Each
    bracket takes its share of the trials (by its weight); all run to the first rung, and
    1/eta of those at a rung go on to the next (at least one: the end of a search takes the
    best of a bracket to its last rung), each running the steps between the two budgets.
    Asynchronous successive halving promotes more than 1/eta while a rung fills, so where
    more trials have reached rung k (`reached`: rung -> trials that ran a segment to it or
    above, over all brackets) than planned, rung k and those above grow in proportion."""
    total, weights = 0.0, sum(promotion.weights)
    reach = [trials * w / weights for w in promotion.weights]  # per bracket, at rung k
    below = [0] * len(reach)
    for k in range(max(len(ladder) for ladder in promotion.ladders)):
        here = [b for b, ladder in enumerate(promotion.ladders) if k < len(ladder)]
        expected = sum(reach[b] for b in here)
        scale = max(1.0, reached.get(k, 0) / expected) if expected > 0 else 1.0
        for b in here:
            budget = promotion.ladders[b][k]
            total += reach[b] * scale * (budget - below[b])
            below[b] = budget
            reach[b] = min(reach[b] * scale, max(1.0, reach[b] * scale / promotion.eta))
    return total


class PromotionWork:
    """Steps done and planned of a search in promotion mode, kept per trial (its distinct
    reported steps, the highest rung it ran a segment to) with bounded queries: every trial
    on the first call, then per refresh only those in flight and those with new events (a
    segment that started or ended), each by its primary key."""

    def __init__(self, reader: Reader, metric: str, promotion: Promotion) -> None:
        self.reader, self.metric, self.promotion = reader, metric, promotion
        self.steps: dict[int, int] = {}
        self.tops: dict[int, int] = {}  # trial -> the highest rung of its segments
        self.seen_event: int | None = None

    def progress(self, requested: int) -> Progress:
        self._refresh()
        tops = Counter(self.tops.values())
        reached = {k: sum(n for top, n in tops.items() if top >= k)
                   for k in range(max(tops, default=-1) + 1)}
        return Progress("steps", sum(self.steps.values()),
                        planned_steps(self.promotion, requested, reached))

    def _refresh(self) -> None:
        db = self.reader.db
        last = db.execute("select coalesce(max(id), 0) from events").fetchone()[0]
        if self.seen_event is None:
            self.steps = dict(db.execute("select trial, count(*) from metrics where name = ? "
                                         "group by trial", (self.metric,)))
            self.tops = dict(db.execute("select trial, max(rung) from attempts where rung is "
                                        "not null group by trial"))
        else:
            marks = ",".join("?" * len(rows.IN_FLIGHT))
            changed = {t for (t,) in db.execute("select distinct trial from events where "
                                                "id > ? and trial is not null",
                                                (self.seen_event,))}
            changed.update(t for (t,) in db.execute(
                f"select id from trials where state in ({marks})", rows.IN_FLIGHT))
            for trial in changed:
                self.steps[trial] = db.execute(
                    "select count(*) from metrics where trial = ? and name = ?",
                    (trial, self.metric)).fetchone()[0]
                top = db.execute("select max(rung) from attempts where trial = ?",
                                 (trial,)).fetchone()[0]
                if top is not None:
                    self.tops[trial] = top
        self.seen_event = last


def promotion_of(spec_yaml: str, spec_file: str, base_dir: str, name: str
                 ) -> Promotion | None:
    """The promotion policy (its rungs) of a search in promotion mode, else None; None too
    where the stored spec does not validate here (the ETA then counts trials)."""
    import yaml
    raw = yaml.safe_load(spec_yaml) or {}
    search = raw.get("search") if isinstance(raw, dict) else None
    pruner = search.get("pruner") if isinstance(search, dict) else None
    if not isinstance(pruner, dict) or pruner.get("mode") != "promotion":
        return None
    from pathlib import Path

    from hpsearch.errors import HpsearchError
    from hpsearch.preflight import parse_spec
    from hpsearch.pruning.promotion import Promotion
    try:
        spec = parse_spec(spec_yaml, spec_file, Path(base_dir))
    except (HpsearchError, ValueError):
        return None
    return Promotion(spec.search.pruner, spec.objectives[0].direction, name)

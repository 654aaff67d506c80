"""Each site's trial speed (`executor.sites`, docs/brokerage.md): the median seconds per step
between consecutive reports of one attempt, pooled over the attempts sent to the site. What
`status`, `hpsearch sites`, the live view and the report show (read_speeds over the whole
store), and what the broker weighs sites by while a search runs (SpeedTracker: only the
reports stored since it last looked, its last RECENT pairs a site).
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hpsearch.store.reader import Reader

# Each report (one step of one attempt: its metrics share a time) of an attempt sent to a
# site, in order: one query for the whole store, sorted by SQLite, not one a trial.
STEP_TIMES = ("select a.site, m.trial, m.attempt, m.step, max(m.time) from metrics m join "
              "attempts a on a.trial = m.trial and a.attempt = m.attempt where a.site is not "
              "null and m.time is not null group by m.trial, m.attempt, m.step "
              "order by m.trial, m.attempt, m.step")
# The reports stored since row `?`, in the order they were stored.
NEW_STEP_TIMES = ("select a.site, m.trial, m.attempt, m.step, m.time, m.rowid from metrics m "
                  "join attempts a on a.trial = m.trial and a.attempt = m.attempt where "
                  "m.rowid > ? and a.site is not null and m.time is not null order by m.rowid")
RECENT = 500  # pairs a site the broker's speed is the median of


@dataclass(frozen=True)
class Speed:
    """A site's trial speed: the median seconds per step between consecutive reports of one
    attempt, pooled over the site's attempts, and how many such pairs it is the median of."""

    seconds_per_step: float
    pairs: int


class _Pairs:
    """Seconds per step of consecutive reports of one attempt, by site. Only pairs of one
    attempt count: a retry or a moved job starts again, and the time between two attempts
    is no step's. A pair whose time goes back (clocks of two nodes) is left out; another
    report of a step already seen (its other metrics) is none."""

    def __init__(self, keep: int | None = None) -> None:
        self.last: dict[tuple[int, int], tuple[int, float]] = {}
        self.pairs: dict[str, deque[float]] = {}
        self.keep = keep

    def add(self, site: str, trial: int, attempt: int, step: int, when: float) -> None:
        before = self.last.get((trial, attempt))
        if before is not None and step <= before[0]:
            return
        self.last[(trial, attempt)] = (step, when)
        if before is not None and when >= before[1]:
            self.pairs.setdefault(site, deque(maxlen=self.keep)).append(
                (when - before[1]) / (step - before[0]))

    def speeds(self) -> dict[str, Speed]:
        return {site: Speed(statistics.median(each), len(each))
                for site, each in self.pairs.items() if each}


def step_speeds(reports: Iterable[tuple[str, int, int, int, float]]) -> dict[str, Speed]:
    """site -> its Speed, from (site, trial, attempt, step, time) rows ordered by trial,
    attempt and step (STEP_TIMES)."""
    pairs = _Pairs()
    for site, trial, attempt, step, when in reports:
        pairs.add(site, trial, attempt, step, when)
    return pairs.speeds()


def read_speeds(reader: Reader) -> dict[str, Speed]:
    """Every site's speed from the store, in one query (STEP_TIMES)."""
    return step_speeds(reader.db.execute(STEP_TIMES))


class SpeedTracker:
    """The sites' speeds as a search runs, read from the reports stored since the last call
    (the driver's own store connection: a few rows a poll, however large the store)."""

    def __init__(self, db: Any) -> None:  # a store's connection (Reader.db)
        self.db = db
        self.after = 0  # the metrics rowid read up to
        self.pairs = _Pairs(RECENT)

    def speeds(self) -> dict[str, Speed]:
        for site, trial, attempt, step, when, rowid in self.db.execute(NEW_STEP_TIMES,
                                                                        (self.after,)):
            self.pairs.add(site, trial, attempt, step, when)
            self.after = max(self.after, rowid)
        return self.pairs.speeds()

    def update(self, loads: dict) -> None:
        """Set each site's seconds_per_step (hpsearch.executors.brokerage.SiteLoad)."""
        for name, speed in self.speeds().items():
            if name in loads:
                loads[name].seconds_per_step = speed.seconds_per_step

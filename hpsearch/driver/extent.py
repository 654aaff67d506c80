"""How far a search goes: its total of trials, the points it asks first, its time budget.

- Total: the spec's `search.trials`, raised (or lowered, never below the trials already
  asked) by `hpsearch resume NAME --trials N`; the store's `trials_requested` holds it, so a
  resumed driver goes on with it. A grid cannot grow past its points.
- Enqueued points (Optuna's enqueue_trial): `search.enqueue` in the spec, then the points of
  `hpsearch enqueue`, are asked before any sampled trial, in that order; an enqueued point
  beyond the total raises the total by one. Each trial asked for a point carries the point's
  id in its sampler attrs (`hpsearch_enqueued`), written with the trial, so a point is asked
  once even if the driver dies before it removes the request file.
- Time budget (`search.timeout`): from the experiment's creation; past it no new sampled trial
  is asked (those running finish, enqueued points still run) and the search ends completed.
Requests reach a running driver as files (hpsearch.driver.requests); only the driver writes
the store. A `finish` request (paused trials to train to max_resource) goes to `on_finish`,
the promoter's (hpsearch.driver.policies); a search without promotion refuses it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hpsearch.driver import requests
from hpsearch.search.base import Search
from hpsearch.search.registry import strategy
from hpsearch.spec.known_points import point_problem
from hpsearch.spec.model import Search as SearchSettings
from hpsearch.store import rows

MAX_TRIALS = 10**9  # a total beyond this is a typo (and would not fit the store's integers)
ENQUEUED = "hpsearch_enqueued"  # sampler attr: the id of the enqueued point a trial was asked for


@dataclass(frozen=True)
class Point:
    id: str  # spec:<i>, or the id of the request that brought it
    params: dict
    request: requests.Request | None = None


class Extent:
    def __init__(self, settings: SearchSettings, exp_dir: Path, store, search: Search,
                 on_event: Callable[[str], None],
                 warm_start: Callable[[], tuple[list, list[str]]] = lambda: ([], []),
                 on_finish: Callable[[requests.Request], None] | None = None):
        """settings: the spec's `search` section; exp_dir: where requests arrive;
        warm_start: loads search.warm_start's trials and a line per experiment
        (hpsearch.driver.warm_start.load); on_finish: takes `finish` requests."""
        self.settings, self.exp_dir, self.warm_start = settings, exp_dir, warm_start
        self.on_finish = on_finish
        self.store, self.search, self.on_event = store, search, on_event
        self.points: list[Point] = []
        self.asked_ids: set[str] = set()
        self.created = store.experiment().created
        self.timed_out = False

    def warm_trials(self) -> list:
        """search.warm_start's trials for the sampler (each experiment's yield an event)."""
        if not self.settings.warm_start:
            return []
        warm, lines = self.warm_start()
        for line in lines:
            self.store.add_event("warm_start", line)
            self.on_event(line)
        return warm

    def recover(self, trials: list[rows.TrialRow]) -> None:
        """After the search is rebuilt: the stored total, the points not yet asked."""
        self.search.total = self.store.experiment().trials_requested
        self.asked_ids = {t.sampler_attrs[ENQUEUED] for t in trials if ENQUEUED in t.sampler_attrs}
        self.points = [Point(f"spec:{i}", dict(p)) for i, p in enumerate(self.settings.enqueue)
                       if f"spec:{i}" not in self.asked_ids]
        self.take()

    def take(self) -> None:
        """Apply the requests waiting in the experiment's requests folder."""
        found, notes = requests.pending(self.exp_dir)
        for note in notes:
            self._warn(note)
        queued = {p.id for p in self.points}
        for request in found:
            if request.kind == "trials":
                self._total(request)
            elif request.kind == "finish":
                self._finish(request)
            elif request.id in self.asked_ids:  # asked before a crash kept its file
                requests.done(request)
            elif request.id not in queued:
                self._enqueue(request)

    def next_point(self) -> Point | None:
        """The enqueued point to ask next, or None; raises the total to make room for it."""
        if not self.points:
            return None
        if self.search.asked >= self.search.total:
            self._set_total(self.search.asked + 1, "an enqueued point beyond the total")
        return self.points[0]

    def asked(self, point: Point) -> None:
        """`point`'s trial is stored (its id in its sampler attrs): its request is done."""
        self.points.remove(point)
        self.asked_ids.add(point.id)
        if point.request is not None:
            requests.done(point.request)

    def out_of_time(self) -> bool:
        if self.settings.timeout is None or self.timed_out:
            return self.timed_out
        if time.time() - self.created < self.settings.timeout:
            return False
        self.timed_out = True
        message = (f"search.timeout ({self.settings.timeout:g} s) reached after "
                   f"{self.search.asked} trials: no new trial is asked")
        self.store.add_event("timeout", message)
        self.on_event(message)
        return True

    # -- requests --------------------------------------------------------------------------
    def _total(self, request: requests.Request) -> None:
        total = request.data.get("total")
        grid = getattr(self.search, "points", None)
        if not isinstance(total, int) or isinstance(total, bool) or total < self.search.asked \
                or total > MAX_TRIALS:
            self._warn(f"resume --trials {total!r} refused: expected at least the "
                       f"{self.search.asked} trials already asked, at most {MAX_TRIALS}")
        elif grid is not None and total > len(grid):
            self._set_total(len(grid), f"resume --trials {total}: the grid has only "
                                       f"{len(grid)} points; running them all")
        else:
            self._set_total(total, f"resume --trials {total}")
        requests.done(request)

    def _finish(self, request: requests.Request) -> None:
        trials = request.data.get("trials")
        if self.on_finish is None or not isinstance(trials, list) \
                or not all(isinstance(t, int) and not isinstance(t, bool) for t in trials):
            self._warn(f"finish request {request.path.name} refused: " + (
                "expected a list of trial ids" if self.on_finish else
                "this search pauses no trials (search.pruner.mode is not promotion)"))
            requests.done(request)
        else:
            self.on_finish(request)

    def _enqueue(self, request: requests.Request) -> None:
        params = request.data.get("params")
        problem = point_problem(self.settings.space, params)[1] \
            if isinstance(params, dict) else "expected a mapping of parameters"
        if problem or strategy(self.settings.strategy).facts.enumerates:
            self._warn(f"enqueued point {params!r} refused: "
                       f"{problem or 'a grid runs its own points'}")
            requests.done(request)
            return
        assert isinstance(params, dict)  # else refused above
        self.points.append(Point(request.id, params, request))
        self.on_event(f"enqueued: {params}")

    def _set_total(self, total: int, why: str) -> None:
        before = self.search.total
        self.search.total = total
        self.store.set_trials_requested(total, f"{why}: {before} -> {total} trials in all")
        self.on_event(f"{why}: {total} trials in all")

    def _warn(self, message: str) -> None:
        self.store.add_event("warning", message)
        self.on_event(message)

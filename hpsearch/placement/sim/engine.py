"""The event loop of the placement simulator, shared by every policy: the seeded workload,
the Slurm queue (other users' jobs and the search's, tried in submission order at every
event) and the interface (`Search`) through which a policy submits and places its jobs."""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from hpsearch.placement.sim.cluster import (
    BACKGROUND_SIZES,
    TRIAL_SIZES,
    Cluster,
    SimConfig,
    TrialRecord,
)

_P = TypeVar("_P")  # what an event's action is given with the time


def _pick(rng: random.Random, table: tuple[tuple[int, int], ...]) -> int:
    sizes, weights = zip(*table)
    return rng.choices(sizes, weights)[0]


def workload(config: SimConfig):
    """The seeded workload, identical for every policy: background (arrival, size, duration)
    and trials (size, duration) in submission order."""
    rng = random.Random(config.seed)
    mean_size = sum(s * w for s, w in BACKGROUND_SIZES) / sum(w for _, w in BACKGROUND_SIZES)
    rate = config.background_load * config.nodes / (mean_size * config.background_mean_duration)
    trial_sizes = [_pick(rng, TRIAL_SIZES) for _ in range(config.trials)]
    trial_durations = [rng.expovariate(1 / config.trial_mean_duration) + 60
                       for _ in range(config.trials)]
    # Background arrivals come from their own stream, generated lazily as the run needs them.
    bg_rng = random.Random(config.seed * 7919 + 1)

    def background():
        t = 0.0
        while True:
            t += bg_rng.expovariate(rate)
            size = min(_pick(bg_rng, BACKGROUND_SIZES), config.nodes)
            yield t, size, bg_rng.expovariate(1 / config.background_mean_duration) + 60

    return trial_sizes, trial_durations, background()


@dataclass(eq=False)
class Job:
    """A job in the Slurm queue: another user's (`bg`), a trial's (`trial`) or a pilot."""

    kind: str
    size: int                   # nodes
    submit: float
    duration: float             # it ends this long after its start (a pilot may end earlier)
    index: int = -1             # the trial's or the pilot's index
    nodes: list[int] = field(default_factory=list)
    per_leaf: dict[int, int] = field(default_factory=dict)
    start: float | None = None
    end: float | None = None


class Search(Protocol):
    """The search's side of a run: what it submits, where its jobs may go, what it does when
    they start and end. The engine calls `begin` once at the end of the warm-up, then at every
    event `before_queue`, `place` for each of its pending jobs in queue order (and `started`
    for each that got nodes), `after_queue`, and `done`; `ended` when one of its jobs ends."""

    records: list[TrialRecord]      # one per trial started

    def begin(self, t: float) -> None: ...
    def before_queue(self, t: float) -> None: ...
    def place(self, t: float, job: Job) -> list[int] | None: ...
    def started(self, t: float, job: Job) -> None: ...
    def after_queue(self, t: float) -> None: ...
    def ended(self, t: float, job: Job) -> None: ...
    def done(self) -> bool: ...


def wake(t: float, payload: object) -> None:
    """An event that only makes the queue be tried again (the end of a trial's wait)."""


class Engine:
    """What every policy shares: the cluster, the event heap and the Slurm queue. Pending jobs
    (background and the search's) are tried in submission order at every event, and any that
    can start does (backfill without reservations). Background jobs are placed first-fit."""

    def __init__(self, config: SimConfig):
        self.config = config
        self.cluster = Cluster(config)
        self.pending: list[Job] = []
        self._events: list[tuple[float, int, Callable[[float], None]]] = []
        self._seq = 0
        self.busy = 0.0             # node-seconds busy since the end of the warm-up
        self._busy_nodes = 0
        self.first = self.last = config.warmup
        self._search: Search | None = None

    def at(self, t: float, action: Callable[[float, _P], None], payload: _P) -> None:
        """Call action(t, payload) at time t (ties: in the order scheduled)."""
        heapq.heappush(self._events, (t, self._seq, lambda now: action(now, payload)))
        self._seq += 1

    def end(self, t: float, job: Job) -> None:
        """End `job` at t and free its nodes; a job that already ended is left alone."""
        if job.end is not None:
            return
        job.end = t
        self.cluster.release(job.nodes, job.per_leaf)
        self._busy_nodes -= job.size
        if job.kind != "bg" and self._search is not None:
            self._search.ended(t, job)

    def shrink(self, job: Job, nodes: list[int]) -> None:
        """Give back `nodes` of a running job, which keeps running on the rest (Slurm's
        `scontrol update JobId=.. NodeList=<the rest>`). Only for a job under one leaf (a
        pilot), whose nodes load no uplink."""
        assert len(job.per_leaf) == 1
        per_leaf: dict[int, int] = {}
        for n in nodes:
            job.nodes.remove(n)
            leaf = self.cluster.leaf_of(n)
            per_leaf[leaf] = per_leaf.get(leaf, 0) + 1
            job.per_leaf[leaf] -= 1
            if not job.per_leaf[leaf]:
                del job.per_leaf[leaf]
        self.cluster.release(nodes, per_leaf)
        job.size -= len(nodes)
        self._busy_nodes -= len(nodes)

    def _start(self, t: float, job: Job, nodes: list[int]) -> None:
        job.nodes, job.start = nodes, t
        job.per_leaf = self.cluster.allocate(nodes)
        self._busy_nodes += job.size
        self.at(t + job.duration, self.end, job)

    def run(self, search: Search, background: Iterator[tuple[float, int, float]]) -> None:
        """Run until `search.done()`."""
        self._search = search

        def arrive(t: float, payload: tuple[float, int, float]) -> None:
            _, size, duration = payload
            self.pending.append(Job("bg", size, t, duration))
            if not search.done():
                arrival = next(background)
                self.at(arrival[0], arrive, arrival)

        first = next(background)
        self.at(first[0], arrive, first)
        self.at(self.config.warmup, lambda t, _: search.begin(t), None)
        while self._events:
            t, _, action = heapq.heappop(self._events)
            if t > self.last and self.last >= self.first:
                self.busy += self._busy_nodes * (t - self.last)
            self.last = max(self.last, t)
            action(t)
            search.before_queue(t)
            still: list[Job] = []
            for job in self.pending:
                nodes = (self.cluster.first_fit(job.size) if job.kind == "bg"
                         else search.place(t, job))
                if nodes is None:
                    still.append(job)
                    continue
                self._start(t, job, nodes)
                if job.kind != "bg":
                    search.started(t, job)
            self.pending[:] = still
            search.after_queue(t)
            if search.done():
                break

"""The `pilot` policy of the placement simulator: the search holds pilot jobs and late-binds
its trials into them, as hpsearch's pilot executor does.

A pilot asks for nodes under one leaf switch. It waits in the Slurm queue like any job
(tried in submission order at every event, no reservations) and starts on the best-fit leaf
that has that many free nodes; it never spans. No trial of it may run past its time limit
(`pilot_time`).

Late binding: a ready trial goes to a running pilot that has enough free nodes and whose
remaining time holds its whole run; with `pilot_fit` "best" (the default) the one with the
fewest free nodes, so that trials pack into few pilots and the rest empty out; with "first"
the oldest. A trial never spans pilots. Ready trials are tried in the order they became
ready; one that fits nowhere yet waits without holding back those behind it, as the queue
does.

Supply, as Harvester does it: the search keeps queued the pilots its ready trials that no
running pilot takes need, with at most `max_pilots` pilots queued and running together;
queued pilots no longer needed are withdrawn (an scancel of a pending job). With
`pilot_sizing` "ready" (the default) those pilots are as large as the trials they are for
(the ready trials packed first-fit decreasing into pilots of at most `pilot_nodes`); with
"fixed", ceil(their nodes / pilot_nodes) pilots of `pilot_nodes`.

Giving nodes back: with `pilot_shrink` (the default) a pilot gives back each node that no
trial has used for its hold time (Slurm shrinks a running job: `scontrol update JobId=..
NodeList=<the nodes it keeps>`), and exits when it has none left. The hold time is
`idle_timeout`, or with `pilot_hold` "queue" (the default) at least the mean time the
search's last four pilots of its size or larger waited in the queue, and how long one such
pilot has been queued now (ski rental: keep an idle node as long as getting it back would
take). Without `pilot_shrink` a pilot holds all its
nodes until it has run no trial for `idle_timeout`. With `pilot_make_room` (the default), a
queued pilot that no leaf has room for makes running pilots give back their idle nodes on the
leaf where that makes room for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hpsearch.placement.sim.cluster import TrialRecord, effective_bandwidth, trial_record
from hpsearch.placement.sim.engine import Engine, Job
from hpsearch.placement.sim.idle import IdleLedger

HOLD_WINDOW = 4     # pilots whose queue waits `pilot_hold` "queue" averages


@dataclass(frozen=True)
class PilotRecord:
    index: int
    submit: float
    start: float
    end: float                  # when it exited: idle, or at its time limit
    limit: float                # start + pilot_time: no trial of it may run past this
    nodes: tuple[int, ...]      # the nodes it started on
    leaves: tuple[int, ...]     # leaf indices its nodes are under
    trials: int                 # trials it ran
    busy_node_seconds: float    # node-seconds its trials ran
    node_seconds: float         # node-seconds it held (less than nodes x time if it shrank)
    released: tuple[tuple[float, int], ...] = ()    # (when, node) given back before its end


@dataclass(eq=False)
class _Pilot:
    """A running pilot: its job, the nodes no trial of it runs on and since when each is."""

    job: Job
    free: list[int]
    free_since: dict[int, float]
    idle_since: float
    nodes: tuple[int, ...]      # the nodes it started on (job.nodes shrinks)
    running: int = 0
    trials: int = 0
    busy_node_seconds: float = 0.0
    released: list[tuple[float, int]] = field(default_factory=list)

    @property
    def limit(self) -> float:
        assert self.job.start is not None
        return self.job.start + self.job.duration

    @property
    def idle_nodes(self) -> int:
        return len(self.free)

    def held_node_seconds(self, t: float) -> float:
        assert self.job.start is not None
        start = self.job.start
        return (sum(when - start for when, _ in self.released)
                + len(self.job.nodes) * (t - start))


def check_pilot_config(engine: Engine, sizes: list[int], durations: list[float]) -> None:
    """Raise ValueError if a pilot cannot start (more nodes than a leaf) or a trial can never
    run in one (more nodes than a pilot, or a run longer than its time limit: the simulator
    does not model a trial checkpointed in one pilot and resumed in another)."""
    config = engine.config
    if config.pilot_nodes > config.nodes_per_leaf:
        raise ValueError(f"pilot_nodes ({config.pilot_nodes}) must fit one leaf "
                         f"({config.nodes_per_leaf} nodes)")
    if sizes and max(sizes) > config.pilot_nodes:
        raise ValueError(f"pilot_nodes ({config.pilot_nodes}) must hold the largest trial "
                         f"({max(sizes)} nodes)")
    too_long = [d for d in durations if d > config.pilot_time]
    if too_long:
        raise ValueError(f"{len(too_long)} trial(s) run longer than pilot_time "
                         f"({config.pilot_time:g} s; the longest {max(too_long):.0f} s)")


class PilotSearch:
    """The search's side of a run with pilots (see the module docstring). `records` holds a
    record per trial (its wait: from ready to its start in a pilot), `pilot_records` one per
    pilot that started, `idle` their idle node-seconds by cause."""

    def __init__(self, engine: Engine, sizes: list[int], durations: list[float]):
        check_pilot_config(engine, sizes, durations)
        self.engine, self.config = engine, engine.config
        self.sizes, self.durations = sizes, durations
        self.records: list[TrialRecord] = []
        self.pilot_records: list[PilotRecord] = []
        self.ready: list[tuple[float, int]] = []    # (ready since, trial index), in that order
        self.queued: list[Job] = []                 # pilots pending in the Slurm queue
        self.running: list[_Pilot] = []             # in start order
        self.next_trial = self.finished = 0
        self.submitted = self.withdrawn = 0         # pilots
        self.queue_waits: list[tuple[int, float]] = []  # (nodes, s queued) of started pilots
        self.idle = IdleLedger()

    def _account(self, t: float) -> None:
        """Charge the pilots' idle nodes since the last change to their causes."""
        ready = [(self.sizes[i], self.durations[i]) for _, i in self.ready]
        all_bound = not ready and self.next_trial >= len(self.sizes)
        self.idle.advance(t, self.running, ready, all_bound)

    def _make_ready(self, t: float) -> None:
        if self.next_trial < len(self.sizes):
            self.ready.append((t, self.next_trial))
            self.next_trial += 1

    def begin(self, t: float) -> None:
        for _ in range(min(self.config.parallel, len(self.sizes))):
            self._make_ready(t)

    def before_queue(self, t: float) -> None:
        self._bind(t)
        self._supply(t)
        if self.config.pilot_make_room:
            self._make_room(t)

    def after_queue(self, t: float) -> None:
        self._bind(t)

    def place(self, t: float, job: Job) -> list[int] | None:
        leaf = self.engine.cluster.best_fit_leaf(job.size)
        return None if leaf is None else self.engine.cluster.free_nodes_of_leaf(leaf, job.size)

    def started(self, t: float, job: Job) -> None:
        self._account(t)
        self.queued.remove(job)
        self.queue_waits.append((job.size, t - job.submit))
        pilot = _Pilot(job, list(job.nodes), dict.fromkeys(job.nodes, t), idle_since=t,
                       nodes=tuple(job.nodes))
        self.running.append(pilot)
        self._check_idle_at(t, pilot)

    def ended(self, t: float, job: Job) -> None:
        """The pilot's job ended: its time limit, or it went idle (`_idle_check`)."""
        self._account(t)
        pilot = next(p for p in self.running if p.job is job)
        self.running.remove(pilot)
        assert job.start is not None
        leaves = tuple(sorted({self.engine.cluster.leaf_of(n) for n in pilot.nodes}))
        self.pilot_records.append(PilotRecord(
            job.index, job.submit, job.start, t, pilot.limit, pilot.nodes, leaves,
            pilot.trials, pilot.busy_node_seconds, pilot.held_node_seconds(t),
            tuple(pilot.released)))

    def done(self) -> bool:
        return self.finished >= len(self.sizes) and not self.running and not self.queued

    def _pilot_for(self, t: float, k: int, duration: float) -> _Pilot | None:
        """The running pilot a trial of k nodes and `duration` goes to now, if any (see
        `pilot_fit` in the module docstring; ties: the oldest)."""
        fits = [p for p in self.running if len(p.free) >= k and t + duration <= p.limit]
        if not fits:
            return None
        if self.config.pilot_fit == "first":
            return fits[0]
        return min(fits, key=lambda p: len(p.free))

    def _bind(self, t: float) -> None:
        """Late binding: each ready trial, in order, to the pilot `_pilot_for` picks."""
        self._account(t)
        waiting: list[tuple[float, int]] = []
        for ready_since, i in self.ready:
            k, duration = self.sizes[i], self.durations[i]
            pilot = self._pilot_for(t, k, duration)
            if pilot is None:
                waiting.append((ready_since, i))
                continue
            nodes, pilot.free = pilot.free[:k], pilot.free[k:]
            for n in nodes:
                del pilot.free_since[n]
            pilot.running += 1
            pilot.trials += 1
            pilot.busy_node_seconds += k * duration
            per_leaf = {self.engine.cluster.leaf_of(nodes[0]): k}     # a pilot never spans
            bandwidth = effective_bandwidth(self.config, per_leaf, self.engine.cluster.uplink_flows)
            self.records.append(trial_record(self.config, i, nodes, per_leaf, ready_since, t,
                                             duration, bandwidth, pilot=pilot.job.index))
            self.engine.at(t + duration, self._trial_end, (pilot, nodes))
        self.ready = waiting

    def _trial_end(self, t: float, payload: tuple[_Pilot, list[int]]) -> None:
        pilot, nodes = payload
        self._account(t)
        pilot.free = sorted(pilot.free + nodes)
        pilot.free_since.update(dict.fromkeys(nodes, t))
        pilot.running -= 1
        self.finished += 1
        self._make_ready(t)
        if pilot.running == 0:
            pilot.idle_since = t
        self._check_idle_at(t, pilot)

    def _check_idle_at(self, t: float, pilot: _Pilot) -> None:
        if self.config.pilot_shrink or pilot.running == 0:
            self.engine.at(t + self.config.idle_timeout, self._idle_check, (pilot, t))

    def _idle_check(self, t: float, payload: tuple[_Pilot, float]) -> None:
        """A check of the nodes free since `since`: without `pilot_shrink` the pilot exits
        if it has run no trial since; with it, the pilot gives back each node unused since
        then once its hold time (`_hold`) has passed, or looks again when it will have."""
        pilot, since = payload
        if pilot.job.end is not None:
            return
        if not self.config.pilot_shrink:
            if pilot.running == 0 and pilot.idle_since == since:
                self.engine.end(t, pilot.job)
            return
        unused = [n for n in pilot.free if pilot.free_since[n] <= since]
        if not unused:
            return
        hold = self._hold(pilot, t)
        if t - since + 1e-9 < hold:
            self.engine.at(since + hold, self._idle_check, (pilot, since))
            return
        self._give_back(t, pilot, unused)

    def _hold(self, pilot: _Pilot, now: float) -> float:
        """How long the pilot keeps a node no trial uses (see `pilot_hold`): with "queue",
        at least the mean queue wait of the last pilots of its size or larger that started,
        and how long one of them has been queued now."""
        if self.config.pilot_hold != "queue":
            return self.config.idle_timeout
        size = len(pilot.job.nodes)
        waits = [w for k, w in self.queue_waits if k >= size][-HOLD_WINDOW:]
        queued = [now - job.submit for job in self.queued if job.size >= size]
        return max([self.config.idle_timeout, sum(waits) / len(waits) if waits else 0.0,
                    *queued])

    def _give_back(self, t: float, pilot: _Pilot, nodes: list[int]) -> None:
        """The pilot gives back some of its free nodes; one left with none exits."""
        self._account(t)
        if len(nodes) == len(pilot.job.nodes):
            self.engine.end(t, pilot.job)
            return
        pilot.free = [n for n in pilot.free if n not in nodes]
        for n in nodes:
            del pilot.free_since[n]
        pilot.released += [(t, n) for n in nodes]
        self.engine.shrink(pilot.job, nodes)

    def _make_room(self, t: float) -> None:
        """For each queued pilot that no leaf has the free nodes for, give back the free
        nodes of running pilots on the leaf where the fewest are needed to make room for it
        (nodes no trial runs on, which their hold time would give back later anyway), the
        pilots with the most free nodes first: the search sees its own pilots' idle nodes
        and the leaves' free ones (sinfo), and a node given back is free at once. Other
        jobs queued before the pilot may still take them."""
        cluster = self.engine.cluster
        for job in list(self.queued):
            if cluster.best_fit_leaf(job.size) is not None:
                continue
            idle: dict[int, list[tuple[_Pilot, int]]] = {}
            for pilot in self.running:
                for n in pilot.free:
                    idle.setdefault(cluster.leaf_of(n), []).append((pilot, n))
            short = {leaf: job.size - cluster.free_in_leaf[leaf] for leaf, nodes in idle.items()
                     if cluster.free_in_leaf[leaf] + len(nodes) >= job.size}
            if not short:
                continue
            leaf = min(short, key=lambda leaf: (short[leaf], leaf))
            taken = sorted(idle[leaf], key=lambda pn: -len(pn[0].free))[:short[leaf]]
            for pilot in dict.fromkeys(p for p, _ in taken):
                self._give_back(t, pilot, [n for p, n in taken if p is pilot])

    def _supply(self, t: float) -> None:
        """Keep queued the pilots the ready trials need (see `pilot_sizing`), within
        max_pilots; queued pilots no longer needed are withdrawn, the newest first."""
        sizes = [self.sizes[i] for _, i in self.ready]
        if self.config.pilot_sizing == "ready":
            wanted = pilot_sizes(sizes, self.config.pilot_nodes)
        else:
            wanted = [self.config.pilot_nodes] * -(-sum(sizes) // self.config.pilot_nodes)
        keep: list[Job] = []
        for job in self.queued:
            if job.size in wanted:
                wanted.remove(job.size)
                keep.append(job)
        for job in reversed(self.queued):
            if job not in keep:
                self.engine.pending.remove(job)
                self.withdrawn += 1
        self.queued = keep
        room = self.config.max_pilots - len(self.running) - len(self.queued)
        for size in wanted[:max(room, 0)]:
            job = Job("pilot", size, t, self.config.pilot_time, index=self.submitted)
            self.submitted += 1
            self.queued.append(job)
            self.engine.pending.append(job)


def pilot_sizes(trial_sizes: list[int], pilot_nodes: int) -> list[int]:
    """The pilots that hold `trial_sizes`: first-fit decreasing into bins of pilot_nodes,
    each pilot the size of its bin, largest first."""
    bins: list[int] = []
    for k in sorted(trial_sizes, reverse=True):
        i = next((j for j, used in enumerate(bins) if used + k <= pilot_nodes), None)
        if i is None:
            bins.append(k)
        else:
            bins[i] += k
    return sorted(bins, reverse=True)

"""The `pilot` policy of the placement simulator: the search holds pilot jobs and late-binds
its trials into them, as hpsearch's pilot executor does.

A pilot asks for `pilot_nodes` nodes under one leaf switch. It waits in the Slurm queue like
any job (tried in submission order at every event, no reservations) and starts on the
best-fit leaf that has that many free nodes; it never spans. It holds them until its time
limit (`pilot_time`) or until it has run no trial for `idle_timeout`.

Late binding: a ready trial goes to the first running pilot (oldest first) that has enough
free nodes and whose remaining time holds the trial's whole run; a trial never spans pilots.
Ready trials are tried in the order they became ready; one that fits nowhere yet waits
without holding back those behind it, as the queue does.

Supply, as Harvester does it: the search keeps ceil(nodes of the ready trials that no
running pilot takes / pilot_nodes) pilots queued, with at most `max_pilots` pilots queued
and running together; queued pilots no longer needed are withdrawn (an scancel of a pending
job), the newest first.
"""

from __future__ import annotations

from dataclasses import dataclass

from hpsearch.placement.sim.cluster import TrialRecord, effective_bandwidth, trial_record
from hpsearch.placement.sim.engine import Engine, Job


@dataclass(frozen=True)
class PilotRecord:
    index: int
    submit: float
    start: float
    end: float                  # when it exited: idle, or at its time limit
    limit: float                # start + pilot_time: no trial of it may run past this
    nodes: tuple[int, ...]
    leaves: tuple[int, ...]     # leaf indices its nodes are under
    trials: int                 # trials it ran
    busy_node_seconds: float    # node-seconds its trials ran

    @property
    def node_seconds(self) -> float:
        """Node-seconds it held."""
        return len(self.nodes) * (self.end - self.start)


@dataclass(eq=False)
class _Pilot:
    """A running pilot: its job and the nodes no trial of it runs on."""

    job: Job
    free: list[int]
    idle_since: float
    running: int = 0
    trials: int = 0
    busy_node_seconds: float = 0.0

    @property
    def limit(self) -> float:
        assert self.job.start is not None
        return self.job.start + self.job.duration


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
    pilot that started."""

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

    def after_queue(self, t: float) -> None:
        self._bind(t)

    def place(self, t: float, job: Job) -> list[int] | None:
        leaf = self.engine.cluster.best_fit_leaf(job.size)
        return None if leaf is None else self.engine.cluster.free_nodes_of_leaf(leaf, job.size)

    def started(self, t: float, job: Job) -> None:
        self.queued.remove(job)
        pilot = _Pilot(job, list(job.nodes), idle_since=t)
        self.running.append(pilot)
        self.engine.at(t + self.config.idle_timeout, self._idle_check, (pilot, t))

    def ended(self, t: float, job: Job) -> None:
        """The pilot's job ended: its time limit, or `_idle_check` ended it."""
        pilot = next(p for p in self.running if p.job is job)
        self.running.remove(pilot)
        assert job.start is not None
        self.pilot_records.append(PilotRecord(
            job.index, job.submit, job.start, t, pilot.limit, tuple(job.nodes),
            tuple(sorted(job.per_leaf)), pilot.trials, pilot.busy_node_seconds))

    def done(self) -> bool:
        return self.finished >= len(self.sizes) and not self.running and not self.queued

    def _bind(self, t: float) -> None:
        """Late binding: each ready trial, in order, to the first pilot it fits in now."""
        waiting: list[tuple[float, int]] = []
        for ready_since, i in self.ready:
            k, duration = self.sizes[i], self.durations[i]
            pilot = next((p for p in self.running
                          if len(p.free) >= k and t + duration <= p.limit), None)
            if pilot is None:
                waiting.append((ready_since, i))
                continue
            nodes, pilot.free = pilot.free[:k], pilot.free[k:]
            pilot.running += 1
            pilot.trials += 1
            pilot.busy_node_seconds += k * duration
            per_leaf: dict[int, int] = {}
            for n in nodes:
                leaf = self.engine.cluster.leaf_of(n)
                per_leaf[leaf] = per_leaf.get(leaf, 0) + 1
            bandwidth = effective_bandwidth(self.config, per_leaf, self.engine.cluster.uplink_flows)
            self.records.append(trial_record(self.config, i, nodes, per_leaf, ready_since, t,
                                             duration, bandwidth, pilot=pilot.job.index))
            self.engine.at(t + duration, self._trial_end, (pilot, nodes))
        self.ready = waiting

    def _trial_end(self, t: float, payload: tuple[_Pilot, list[int]]) -> None:
        pilot, nodes = payload
        pilot.free = sorted(pilot.free + nodes)
        pilot.running -= 1
        self.finished += 1
        self._make_ready(t)
        if pilot.running == 0:
            pilot.idle_since = t
            self.engine.at(t + self.config.idle_timeout, self._idle_check, (pilot, t))

    def _idle_check(self, t: float, payload: tuple[_Pilot, float]) -> None:
        pilot, since = payload
        if pilot.job.end is None and pilot.running == 0 and pilot.idle_since == since:
            self.engine.end(t, pilot.job)

    def _supply(self, t: float) -> None:
        """Keep as many pilots queued as the ready trials need, within max_pilots."""
        needed = -(-sum(self.sizes[i] for _, i in self.ready) // self.config.pilot_nodes)
        while len(self.queued) > needed:
            self.engine.pending.remove(self.queued.pop())
            self.withdrawn += 1
        room = self.config.max_pilots - len(self.running) - len(self.queued)
        for _ in range(min(needed - len(self.queued), room)):
            job = Job("pilot", self.config.pilot_nodes, t, self.config.pilot_time,
                      index=self.submitted)
            self.submitted += 1
            self.queued.append(job)
            self.engine.pending.append(job)

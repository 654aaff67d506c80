"""What the live view shows, read from the store: one `Snapshot` per refresh.

Every query is bounded so that a store of 10,000 trials stays fast: state counts use the
state index, the trial table asks for at most `rows` trials (in flight first, then the most
recently finished), metrics are looked up by their primary key (trial, step, name) for the
shown trials only, and the best value / Pareto front is recomputed only when the number of
completed trials changes; the pilot panel lists only pilots not ended (about
executor.pilots.max of them); in promotion mode the ETA's steps are counted once, then only
for trials that changed (hpsearch.tui.eta). With executor.sites, the sites panel reads the
trials in flight, four columns of each attempt sent to a site, and every report's step and
time for the sites' speed, that last at most every SPEEDS_EVERY seconds. Nothing here
writes: the store is opened read-only (Reader).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from hpsearch.ingest import outcome
from hpsearch.store.lockfile import DriverLock
from hpsearch.store.rows import (
    CANCELLED,
    COMPLETED,
    DONE,
    IN_FLIGHT,
    RUNNING,
    ExperimentRow,
    TrialRow,
)
from hpsearch.store.runs import STORE_FILE
from hpsearch.store.site_speeds import Speed, read_speeds
from hpsearch.tui import eta as clock
from hpsearch.views.pilots import PilotLine, ended_count, pilot_lines
from hpsearch.views.sites import SiteLine, experiment_sites, site_lines
from hpsearch.views.spec_facts import spec_facts

if TYPE_CHECKING:
    from hpsearch.placement.topology import Topology

SPEEDS_EVERY = 30.0  # seconds: the sites' speeds read every report (~0.5 s for 50,000)


@dataclass(frozen=True)
class TrialLine:
    """One row of the trial table."""

    id: int
    state: str            # the store's state, or "pending" while the scheduler holds it
    params: dict
    job_id: str | None
    pending_reason: str | None
    nodes: str | None
    leaves: tuple[str, ...]
    attempt: int
    step: int | None      # last reported step of the first objective metric
    latest: float | None  # its last value
    best: float | None    # its best value so far (by the objective's direction)
    duration: float | None
    error: str | None


@dataclass(frozen=True)
class LeafLine:
    """One leaf switch of the cluster panel."""

    leaf: str
    free: int
    used: int   # allocated or mixed
    down: int   # down or drained
    trials: tuple[int, ...]


@dataclass(frozen=True)
class Snapshot:
    name: str
    strategy: str
    executor: str                # executor.type, as the spec names it
    status: str                  # the experiment's status in the store
    driver_pid: int | None
    metrics: tuple[str, ...]     # objective metric names
    directions: tuple[str, ...]
    total: int                   # trials requested
    counts: dict[str, int]
    elapsed: float
    eta: float | None
    trials: tuple[TrialLine, ...]
    best: TrialLine | None       # single objective: the best completed trial
    best_values: tuple[float, ...] = ()
    front_size: int | None = None  # several objectives: size of the Pareto front
    cluster: tuple[LeafLine, ...] | None = None  # Slurm only; None: not known (yet)
    cluster_note: str | None = None
    slurm_trouble: str | None = None  # "Slurm unreachable since ...", while it lasts
    pilots: tuple[PilotLine, ...] = ()  # pilot jobs not ended (hpsearch.views.pilots)
    pilots_ended: int = 0
    work: clock.Progress | None = None  # what the ETA is estimated from (hpsearch.tui.eta)
    sites: tuple[SiteLine, ...] = ()  # executor.sites (hpsearch.views.sites)
    taken: float = field(default_factory=time.time)
    on_slurm: bool = False       # its trials run as Slurm jobs or steps: the cluster panel

    @property
    def finished(self) -> int:
        """Trials finished for good or for now (paused), as `hpsearch status` counts them."""
        return sum(self.counts.get(s, 0) for s in DONE)


def _signed(values, directions) -> tuple[float, ...]:
    return tuple(v if d == "minimize" else -v for v, d in zip(values, directions))


def pareto_size(points: list[tuple[float, ...]]) -> int:
    """How many points (smaller is better in each coordinate) no other point dominates.
    Sorted sweep: a point can only be dominated by one before it in lexicographic order, so
    each is compared with the front found so far, not with every point."""
    front: list[tuple[float, ...]] = []
    for p in sorted(set(points)):
        if not any(all(a <= b for a, b in zip(q, p)) for q in front):
            front.append(p)
    # equal points are one point in the sweep; count each trial
    members = set(front)
    return sum(1 for p in points if p in members)


class SnapshotSource:
    """Builds snapshots of one experiment from its store (kept open read-only)."""

    def __init__(self, exp_dir: Path, rows: int = 40) -> None:
        from hpsearch.store.reader import Reader
        self.exp_dir = Path(exp_dir)
        self.reader = Reader(self.exp_dir / STORE_FILE)
        self.rows = rows
        exp = self.reader.experiment()
        self.metrics, self.executor = spec_facts(exp.spec_yaml)
        self.on_slurm = _on_slurm(self.executor)
        self.directions = tuple(exp.directions)
        promotion = clock.promotion_of(exp.spec_yaml, exp.spec_file, exp.base_dir, exp.name)
        self._promotion = None if promotion is None or not self.metrics else \
            clock.PromotionWork(self.reader, self.metrics[0], promotion)
        self._best_key: int | None = None  # completed count the best was computed for
        self._best: tuple[int | None, tuple[float, ...], int | None] = (None, (), None)
        self.sites = experiment_sites(exp, self.exp_dir.parent)
        self._speeds: tuple[float, dict[str, Speed]] = (-SPEEDS_EVERY, {})  # (read at, speeds)

    def close(self) -> None:
        self.reader.close()

    # -- queries ---------------------------------------------------------------------------
    def _rows(self, sql: str, args=()) -> list[TrialRow]:
        cursor = self.reader.db.execute(sql, args)
        names = [d[0] for d in cursor.description]
        return [TrialRow.from_db(dict(zip(names, row))) for row in cursor.fetchall()]

    def _shown_trials(self, limit: int) -> list[TrialRow]:
        marks = ",".join("?" * len(IN_FLIGHT))
        flying = self._rows(f"select * from trials where state in ({marks}) order by id "
                            f"limit ?", (*IN_FLIGHT, limit))
        left = limit - len(flying)
        if left <= 0:
            return flying
        # Fewer than `limit` in flight: `flying` holds them all. The sort takes as many
        # more rows as they are and drops them after, with no condition on the state: at
        # 100,000 trials the condition cost 0.023 s of the sort's 0.082. It keeps ids only,
        # then reads their rows: sorted whole, 100,000 rows took twice as long (SQLite's
        # sorter holds every column it returns).
        shown = {t.id for t in flying}
        ids = [i for (i,) in self.reader.db.execute(
            "select id from trials order by finished desc, id desc limit ?",
            (left + len(flying),)) if i not in shown][:left]
        marks = ",".join("?" * len(ids))
        return flying + self._rows(f"select * from trials where id in ({marks}) order by "
                                   "finished desc, id desc", ids)

    def _metric_facts(self, trial_id: int, attempt: int) -> tuple[int | None, float | None,
                                                                  float | None]:
        """(last step, last value, best value) of the first objective metric, this attempt."""
        if not self.metrics:
            return None, None, None
        name = self.metrics[0]
        db = self.reader.db
        last = db.execute("select step, value from metrics where trial = ? and name = ? "
                          "order by step desc limit 1", (trial_id, name)).fetchone()
        if last is None:
            return None, None, None
        agg = "min" if self.directions[0] == "minimize" else "max"
        best = db.execute(f"select {agg}(value) from metrics where trial = ? and name = ?",
                          (trial_id, name)).fetchone()[0]
        return last[0], last[1], best

    def _line(self, t: TrialRow, pilot_leaf: dict[str, tuple[str, ...]] | None = None
              ) -> TrialLine:
        """pilot_leaf: job id -> the leaf of a pilot under one leaf switch (a trial running
        in it is under that leaf too; the store learns its trial's leaf when it ends)."""
        step, latest, best = self._metric_facts(t.id, t.attempt)
        state: str = t.state  # shown: the scheduler's word while Slurm holds it back
        if state == RUNNING and t.sched_state and t.sched_state not in ("RUNNING",
                                                                          "COMPLETING"):
            state = t.sched_state.lower()
        leaves = tuple(x for x in (t.leaves or "").split(",") if x)
        if not leaves and t.job_id and pilot_leaf:
            leaves = pilot_leaf.get(t.job_id, ())
        return TrialLine(id=t.id, state=state, params=t.params, job_id=t.job_id,
                         pending_reason=t.pending_reason,
                         nodes=t.nodes or (t.host if t.job_id else None) or None,
                         leaves=leaves,
                         attempt=t.attempt, step=step, latest=latest, best=best,
                         duration=t.duration, error=outcome.cause(t.error) or None)

    def _ran(self, trials: list[TrialRow], now: float) -> dict[int, float | None]:
        """trial id -> the time it ran, summed over its attempts (status's `time` column and
        export's run_seconds: hpsearch.interop.trial_times), for the trials shown."""
        from hpsearch.interop.store_view import AttemptRow
        from hpsearch.interop.trial_times import trial_times
        if not trials:
            return {}
        marks = ",".join("?" * len(trials))
        cursor = self.reader.db.execute(f"select * from attempts where trial in ({marks}) "
                                        "order by trial, attempt", [t.id for t in trials])
        names = [d[0] for d in cursor.description]
        by_trial: dict[int, list[AttemptRow]] = {}
        for row in cursor.fetchall():
            attempt = AttemptRow.from_db(dict(zip(names, row)))
            by_trial.setdefault(attempt.trial, []).append(attempt)
        return {t.id: trial_times(t, by_trial.get(t.id, ()), now).run_seconds for t in trials}

    def _site_lines(self, now: float) -> tuple[SiteLine, ...]:
        """The sites panel's lines (hpsearch.views.sites, as status prints them): from the
        trials in flight, each attempt's site, queue wait, end and failure, and the speeds
        (read again once they are SPEEDS_EVERY seconds old); () without sites."""
        if not self.sites:
            return ()
        marks = ",".join("?" * len(IN_FLIGHT))
        flying = self._rows(f"select * from trials where state in ({marks}) and site is not "
                            "null", IN_FLIGHT)
        columns = ("site", "queue_wait", "finished", "failure")
        attempts = [dict(zip(columns, row)) for row in self.reader.db.execute(
            f"select {', '.join(columns)} from attempts where site is not null "
            "order by trial, attempt")]
        if now - self._speeds[0] >= SPEEDS_EVERY:
            self._speeds = (now, read_speeds(self.reader))
        return tuple(site_lines(self.sites, flying, attempts, now, self._speeds[1]))

    def _best_now(self, completed: int) -> tuple[int | None, tuple[float, ...], int | None]:
        """(best trial id, its values, Pareto front size), cached per completed count."""
        if completed == self._best_key:
            return self._best
        db = self.reader.db
        best_id, values, front = None, (), None
        if len(self.directions) == 1:
            order = "asc" if self.directions[0] == "minimize" else "desc"
            row = db.execute("select id, objective_values from trials where state = ? and "
                             "objective_values is not null order by "
                             f"json_extract(objective_values, '$[0]') {order}, id limit 1",
                             (COMPLETED,)).fetchone()
            if row:
                best_id, values = row[0], tuple(json.loads(row[1]))
        else:
            points = [_signed(json.loads(text), self.directions) for (text,) in db.execute(
                "select objective_values from trials where state = ? and objective_values "
                "is not null", (COMPLETED,)).fetchall()]
            front = pareto_size(points)
        self._best_key, self._best = completed, (best_id, values, front)
        return self._best

    def learn_on_slurm(self) -> bool:
        """Whether the trials run as Slurm jobs: as the stored spec says, or once a trial has
        a job id (`submit --executor slurm` overrode the spec)."""
        if not self.on_slurm and self.reader.db.execute(
                "select 1 from trials where job_id is not null limit 1").fetchone():
            self.on_slurm = True
        return self.on_slurm

    # -- the snapshot ----------------------------------------------------------------------
    def snapshot(self, cluster: tuple[tuple[LeafLine, ...] | None, str | None] = (None, None),
                 rows: int | None = None) -> Snapshot:
        """The experiment now. `cluster` is (per-leaf lines, note) from a ClusterWatch."""
        now = time.time()
        self.learn_on_slurm()
        exp = self.reader.experiment()
        counts = self.reader.state_counts()
        pilots = pilot_lines(self.reader, self.exp_dir, live_only=True, now=now)
        pilot_leaf: dict[str, tuple[str, ...]] = {
            p.job_id: p.leaves for p in pilots if p.job_id and len(p.leaves) == 1}
        trials = self._shown_trials(rows or self.rows)
        ran = self._ran(trials, now)
        shown = [replace(self._line(t, pilot_leaf), duration=ran.get(t.id)) for t in trials]
        best_id, best_values, front = self._best_now(counts.get(COMPLETED, 0))
        best = None
        if best_id is not None:
            best = next((line for line in shown if line.id == best_id), None)
            if best is None:
                row = self.reader.trial(best_id)
                best = replace(self._line(row), duration=self._ran([row], now).get(best_id))
        driver = DriverLock(self.exp_dir).holder()
        running = exp.status == "running"  # or interrupted
        elapsed, work = self._clock(exp, counts, running, now)
        eta = clock.eta(elapsed, work) if work is not None and driver else None
        leaves, note = cluster
        if leaves is not None:
            on_leaf: dict[str, list[int]] = {}
            for line in shown:
                if line.state not in DONE and line.state != CANCELLED:
                    for leaf in line.leaves:
                        on_leaf.setdefault(leaf, []).append(line.id)
            leaves = tuple(LeafLine(x.leaf, x.free, x.used, x.down,
                                    tuple(on_leaf.get(x.leaf, ()))) for x in leaves)
        return Snapshot(name=exp.name, strategy=exp.strategy, executor=self.executor,
                        status=outcome.experiment_status(exp.status, driver),
                        driver_pid=driver,
                        metrics=self.metrics, directions=self.directions,
                        total=exp.trials_requested, counts=counts, elapsed=elapsed, eta=eta,
                        trials=tuple(shown), best=best, best_values=best_values,
                        front_size=front, cluster=leaves, cluster_note=note, taken=now,
                        slurm_trouble=self.reader.slurm_trouble() if running else None,
                        pilots=pilots, pilots_ended=ended_count(self.reader),
                        work=work if eta is not None else None, sites=self._site_lines(now),
                        on_slurm=self.on_slurm)

    def _clock(self, exp: ExperimentRow, counts: dict[str, int], running: bool,
               now: float) -> tuple[float, clock.Progress | None]:
        """(seconds from the first trial to the search's end or now, the work done and
        planned while the clock runs, else None): hpsearch.tui.eta says how."""
        db = self.reader.db
        first, last_end = db.execute("select min(created), max(finished) from trials"
                                     ).fetchone()
        done = sum(counts.get(s, 0) for s in DONE)
        end = clock.end_of_search(running, sum(counts.get(s, 0) for s in IN_FLIGHT), done,
                                  exp.trials_requested, last_end, exp.updated)
        elapsed = max(0.0, (now if end is None else end) - (first or exp.created))
        if end is not None:
            return elapsed, None
        if self._promotion is None:
            return elapsed, clock.Progress("trials", done, exp.trials_requested)
        return elapsed, self._promotion.progress(exp.trials_requested)


class ClusterWatch:
    """Per-leaf node counts from sinfo and the topology, asked in a background thread at most
    every `every` seconds (slurmctld is shared, and a slow answer must not freeze the view).
    Errors become a note, not a crash."""

    def __init__(self, every: float = 30.0, slurm=None, topology_file=None) -> None:
        self.every = every
        self.slurm = slurm
        self.topology: Topology | None = None
        self.topology_file = topology_file  # where Slurm has no tree plugin
        self.last = -every
        self.busy = False
        self.value: tuple[tuple[LeafLine, ...] | None, str | None] = (None, "asking sinfo...")

    def get(self) -> tuple[tuple[LeafLine, ...] | None, str | None]:
        """The latest answer; starts a new query when the last one is `every` seconds old."""
        if not self.busy and time.monotonic() - self.last >= self.every:
            import threading
            self.busy, self.last = True, time.monotonic()
            threading.Thread(target=self._refresh, daemon=True, name="cluster-watch").start()
        return self.value

    def _refresh(self) -> None:
        try:
            self.value = self._query()
        finally:
            self.busy = False

    def _query(self) -> tuple[tuple[LeafLine, ...] | None, str | None]:
        from hpsearch.errors import HpsearchError
        from hpsearch.placement.topology import cluster_topology, leaf_states
        try:
            if self.slurm is None:
                from hpsearch.slurm.commands import Slurm
                self.slurm = Slurm(timeout=10)
            if self.topology is None:
                self.topology = cluster_topology(self.slurm, [self.topology_file])
                if self.topology is None:
                    return None, "no topology plugin: no leaf switches to show"
            states = leaf_states(self.topology, self.slurm.sinfo_nodes())
        except HpsearchError as exc:
            return None, f"cluster state unavailable: {str(exc).splitlines()[0][:120]}"
        return tuple(LeafLine(s.leaf, len(s.free), len(s.allocated) + len(s.mixed),
                              len(s.down) + len(s.drained), ()) for s in states.values()), None


def _on_slurm(executor_type: str) -> bool:
    """Whether the executor the spec names runs trials on Slurm (its registry entry says);
    a name this hpsearch does not know (a plugin not installed here) is taken as not."""
    from hpsearch.executors.registry import EXECUTORS
    return executor_type in EXECUTORS and EXECUTORS.get(executor_type).facts.on_slurm

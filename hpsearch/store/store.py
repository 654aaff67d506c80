"""The experiment's SQLite store. Only the driver writes (Store); everyone else reads (Reader,
hpsearch.store.reader, whose queries a Store inherits).

The journal mode follows the filesystem (hpsearch.store.filesystem): on a local one WAL lets readers
query while the driver writes, and neither blocks the other; on a shared one (NFS, Lustre,
GPFS, BeeGFS, ..., or HPSEARCH_STORAGE=network) WAL is wrong across hosts (its -shm index is
per-host shared memory), so the store uses a rollback journal (journal_mode=DELETE): readers
on any host see committed data. There a reader's SHARED lock would keep the driver from
committing, so a Reader takes none (hpsearch.store.lock_free), and the driver retries a
commit that another process's lock holds up, for as long as it takes (Store.batch). The driver
switches an existing store to the mode its filesystem needs when it opens it (it holds the
driver lock then). Each method that changes state commits before it returns, so the driver
acts only on what is already durable (write-ahead).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from hpsearch.store import filesystem
from hpsearch.store.lib import sqlite_utils
from hpsearch.store.reader import Reader
from hpsearch.store.rows import (
    FAILED,
    PILOT_SUBMITTING,
    QUEUED,
    RUNNING,
    SUBMITTING,
    CheckpointRow,
)
from hpsearch.store.schema import migrate


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, allow_nan=True)


def _switch_journal_mode(conn: sqlite3.Connection, wanted: str, wait: float = 5.0) -> str:
    """Put the store in journal mode `wanted`; returns the mode it is in. Leaving WAL needs a
    moment when no other connection has the file open: tried for `wait` seconds."""
    conn.execute(f"PRAGMA busy_timeout={int(wait * 1000)}")
    try:
        return conn.execute(f"PRAGMA journal_mode={wanted}").fetchone()[0]
    except sqlite3.OperationalError:  # "database is locked": a reader has it open
        return conn.execute("PRAGMA journal_mode").fetchone()[0]
    finally:
        conn.execute(f"PRAGMA busy_timeout={int(busy_timeout() * 1000)}")


BUSY_TIMEOUT = 30.0  # seconds SQLite waits for another process's lock, per try
BUSY_BACKOFF = (0.1, 0.5, 2.0, 5.0)  # seconds between tries, the last repeated


def busy_timeout() -> float:
    """BUSY_TIMEOUT, or HPSEARCH_STORE_BUSY_TIMEOUT (seconds; tests make it short)."""
    try:
        return max(0.0, float(os.environ.get("HPSEARCH_STORE_BUSY_TIMEOUT") or BUSY_TIMEOUT))
    except ValueError:
        return BUSY_TIMEOUT


def _busy(exc: sqlite3.OperationalError) -> bool:
    """"database is locked": another process holds a lock this one needs (the message
    where Python has no sqlite_errorname, before 3.11)."""
    return getattr(exc, "sqlite_errorname", "").startswith("SQLITE_BUSY") \
        or str(exc) == "database is locked"


class Store(Reader):
    """The driver's read-write handle."""

    _writer = True

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._depth = 0  # nesting of batch()
        self._end_time: float | None = None  # ending_at()
        self.filesystem = filesystem.detect(self.path.parent)
        existed = self.path.exists() and self.path.stat().st_size > 0
        conn = sqlite3.connect(str(self.path), timeout=busy_timeout(), isolation_level=None,
                               check_same_thread=False)
        before = conn.execute("PRAGMA journal_mode").fetchone()[0]
        self.journal_mode = _switch_journal_mode(conn, self.filesystem.journal_mode)
        # NORMAL is durable across process crashes in WAL; a rollback journal needs FULL
        conn.execute("PRAGMA synchronous=" + ("NORMAL" if self.journal_mode == "wal" else "FULL"))
        self.db = sqlite_utils.Database(conn)
        migrate(self.db)
        if existed and self.journal_mode != before:
            self.add_event("storage", f"journal_mode {before} -> {self.journal_mode}: "
                                      f"{self.filesystem.describe()}")
        elif self.journal_mode != self.filesystem.journal_mode:
            self.add_event("warning", f"the store stays in journal_mode={self.journal_mode}: "
                                      "another process had it open while the driver tried to "
                                      f"switch it ({self.filesystem.describe()}); it is "
                                      "switched when the store is next opened alone")

    @contextlib.contextmanager
    def batch(self):
        """Group several writes into one transaction (one commit). Nested writes join it."""
        conn, waits = self.db.conn, []
        if self._depth == 0:
            waits.append(self._patiently("BEGIN IMMEDIATE"))
        self._depth += 1
        try:
            yield
        except BaseException:
            self._depth -= 1
            if self._depth == 0:
                conn.execute("ROLLBACK")
            raise
        self._depth -= 1
        if self._depth == 0:
            waits.append(self._patiently("COMMIT"))
            for wait in filter(None, waits):
                self.add_event("storage", wait)

    def _patiently(self, statement: str) -> str | None:
        """BEGIN IMMEDIATE or COMMIT, tried again for as long as another process's lock
        keeps it from going through ("database is locked" after the busy timeout; SQLite
        leaves the transaction open, so its COMMIT can be tried again). In rollback-journal
        mode any process that may read the store can hold the SHARED lock that a COMMIT
        waits for: a reader stopped mid-query, a slow one, or a `sqlite3` shell left in a
        transaction. The driver waits, saying so on stderr, rather than exit. Returns, if it
        had to wait, what the event recorded after the commit says."""
        began, tries = time.monotonic(), 0
        while True:
            try:
                self.db.conn.execute(statement)
                break
            except sqlite3.OperationalError as exc:
                if not _busy(exc):
                    raise
            tries += 1
            print(f"hpsearch: {self.path}: {statement} waited "
                  f"{time.monotonic() - began:.1f} s for another process's lock on the store "
                  "(a reader holding it); trying again", file=sys.stderr, flush=True)
            time.sleep(BUSY_BACKOFF[min(tries, len(BUSY_BACKOFF)) - 1])
        if not tries:
            return None
        return (f"{statement} waited {time.monotonic() - began:.1f} s ({tries} busy timeouts) "
                f"for another process's lock on {self.path.name}: a reader holding it (a "
                "stopped or slow process, or a sqlite3 shell in a transaction); hpsearch's "
                "own readers take none")

    @contextlib.contextmanager
    def ending_at(self, when: float | None):
        """finish_attempt() inside records `when` (if not None) as the attempt's end: the time
        the trial really ended (its exit_code file), not the time the driver saw it, which
        for an attempt that ended while no driver ran is when a driver came back. With None,
        the time it is entered: what is measured inside (a trial's cost, end_time()) and the
        end recorded agree."""
        self._end_time = time.time() if when is None else min(when, time.time())
        try:
            yield
        finally:
            self._end_time = None

    def end_time(self) -> float:
        """The end finish_attempt() records if called now: ending_at's time, else now."""
        return time.time() if self._end_time is None else self._end_time

    def _write(self, sql: str, args: Iterable[Any] = ()) -> None:
        self._write_many([(sql, args)])

    def _write_many(self, statements: Sequence[tuple[str, Iterable[Any]]]) -> None:
        with self.batch():
            for sql, args in statements:
                self.db.conn.execute(sql, tuple(args))

    # -- experiment ------------------------------------------------------------------------
    @classmethod
    def create(cls, path: str | Path, **experiment: Any) -> Store:
        """Create the store with its experiment row, atomically: it is built under a temporary
        name and renamed into place, so a store file always holds its experiment."""
        path = Path(path)
        tmp = path.with_name(path.name + ".creating")
        for leftover in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm"), Path(f"{tmp}-journal")):
            leftover.unlink(missing_ok=True)  # from a submit killed mid-way (we hold the lock)
        store = cls(tmp)
        store.create_experiment(**experiment)
        store.add_event("storage", store.filesystem.describe())
        store.db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        store.close()
        os.replace(tmp, path)
        return cls(path)

    def create_experiment(self, name: str, spec_yaml: str, spec_file: str, base_dir: str,
                          strategy: str, directions: list[str], trials_requested: int) -> None:
        now = time.time()
        self._write_many([
            ("insert into experiment (name, spec_yaml, spec_file, base_dir, strategy, directions,"
             " trials_requested, status, created, updated, study_attrs)"
             " values (?,?,?,?,?,?,?,?,?,?,?)",
             (name, spec_yaml, spec_file, base_dir, strategy, _dumps(directions),
              trials_requested, "running", now, now, "{}")),
            ("insert into events (time, trial, kind, message) values (?,?,?,?)",
             (now, None, "created", f"experiment {name}: {strategy}, {trials_requested} trials")),
        ])

    def set_experiment_status(self, status: str, message: str | None = None) -> None:
        now = time.time()
        statements: list[tuple[str, tuple[Any, ...]]] = [
            ("update experiment set status = ?, updated = ?", (status, now))]
        if message:
            statements.append(("insert into events (time, trial, kind, message) values (?,?,?,?)",
                               (now, None, status, message)))
        self._write_many(statements)

    def set_trials_requested(self, total: int, message: str) -> None:
        """The search runs `total` trials in all (resume --trials, enqueue beyond it)."""
        self._write_many([
            ("update experiment set trials_requested = ?, updated = ?", (total, time.time())),
            ("insert into events (time, trial, kind, message) values (?,?,?,?)",
             (time.time(), None, "extended", message))])

    def replace_spec(self, spec_yaml: str, spec_file: str, base_dir: str, message: str) -> None:
        """The experiment goes on with a fixed spec (resume --spec), and the events say what
        changed."""
        now = time.time()
        self._write_many([
            ("update experiment set spec_yaml = ?, spec_file = ?, base_dir = ?, updated = ?",
             (spec_yaml, spec_file, base_dir, now)),
            ("insert into events (time, trial, kind, message) values (?,?,?,?)",
             (now, None, "spec_replaced", message))])

    def requeue_failed(self, trial_ids: list[int], message: str) -> None:
        """Failed trials that go back to `queued` for a new attempt (resume --spec: those
        whose command never started, now fixed), with one event."""
        self._write_many([
            *[("update trials set state = ?, error = null, exit_code = null, finished = null"
               " where id = ? and state = ?", (QUEUED, tid, FAILED)) for tid in trial_ids],
            ("insert into events (time, trial, kind, message) values (?,?,?,?)",
             (time.time(), None, "requeued", message))])

    # -- trials ----------------------------------------------------------------------------
    def insert_trial(self, trial_id: int, params: dict, trial_dir: str,
                     sampler_attrs: dict, study_attrs: dict | None = None,
                     overrides: str | None = None) -> None:
        """Record a new trial as `submitting`, attempt 1: committed before it is launched.
        `overrides`: what its first attempt asks that the spec does not (scouts)."""
        now = time.time()
        statements = [
            ("insert into trials (id, state, params, attempt, created, trial_dir, sampler_attrs)"
             " values (?,?,?,?,?,?,?)",
             (trial_id, SUBMITTING, json.dumps(params, allow_nan=True),  # spec order
              1, now, trial_dir, _dumps(sampler_attrs))),
            ("insert into attempts (trial, attempt, state, overrides) values (?,?,?,?)",
             (trial_id, 1, SUBMITTING, overrides)),
        ]
        if study_attrs is not None:
            text = _dumps(study_attrs)
            if text != getattr(self, "_study_attrs_written", None):
                statements.append(("update experiment set study_attrs = ?", (text,)))
                self._study_attrs_written = text
        self._write_many(statements)

    def begin_attempt(self, trial_id: int, attempt: int, reason: str,
                      overrides: str | None = None) -> None:
        """A queued or interrupted trial starts attempt `attempt` (write-ahead of launching).
        `overrides`: what the retry rules changed for it (--exclude, --mem, time)."""
        self._write_many([
            ("update trials set state = ?, attempt = ?, pid = null, pid_start = null,"
             " exit_code = null, error = null, started = null, finished = null where id = ?",
             (SUBMITTING, attempt, trial_id)),
            ("insert or replace into attempts (trial, attempt, state, reason, overrides)"
             " values (?,?,?,?,?)", (trial_id, attempt, SUBMITTING, reason, overrides)),
            ("insert into events (time, trial, kind, message) values (?,?,?,?)",
             (time.time(), trial_id, "attempt", f"attempt {attempt}: {reason}")),
        ])

    def withdraw(self, trial_ids: list[int]) -> None:
        """Attempts stored but never started (they waited for a slot when the driver
        stopped): their trials wait, `queued`, and the attempt stays `submitting`, so a
        resumed driver launches that same attempt."""
        if trial_ids:
            self._write_many([("update trials set state = ? where id = ?", (QUEUED, tid))
                              for tid in trial_ids])

    def mark_running(self, trial_id: int, attempt: int, host: str, pid: int | None,
                     pid_start: int | None, gpus: str | None, job_id: str | None = None,
                     at: float | None = None, site: str | None = None) -> None:
        """The attempt runs, since `at` (default: now), at `site` (executor.sites; None:
        the trial's site so far, as for the next run of a job Slurm requeued)."""
        now = time.time() if at is None else at
        self._write_many([
            ("update trials set state = ?, started = ?, host = ?, pid = ?, pid_start = ?,"
             " gpus = ?, job_id = ?, site = coalesce(?, site) where id = ?",
             (RUNNING, now, host, pid, pid_start, gpus, job_id, site, trial_id)),
            ("update attempts set state = ?, started = ?, host = ?, pid = ?, job_id = ?,"
             " site = (select site from trials where id = ?) where trial = ? and attempt = ?",
             (RUNNING, now, host, pid, job_id, trial_id, trial_id, attempt)),
        ])

    def bind_attempt(self, trial_id: int, attempt: int, job_id: str) -> None:
        """Write-ahead for a pilot: the attempt (still `submitting`) goes to the pilot whose
        job is `job_id`, before its assignment file is written."""
        self._write_many([
            ("update trials set job_id = ? where id = ? and attempt = ?",
             (job_id, trial_id, attempt)),
            ("update attempts set job_id = ? where trial = ? and attempt = ?",
             (job_id, trial_id, attempt)),
        ])

    def update_placement(self, trial_id: int, attempt: int, sched_state: str | None,
                         pending_reason: str | None, nodes: str | None,
                         leaves: str | None = None) -> None:
        """What the scheduler says of a submitted attempt: state, pending reason, nodes, and
        the leaf switches of those nodes. The first time it runs, its queue wait (since the
        attempt's start: its submit)."""
        ran = sched_state in ("RUNNING", "COMPLETING")
        self._write_many([
            ("update trials set sched_state = ?, pending_reason = ?, nodes = ?, leaves = ?,"
             " host = coalesce(?, host) where id = ? and attempt = ?",
             (sched_state, pending_reason, nodes, leaves, nodes, trial_id, attempt)),
            ("update attempts set nodes = ?, leaves = ?, host = coalesce(?, host), queue_wait"
             " = coalesce(queue_wait, case when ? then max(0, ? - started) end)"
             " where trial = ? and attempt = ?",
             (nodes, leaves, nodes, ran, time.time(), trial_id, attempt)),
        ])

    def finish_attempt(self, trial_id: int, attempt: int, state: str, exit_code: int | None,
                       error: str | None, values: list[float] | None = None,
                       requeue: bool = False, sampler_attrs: dict | None = None,
                       failure: str | None = None) -> None:
        """Record how an attempt ended (`failure`: its class, hpsearch.driver.retry). With
        requeue the trial goes back to `queued`."""
        now = self.end_time()
        trial_state = QUEUED if requeue else state
        # never before it was seen started (a fast trial can exit before that is recorded)
        statements = [
            ("update attempts set state = ?, finished = max(?, coalesce(started, 0)),"
             " exit_code = ?, reason = ?, failure = ? where trial = ? and attempt = ?",
             (state, now, exit_code, error, failure, trial_id, attempt)),
            ("update trials set state = ?, finished = max(?, coalesce(started, 0)),"
             " exit_code = ?, error = ?, objective_values = ? where id = ?",
             (trial_state, None if requeue else now, exit_code, error,
              _dumps(values) if values is not None else None, trial_id)),
            ("insert into events (time, trial, kind, message) values (?,?,?,?)",
             (now, trial_id, "requeued" if requeue else state,
              f"attempt {attempt} {state}" + (f": {error}" if error else ""))),
        ]
        if sampler_attrs is not None:
            statements.append(("update trials set sampler_attrs = ? where id = ?",
                               (_dumps(sampler_attrs), trial_id)))
        self._write_many(statements)

    def set_peak_memory(self, trial_id: int, attempt: int, mib: float) -> None:
        """An attempt's peak resident memory (Ended.peak_rss_mb), with its end's commit."""
        self._write("update attempts set max_rss_mb = ? where trial = ? and attempt = ?",
                    (mib, trial_id, attempt))

    def set_startup(self, trial_id: int, attempt: int, first_call: float) -> bool:
        """Store an attempt's start-up (hpsearch.ingest.first_call): the seconds from its
        recorded start to `first_call` (never below 0). False while its start is not
        recorded yet (nothing is stored: call it again later)."""
        row = self.db.execute("select started from attempts where trial = ? and attempt = ?",
                              (trial_id, attempt)).fetchone()
        started = row[0] if row else None
        if started is None:
            return False
        self._write("update attempts set startup_s = ? where trial = ? and attempt = ?",
                    (max(0.0, first_call - started), trial_id, attempt))
        return True

    def set_params(self, trial_id: int, params: dict) -> None:
        """A trial's parameters from its next attempt on (pbt explores them between
        segments; the schedule is in its pruner attrs)."""
        self._write("update trials set params = ? where id = ?",
                    (json.dumps(params, allow_nan=True), trial_id))

    def set_pruner_attrs(self, trial_id: int, attrs: dict) -> None:
        self._write("update trials set pruner_attrs = ? where id = ?", (_dumps(attrs), trial_id))

    def set_overrides(self, trial_id: int, attempt: int, overrides: str) -> None:
        """What an attempt asks that the spec does not, set after it was begun (the scouts'
        sizing of a promotion segment, known once its step budget is)."""
        self._write("update attempts set overrides = ? where trial = ? and attempt = ?",
                    (overrides, trial_id, attempt))

    def set_segment(self, trial_id: int, attempt: int, rung: int, budget: int) -> None:
        """Promotion mode: the rung and step budget of an attempt (a segment)."""
        self._write("update attempts set rung = ?, budget = ? where trial = ? and attempt = ?",
                    (rung, budget, trial_id, attempt))

    def request_stop(self, trial_id: int, request: dict, message: str) -> None:
        """Write-ahead of stopping a trial early: the decision (step, value, pruner, time)
        is committed before the trial is told."""
        self._write_many([
            ("update trials set stop_request = ? where id = ?", (_dumps(request), trial_id)),
            ("insert into events (time, trial, kind, message) values (?,?,?,?)",
             (request["time"], trial_id, "prune", message)),
        ])

    def add_metrics(self, trial_id: int, attempt: int, records: list[dict]) -> None:
        """Upsert metric records ({'step': n, 'time': t, name: value, ...}) of one trial."""
        rows = []
        for rec in records:
            step, when = rec["step"], rec.get("time")
            for name, value in rec.items():
                if name not in ("step", "time"):
                    rows.append((trial_id, step, name, value, attempt, when))
        if not rows:
            return
        with self.batch():
            self.db.conn.executemany("insert or replace into metrics (trial, step, name, value,"
                                     " attempt, time) values (?,?,?,?,?,?)", rows)

    def add_output(self, trial_id: int, attempt: int, records: list[dict], warnings: list[str],
                   reads: dict[str, dict | None]) -> None:
        """What one read of a trial's output gave, in one commit: its metric records, its
        warnings (as events), and where each reader stopped (reads: source -> state; None:
        unchanged). A driver killed at any instant resumes reading where the store says,
        with no record lost or warned twice."""
        reads = {source: state for source, state in reads.items() if state is not None}
        if not (records or warnings or reads):
            return
        with self.batch():
            self.add_metrics(trial_id, attempt, records)
            now = time.time()
            self.db.conn.executemany(
                "insert into events (time, trial, kind, message) values (?,?,?,?)",
                [(now, trial_id, "warning", message) for message in warnings])
            self.db.conn.executemany(
                "insert or replace into trial_reads (trial, source, state) values (?,?,?)",
                [(trial_id, source, _dumps(state)) for source, state in reads.items()])

    def add_gpu_use(self, trial_id: int, tallies: list) -> None:
        """Add what new GPU samples came to (hpsearch.ingest.gpu_samples.GpuTally, per
        attempt and node) to the trial's totals. Call it inside the batch() that stores
        where reading stopped, so no sample is added twice."""
        rows = [(trial_id, t.attempt, t.node, t.gpus, t.samples, t.gpu_samples, t.util_sum,
                 t.busy_gpu_seconds, t.mem_max_mib, t.first, t.last) for t in tallies]
        if not rows:
            return
        with self.batch():
            self.db.conn.executemany(
                "insert into gpu_use (trial, attempt, node, gpus, samples, gpu_samples,"
                " util_sum, busy_gpu_seconds, mem_max_mib, first, last)"
                " values (?,?,?,?,?,?,?,?,?,?,?) on conflict (trial, attempt, node) do update"
                " set gpus = max(gpus, excluded.gpus), samples = samples + excluded.samples,"
                " gpu_samples = gpu_samples + excluded.gpu_samples,"
                " util_sum = util_sum + excluded.util_sum,"
                " busy_gpu_seconds = busy_gpu_seconds + excluded.busy_gpu_seconds,"
                " mem_max_mib = max(mem_max_mib, excluded.mem_max_mib),"
                " first = min(first, excluded.first), last = max(last, excluded.last)", rows)

    def add_rank_timing(self, trial_id: int, tallies: list) -> None:
        """Add what new timing lines came to (hpsearch.ingest.timing_lines.RankTally, per
        attempt and rank) to the trial's sums. Call it inside the batch() that stores where
        reading stopped, so no line is added twice."""
        rows = [(trial_id, t.attempt, t.rank, t.steps, t.step_s, t.compute_s, t.items,
                 t.item_steps, t.first, t.last) for t in tallies]
        if not rows:
            return
        with self.batch():
            self.db.conn.executemany(
                "insert into rank_timing (trial, attempt, rank, steps, step_s, compute_s,"
                " items, item_steps, first, last) values (?,?,?,?,?,?,?,?,?,?)"
                " on conflict (trial, attempt, rank) do update"
                " set steps = steps + excluded.steps, step_s = step_s + excluded.step_s,"
                " compute_s = compute_s + excluded.compute_s, items = items + excluded.items,"
                " item_steps = item_steps + excluded.item_steps,"
                " first = min(first, excluded.first), last = max(last, excluded.last)", rows)

    # -- pilots ----------------------------------------------------------------------------
    def add_pilot(self, pilot_id: int, job_name: str, site: str | None = None,
                  slot_mem_mb: int | None = None) -> None:
        """Write-ahead: the pilot exists before its sbatch runs (at `site`, where the search
        has sites; with `slot_mem_mb` a slot where the scouts cut it smaller)."""
        self._write("insert into pilots (id, job_name, state, submitted, site, slot_mem_mb) "
                    "values (?, ?, ?, ?, ?, ?)",
                    (pilot_id, job_name, PILOT_SUBMITTING, time.time(), site, slot_mem_mb))

    def update_pilot(self, pilot_id: int, **fields: Any) -> None:
        """Set some of a pilot's columns (job_id, state, nodes, leaves, started, ended,
        reason)."""
        allowed = {"job_id", "state", "nodes", "leaves", "started", "ended", "reason"}
        if not fields or set(fields) - allowed:
            raise ValueError(f"update_pilot: columns {sorted(fields)}; expected some of "
                             f"{sorted(allowed)}")
        names = sorted(fields)
        self._write(f"update pilots set {', '.join(f'{n} = ?' for n in names)} where id = ?",
                    [fields[n] for n in names] + [pilot_id])

    def add_event(self, kind: str, message: str, trial_id: int | None = None) -> None:
        self._write("insert into events (time, trial, kind, message) values (?,?,?,?)",
                    (time.time(), trial_id, kind, message))

    # -- checkpoints -----------------------------------------------------------------------
    def add_checkpoints(self, trial_id: int, attempt: int, found: list[dict]) -> None:
        """Register checkpoints ({'step', 'path', 'bytes', 'time'}) saved by `attempt`. One
        seen again unchanged keeps its row (and the attempt that saved it); one rewritten
        (new step or size) is registered anew."""
        with self.batch():
            self.db.conn.executemany(
                "insert into checkpoints (trial, step, path, bytes, time, attempt)"
                " values (?,?,?,?,?,?) on conflict (trial, path) do update set"
                " step = excluded.step, bytes = excluded.bytes, time = excluded.time,"
                " attempt = excluded.attempt, deleted = null,"
                " metric = case when checkpoints.step = excluded.step then checkpoints.metric end"
                " where checkpoints.step != excluded.step or checkpoints.bytes is not"
                " excluded.bytes or checkpoints.deleted is not null",  # else: seen before
                [(trial_id, c["step"], c["path"], c["bytes"], c["time"], attempt)
                 for c in found])

    def fill_checkpoint_metrics(self, trial_id: int, metric: str, exact: bool) -> None:
        """Give the trial's checkpoints that lack one the objective metric at their step;
        with exact=False (the trial has ended) the last value reported before it."""
        self._write(
            "update checkpoints set metric = (select value from metrics m where m.trial ="
            " checkpoints.trial and m.name = ? and m.step " + ("=" if exact else "<=") +
            " checkpoints.step order by m.step desc limit 1) where trial = ? and metric is null",
            (metric, trial_id))

    def set_aside_checkpoints(self, trial_id: int, renamed: dict[str, str], kept: str,
                              step: int) -> None:
        """A pbt exploit: the trial's own checkpoints were renamed aside (old path -> new),
        to be removed, and `kept` now holds another trial's checkpoint of `step`. The rows
        follow the files, so the checkpoint policy never deletes a path a later attempt
        saves again; none of them counts as saved by an attempt of this trial (attempt
        null: a later attempt that starts below them did resume, from `kept`)."""
        now = time.time()
        self._write_many(
            [("update or replace checkpoints set path = ?, attempt = null,"
              " deleted = coalesce(deleted, ?) where trial = ? and path = ?",
              (new, now, trial_id, old)) for old, new in renamed.items()]
            + [("update checkpoints set step = ?, attempt = null, deleted = null,"
                " metric = null where trial = ? and path = ?", (step, trial_id, kept))])

    def mark_checkpoints_deleted(self, doomed: list[CheckpointRow]) -> None:
        """Write-ahead of deleting the files: a checkpoint marked here is gone for good."""
        now = time.time()
        with self.batch():
            self.db.conn.executemany(
                "update checkpoints set deleted = ? where trial = ? and path = ?",
                [(now, c.trial, c.path) for c in doomed])

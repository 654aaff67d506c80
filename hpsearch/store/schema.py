"""The store's schema, as a list of migrations. PRAGMA user_version is the applied count.

Append a function to MIGRATIONS to change the schema; never edit one that has shipped.
"""

from __future__ import annotations

from typing import Literal

from hpsearch.faults import fault_point
from hpsearch.store.lib import sqlite_utils


def _v1(db: sqlite_utils.Database) -> None:
    db["experiment"].create({
        "name": str, "spec_yaml": str, "spec_file": str, "base_dir": str, "strategy": str,
        "directions": str, "trials_requested": int, "status": str, "created": float,
        "updated": float, "study_attrs": str,
    }, pk="name")
    db["trials"].create({
        "id": int, "state": str, "params": str, "objective_values": str, "attempt": int,
        "created": float, "started": float, "finished": float, "host": str, "pid": int,
        "pid_start": int, "gpus": str, "exit_code": int, "error": str, "trial_dir": str,
        "job_id": str, "sampler_attrs": str,
    }, pk="id", not_null={"state", "params", "attempt", "created", "trial_dir"})
    db["trials"].create_index(["state"])
    db["attempts"].create({
        "trial": int, "attempt": int, "state": str, "started": float, "finished": float,
        "host": str, "pid": int, "job_id": str, "exit_code": int, "reason": str,
    }, pk=("trial", "attempt"))
    db["metrics"].create({
        "trial": int, "step": int, "name": str, "value": float, "attempt": int, "time": float,
    }, pk=("trial", "step", "name"))
    db["checkpoints"].create({
        "trial": int, "step": int, "path": str, "bytes": int, "time": float,
    }, pk=("trial", "path"))
    db["events"].create({
        "id": int, "time": float, "trial": int, "kind": str, "message": str,
    }, pk="id")
    db["events"].create_index(["trial"])


def _v2(db: sqlite_utils.Database) -> None:
    """Where and how a trial waits or runs on a cluster: the scheduler's state, its pending
    reason, and the nodes of the current attempt (also kept per attempt)."""
    for column in ("sched_state", "pending_reason", "nodes"):
        db["trials"].add_column(column, str)
    db["attempts"].add_column("nodes", str)


def _v3(db: sqlite_utils.Database) -> None:
    """The leaf switches a trial's nodes sit under (comma-separated, from the topology)."""
    db["trials"].add_column("leaves", str)
    db["attempts"].add_column("leaves", str)


def _v4(db: sqlite_utils.Database) -> None:
    """Checkpoint tracking: the attempt that saved each checkpoint, the objective metric at
    its step, and when the policy deleted it (rows stay, so `checkpoints --all` and the
    retry rules see the history). Each attempt's failure class and its retry overrides."""
    db["checkpoints"].add_column("attempt", int)
    db["checkpoints"].add_column("metric", float)
    db["checkpoints"].add_column("deleted", float)
    db["attempts"].add_column("failure", str)
    db["attempts"].add_column("overrides", str)


def _v5(db: sqlite_utils.Database) -> None:
    """Where the driver stopped reading each trial's output files (hpsearch.ingest.lines cursors,
    as JSON per reader: 'files' for the report files, 'manifest' for checkpoints.jsonl),
    stored in the same commit as what they produced, so a resumed driver reads on."""
    db["trial_reads"].create({"trial": int, "source": str, "state": str},
                             pk=("trial", "source"))


def _v6(db: sqlite_utils.Database) -> None:
    """Pilot jobs (hpsearch.pilot.executor): each pilot is written `submitting` before its
    sbatch, and its job id right after (write-ahead), so a resumed driver re-attaches to it."""
    db["pilots"].create({
        "id": int, "job_name": str, "job_id": str, "state": str, "nodes": str, "leaves": str,
        "submitted": float, "started": float, "ended": float, "reason": str,
    }, pk="id", not_null={"job_name", "state", "submitted"})


def _v7(db: sqlite_utils.Database) -> None:
    """Early stopping (hpsearch.pruning): what the pruner keeps of each trial (Optuna system
    attrs, e.g. the rungs it passed), and a decision to stop a trial, written before the trial
    is told (write-ahead), with the step and value it was judged at. In promotion mode each
    attempt is a segment: the rung it runs to and its step budget."""
    db["trials"].add_column("pruner_attrs", str)
    db["trials"].add_column("stop_request", str)
    db["attempts"].add_column("rung", int)
    db["attempts"].add_column("budget", int)


def _v8(db: sqlite_utils.Database) -> None:
    """GPU use measured by the samplers (hpsearch.gpu, hpsearch.ingest.gpu_samples): per
    attempt and node of a trial, what its samples add up to."""
    db["gpu_use"].create({
        "trial": int, "attempt": int, "node": int, "gpus": int, "samples": int,
        "gpu_samples": int, "util_sum": float, "busy_gpu_seconds": float,
        "mem_max_mib": float, "first": float, "last": float,
    }, pk=("trial", "attempt", "node"))


def _v9(db: sqlite_utils.Database) -> None:
    """Per-rank step timing (hpsearch.trial.report_timing, hpsearch.ingest.timing_lines): per
    attempt and rank of a trial, the steps timed and the sums of their step and compute
    seconds (and items processed), from which parallel efficiency is derived
    (hpsearch.accounting.efficiency)."""
    db["rank_timing"].create({
        "trial": int, "attempt": int, "rank": int, "steps": int, "step_s": float,
        "compute_s": float, "items": float, "item_steps": int, "first": float, "last": float,
    }, pk=("trial", "attempt", "rank"))


def _v10(db: sqlite_utils.Database) -> None:
    """Each attempt's start-up (hpsearch.ingest.first_call): the seconds from its recorded
    start to its code's first call of hpsearch.trial; null where the trial never called it
    (or the attempt ran before this column), so nothing is left out of its cost."""
    db["attempts"].add_column("startup_s", float)


def _v11(db: sqlite_utils.Database) -> None:
    """The site (executor.sites: a partition or cluster, docs/brokerage.md) each attempt was
    sent to, and the current one's on the trial; null without sites. And each Slurm job's
    queue wait: seconds from its submit (the attempt's start) to the first poll that saw it
    run (status's sites table, the broker's measure)."""
    db["trials"].add_column("site", str)
    db["attempts"].add_column("site", str)
    db["attempts"].add_column("queue_wait", float)


def _v12(db: sqlite_utils.Database) -> None:
    """The site each pilot job was sent to (executor.sites with executor.pilots): a resumed
    driver asks that site's cluster about it; null without sites."""
    db["pilots"].add_column("site", str)


def _v13(db: sqlite_utils.Database) -> None:
    """Each attempt's peak memory, in MiB, where its executor reaped its process (the local
    executor, a pilot's trials on its own node: hpsearch.executors.base.Ended.peak_rss_mb);
    the scouts size memory in pilots from it. Null where not known (sacct has Slurm jobs').
    And each pilot's memory per slot where the scouts cut it smaller than the trials'
    ceiling (hpsearch.pilot.executor); null: the ceiling."""
    db["attempts"].add_column("max_rss_mb", float)
    db["pilots"].add_column("slot_mem_mb", int)


MIGRATIONS = [_v1, _v2, _v3, _v4, _v5, _v6, _v7, _v8, _v9, _v10, _v11, _v12, _v13]
SCHEMA_VERSION = len(MIGRATIONS)


def migrate(db: sqlite_utils.Database) -> int:
    """Bring the store to SCHEMA_VERSION in ONE transaction: every pending migration and the
    PRAGMA user_version bump commit together or not at all, so a process killed mid-way
    leaves the old schema (and its version) as it was, and the next open migrates again.
    `db.conn` must be in autocommit mode (isolation_level=None), as the Store opens it.
    Returns the version."""
    version = _version(db)
    if version > SCHEMA_VERSION:
        raise RuntimeError(f"store schema version {version} is newer than this hpsearch "
                           f"understands ({SCHEMA_VERSION}); upgrade hpsearch")
    if version == SCHEMA_VERSION:
        return version
    conn = db.conn
    conn.execute("BEGIN IMMEDIATE")  # the write lock first, then read what is applied
    try:
        db.conn = _NoCommit(conn)
        for number in range(_version(db), SCHEMA_VERSION):
            MIGRATIONS[number](db)
            if not conn.in_transaction:
                raise RuntimeError(f"store migration {number + 1} committed on its own; "
                                   "migrations must not end the transaction")
            fault_point("mid_migration")
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    finally:
        db.conn = conn
    conn.execute("COMMIT")
    return SCHEMA_VERSION


def _version(db: sqlite_utils.Database) -> int:
    return db.execute("PRAGMA user_version").fetchone()[0]


class _NoCommit:
    """The store's connection as migrations see it. sqlite-utils 3.x wraps every create,
    add_column and transform in `with conn:`, which commits; here that block and commit()
    do nothing, so the migrations stay inside migrate()'s transaction (4.x uses savepoints
    inside an open transaction and needs no help). Everything else is the real connection."""

    def __init__(self, conn) -> None:
        self._conn = conn

    def __getattr__(self, name: str):
        return getattr(self._conn, name)

    def __enter__(self) -> _NoCommit:
        return self

    def __exit__(self, *exc) -> Literal[False]:
        return False  # an error propagates to migrate(), which rolls everything back

    def commit(self) -> None:
        pass

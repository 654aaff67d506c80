"""The store's schema, as a list of migrations. PRAGMA user_version is the applied count.

Append a function to MIGRATIONS to change the schema; never edit one that has shipped.
"""

from __future__ import annotations

import sqlite_utils


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


MIGRATIONS = [_v1, _v2, _v3, _v4]
SCHEMA_VERSION = len(MIGRATIONS)


def migrate(db: sqlite_utils.Database) -> int:
    """Apply every migration not yet applied, each in its own transaction. Returns version."""
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise RuntimeError(f"store schema version {version} is newer than this hpsearch "
                           f"understands ({SCHEMA_VERSION}); upgrade hpsearch")
    for number in range(version, SCHEMA_VERSION):
        with db.conn:
            MIGRATIONS[number](db)
            db.execute(f"PRAGMA user_version = {number + 1}")
    return SCHEMA_VERSION

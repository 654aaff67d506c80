"""Store migrations are one transaction: a driver SIGKILLed in the middle of migrating an old
store leaves it exactly at its old schema and version, intact; the next open migrates it."""

from __future__ import annotations

import signal
import sqlite3

import pytest
import sqlite_utils

from hpsearch.store.schema import MIGRATIONS, SCHEMA_VERSION
from tests.helpers import read_store

pytestmark = pytest.mark.slow  # a store of each schema version, migrated (12-29 s each)

SPEC = """
    name: mig
    command: "echo @hpsearch step=0 loss={x}"
    search:
      strategy: random
      trials: 3
      seed: 1
      space:
        x: {low: 0.0, high: 1.0}
    objective: {metric: loss}
    """


def _schema(con: sqlite3.Connection) -> dict[str, list[str]]:
    """Table -> its columns, in order (sqlite's own tables left out)."""
    tables = [r[0] for r in con.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
        "ORDER BY name")]
    return {t: [r[1] for r in con.execute(f"PRAGMA table_info('{t}')")] for t in tables}


def _v1_schema() -> dict[str, list[str]]:
    db = sqlite_utils.Database(memory=True)
    MIGRATIONS[0](db)
    return _schema(db.conn)


def _downgrade_to_v1(path) -> None:
    """Turn a current store into the store an hpsearch of schema version 1 wrote: drop what
    later migrations added (tables, indexes, columns), keep the data, user_version = 1."""
    v1 = _v1_schema()
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("PRAGMA journal_mode=DELETE")
    v1_indexes = {"idx_trials_state", "idx_events_trial"}
    for (index,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND "
                                "name NOT LIKE 'sqlite_%'").fetchall():
        if index not in v1_indexes:
            con.execute(f"DROP INDEX '{index}'")
    for table, columns in _schema(con).items():
        if table not in v1:
            con.execute(f"DROP TABLE '{table}'")
            continue
        for column in columns:
            if column not in v1[table]:
                con.execute(f"ALTER TABLE '{table}' DROP COLUMN '{column}'")
    con.execute("PRAGMA user_version = 1")
    con.execute("VACUUM")
    assert _schema(con) == v1
    con.close()


def _rows(con: sqlite3.Connection) -> dict[str, list[tuple]]:
    return {t: con.execute(f"SELECT {', '.join(cols)} FROM '{t}' ORDER BY rowid").fetchall()
            for t, cols in _v1_schema().items()}


@pytest.mark.parametrize("storage", ["local", "network"])
@pytest.mark.parametrize("killed_after", sorted({1, SCHEMA_VERSION - 1}))
def test_kill_mid_migration_leaves_the_old_schema_and_next_open_migrates(cli, killed_after,
                                                                         storage):
    """killed_after: how many of the pending migrations (2..SCHEMA_VERSION) had been applied
    when the driver was killed: the first only, or all of them (the version not yet bumped).
    storage: the store in WAL mode (local disk) or with a rollback journal (network FS)."""
    cli.env["HPSEARCH_STORAGE"] = storage
    # A reader waits out a hot journal at each query before it reads the last commit from a
    # snapshot: 3 s a query made `status` after the kill 85 s of the network case's 107 s
    cli.env["HPSEARCH_HOT_JOURNAL_WAIT"] = "0.2"
    cli.write_spec(SPEC)
    cli("submit", "spec.yaml", check=0)
    path = cli.runs / "mig" / "store.sqlite"
    _downgrade_to_v1(path)
    con = sqlite3.connect(path)
    before = _rows(con)
    con.close()
    assert len(before["trials"]) == 3

    crashed = cli("resume", "mig", env={"HPSEARCH_FAULT": f"mid_migration:{killed_after}"})
    assert crashed.returncode == -signal.SIGKILL, (crashed.stdout, crashed.stderr)

    # A reader first (read-only, as `status`): it must see version 1 (a rollback journal
    # left hot by the kill is rolled back), then the raw file.
    assert "3/3 finished (3 completed)" in cli("status", "mig", check=0).stdout
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert con.execute("PRAGMA user_version").fetchone()[0] == 1
    assert _schema(con) == _v1_schema()  # not one column of a later version
    assert _rows(con) == before  # an hpsearch of version 1 reads it as it wrote it
    con.close()

    resumed = cli("resume", "mig", check=0)
    assert "3 completed" in resumed.stdout
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    after = _rows(con)
    con.close()
    for table in ("trials", "attempts", "metrics", "checkpoints"):  # a resume adds events
        assert after[table] == before[table], table
    exp, trials = read_store(cli.runs, "mig")
    assert exp.status == "completed" and [t.state for t in trials] == ["completed"] * 3
    status = cli("status", "mig", check=0).stdout
    assert "3/3 finished (3 completed)" in status
    assert cli("best", "mig", check=0).stdout.startswith("1. trial 2: loss=0.000114375")


def test_a_migration_that_fails_rolls_back_every_step(tmp_path):
    """A migration raising half-way (here: its table already exists) undoes the earlier
    migrations of the same open too; the store stays at its version."""
    path = tmp_path / "store.sqlite"
    con = sqlite3.connect(path, isolation_level=None)
    db = sqlite_utils.Database(con)
    MIGRATIONS[0](db)
    con.execute("PRAGMA user_version = 1")
    con.execute("CREATE TABLE clash (x)")
    con.close()
    from hpsearch.store import schema
    con = sqlite3.connect(path, isolation_level=None)
    db = sqlite_utils.Database(con)

    def _failing(db):
        db["clash"].create({"x": int})  # raises: the table exists

    original = list(schema.MIGRATIONS)
    schema.MIGRATIONS[:] = original + [_failing]
    schema.SCHEMA_VERSION = len(schema.MIGRATIONS)
    try:
        with pytest.raises(Exception, match="already exists"):
            schema.migrate(db)
    finally:
        schema.MIGRATIONS[:] = original
        schema.SCHEMA_VERSION = len(original)
    assert not con.in_transaction
    assert con.execute("PRAGMA user_version").fetchone()[0] == 1
    assert _schema(con) == {**_v1_schema(), "clash": ["x"]}
    assert schema.migrate(db) == SCHEMA_VERSION  # and the real migrations still apply
    con.close()

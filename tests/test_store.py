"""The SQLite store: WAL, versioned schema, read-only readers that never block the driver."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest

from hpsearch.errors import NotFound, StorageError
from hpsearch.store.reader import Reader
from hpsearch.store.schema import SCHEMA_VERSION
from hpsearch.store.store import Store
from tests.helpers import read_store


def _experiment(path):
    return Store.create(path, name="e", spec_yaml="x: 1\n", spec_file="s.yaml", base_dir="/",
                        strategy="random", directions=["minimize"], trials_requested=3)


def test_store_is_wal_and_versioned(tmp_path):
    store = _experiment(tmp_path / "store.sqlite")
    assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert {"experiment", "trials", "attempts", "metrics", "checkpoints", "events"} <= set(
        store.db.table_names())
    store.close()


def test_newer_schema_is_refused_not_clobbered(tmp_path):
    path = tmp_path / "store.sqlite"
    _experiment(path).close()
    con = sqlite3.connect(path)
    con.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    con.close()
    with pytest.raises(RuntimeError, match="newer than this hpsearch understands"):
        Store(path)


def test_reader_cannot_write(tmp_path):
    path = tmp_path / "store.sqlite"
    _experiment(path).close()
    reader = Reader(path)
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        reader.db.execute("update experiment set status = 'x'")
    reader.close()


def test_readers_never_block_the_driver(cli):
    spec = cli.write_spec("""
        name: busy
        command: 'sleep 0.05; echo "@hpsearch step=0 loss={x}"; echo "@hpsearch step=1 loss={x}"'
        search:
          strategy: random
          trials: 40
          parallel: 4
          seed: 2
          space:
            x: {low: 0.0, high: 1.0}
        objective: {metric: loss}
        """)
    proc = cli.popen("submit", spec)
    store = cli.runs / "busy" / "store.sqlite"
    deadline = time.monotonic() + 30
    while not store.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    errors, snapshots, reads = [], [], [0]

    def hold_a_read_transaction():
        # An open read transaction (a TUI or a slow export) for the whole search.
        try:
            con = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
            con.execute("BEGIN")
            first = con.execute("select count(*) from trials").fetchone()[0]
            while proc.poll() is None:
                snapshots.append(con.execute("select count(*) from trials").fetchone()[0] - first)
                time.sleep(0.05)
            con.execute("COMMIT")
            con.close()
        except Exception as exc:  # noqa: BLE001 - any error fails the test below
            errors.append(repr(exc))

    def poll_constantly():
        while proc.poll() is None:
            try:
                reader = Reader(store)
                reader.trials()
                reader.state_counts()
                reader.close()
                reads[0] += 1
            except Exception as exc:  # noqa: BLE001
                errors.append(repr(exc))

    threads = [threading.Thread(target=hold_a_read_transaction),
               threading.Thread(target=poll_constantly)]
    for t in threads:
        t.start()
    statuses = 0
    while proc.poll() is None:
        assert cli("status", "busy").returncode == 0
        statuses += 1
    for t in threads:
        t.join()
    out, err = proc.communicate()
    assert proc.returncode == 0, err
    assert errors == []
    assert reads[0] > 10 and statuses >= 1
    assert set(snapshots) == {0}  # the held transaction saw one consistent snapshot
    exp, trials = read_store(cli.runs, "busy")
    assert exp.status == "completed" and len(trials) == 40
    con = sqlite3.connect(store)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert con.execute("select count(*) from metrics").fetchone()[0] == 80
    con.close()


def test_a_version_1_store_is_migrated_in_place(tmp_path):
    import sqlite_utils

    from hpsearch.store import schema
    path = tmp_path / "store.sqlite"
    db = sqlite_utils.Database(path)
    schema._v1(db)
    db.execute("PRAGMA user_version = 1")
    db["trials"].insert({"id": 0, "state": "completed", "params": "{}", "attempt": 1,
                         "created": 1.0, "trial_dir": "/t"})
    db.conn.commit()
    db.conn.close()
    store = Store(path)
    assert store.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION >= 2
    (row,) = store.trials()
    assert row.state == "completed" and row.nodes is None and row.pending_reason is None
    store.close()


def test_a_read_only_command_does_not_import_pandas_or_numpy_and_they_still_import_later(
        tmp_path):
    """sqlite-utils imports pandas and numpy when installed (0.25-0.3 s of every command's
    start); hpsearch.store.lib hides them from that import only. `hpsearch status` on a real
    store must not load them, and pandas must import normally afterwards (reports use it)."""
    import subprocess
    import sys
    store = Store.create(tmp_path / "runs" / "exp" / "store.sqlite", name="exp",
                         spec_yaml="name: exp\n", spec_file="exp.yaml", base_dir=str(tmp_path),
                         strategy="random", directions=["minimize"], trials_requested=1)
    store.insert_trial(0, {"x": 1.5}, str(tmp_path / "t0"), {})
    store.close()
    code = ("import sys\n"
            "from hpsearch.store.reader import Reader\n"
            f"reader = Reader({str(tmp_path / 'runs' / 'exp' / 'store.sqlite')!r})\n"
            "assert [t.params for t in reader.trials()] == [{'x': 1.5}]\n"
            "print(sorted(m for m in ('pandas', 'numpy') if m in sys.modules))\n"
            "import pandas, numpy\n"
            "print(pandas.DataFrame({'a': [1]}).shape, numpy.float64(2.0) * 2)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert out == ["[]", "(1, 1) 4.0"]


@pytest.mark.parametrize("folder", ["runs?x", "runs#y", "runs%3Fz"])
def test_a_reader_reads_a_store_whose_path_has_uri_characters_and_creates_nothing(
        tmp_path, folder):
    """Before: the reader's `file:PATH?mode=ro` URI was cut at a '?' or '#' in the path, so
    SQLite opened the part before it read-write, creating an empty file there (a stray
    empty database beside the runs dir), and said the store held no experiment."""
    path = tmp_path / folder / "exp" / "store.sqlite"
    _experiment(path).close()
    before = sorted(p.name for p in tmp_path.iterdir())
    reader = Reader(path)
    try:
        assert reader.experiment().name == "e"
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            reader.db.execute("update experiment set status = 'x'")
    finally:
        reader.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == before == [folder]


def test_opening_a_missing_store_for_reading_fails_and_creates_nothing(tmp_path):
    """A store gone between a reader's check and its open (an experiment started over or
    deleted meanwhile): every way a reader opens the file fails, none creates it."""
    from hpsearch.store import read_only
    path = tmp_path / "store.sqlite"
    with pytest.raises(NotFound):
        Reader(path)
    for opener in (read_only.open_read_only, read_only._open_immutable):
        with pytest.raises((sqlite3.Error, StorageError)):
            opener(path)
        assert list(tmp_path.iterdir()) == [], opener.__name__


def test_best_of_ranks_ids_and_values_as_best_does_over_every_row(tmp_path):
    """results.best_of (SQLite ranks by the first value; the values JSON cannot hold,
    Infinity, are ranked in Python beside its k) gives what results.best gives over every
    trial's row; Reader's shortcuts give what the rows give."""
    from hpsearch.store.results import best, best_of
    path = tmp_path / "store.sqlite"
    store = _experiment(path)
    values = [3.0, 1.0, float("inf"), -float("inf"), 1.0, None, 2.0, 0.5]
    for i, v in enumerate(values):
        store.insert_trial(i, {"x": i, **({"y": i} if i in (2, 5) else {})}, f"/t/{i}", {})
        store.finish_attempt(i, 1, "failed" if v is None else "completed", 0, None,
                             None if v is None else [v])
        store.add_metrics(i, 1, [{"step": 1, "loss": 1.0}, {"step": 0, "acc": 2.0}]
                          if i == 4 else [{"step": 0, "loss": 1.0}])
    store.close()
    with Reader(path) as reader:
        trials = reader.trials()
        for directions in (["minimize"], ["maximize"]):
            for k in (1, 3, 8):
                assert [t.id for t in best_of(reader, directions, k)] == \
                    [t.id for t in best(trials, directions, k)]
        assert [t.id for t in best_of(reader, ["minimize"], 2)] == [3, 7]
        assert reader.metric_order() == ["loss", "acc"]
        assert reader.param_order() == ["x", "y"]
        assert [t.id for t in reader.last_trials(3)] == [5, 6, 7]
        assert [t.id for t in reader.trials_by_id([4, 1, 99])] == [4, 1]
        assert [a["trial"] for a in reader.attempts_of([6, 2])] == [2, 6]

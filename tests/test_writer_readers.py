"""Readers never stop the writer (issue 37 item 4).

In rollback-journal mode (a store on a shared filesystem, forced here with
HPSEARCH_STORAGE=network) SQLite's writer must wait for every reader's SHARED lock to go
before it may write the file. A reader that keeps its lock (a stopped process, a slow query
over NFS, a group member's `sqlite3` shell with an open transaction) made the driver's
commit fail with "database is locked" after the busy timeout, and the driver exit. Now the
driver retries a busy commit, with back-off and an event, and hpsearch's own readers
(Reader: status, watch, export, the Python API) take no lock at all.

HPSEARCH_STORE_BUSY_TIMEOUT shortens SQLite's wait per try (30 s) so that a test sees it run
out in a fraction of a second."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest

from hpsearch.store.reader import Reader
from hpsearch.store.runs import STORE_FILE
from hpsearch.store.store import Store
from tests.helpers import junk_commits, read_store

NETWORK = {"HPSEARCH_STORAGE": "network"}
SHORT_BUSY = {"HPSEARCH_STORE_BUSY_TIMEOUT": "0.2"}


def _store(tmp_path: Path, monkeypatch) -> Store:
    for key, value in {**NETWORK, **SHORT_BUSY}.items():
        monkeypatch.setenv(key, value)
    store = Store.create(tmp_path / STORE_FILE, name="e", spec_yaml="x: 1\n", spec_file="s.yaml",
                         base_dir="/", strategy="random", directions=["minimize"],
                         trials_requested=3)
    assert store.journal_mode == "delete"
    return store


def _holding_reader(path: Path) -> sqlite3.Connection:
    """A plain read-only SQLite connection inside a read transaction: it holds the SHARED
    lock, as a `sqlite3 -readonly` shell with BEGIN, or any reader stopped mid-query, does."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    con.execute("BEGIN")
    con.execute("select count(*) from events").fetchone()
    return con


def _busy_events(path: Path) -> list[str]:
    reader = Reader(path)
    try:
        return [e["message"] for e in reader.events(limit=10_000)
                if e["kind"] == "storage" and "waited" in e["message"]]
    finally:
        reader.close()


def test_a_commit_blocked_by_a_readers_lock_is_retried_until_the_lock_goes(tmp_path,
                                                                           monkeypatch):
    store = _store(tmp_path, monkeypatch)
    reader = _holding_reader(store.path)
    failed: list[BaseException] = []

    def write() -> None:
        try:
            store.add_event("note", "written while a reader held its lock")
        except BaseException as exc:  # noqa: BLE001 - what the test looks for
            failed.append(exc)

    writer = threading.Thread(target=write)
    began = time.monotonic()
    writer.start()
    time.sleep(1.0)  # five busy timeouts
    assert writer.is_alive() and not failed, failed  # waiting, not failed
    reader.execute("COMMIT")  # the reader lets go
    writer.join(10)
    assert not writer.is_alive() and not failed, failed
    assert time.monotonic() - began >= 1.0
    store.close()
    notes = [e["message"] for e in Reader(store.path).events(limit=100) if e["kind"] == "note"]
    assert notes == ["written while a reader held its lock"]
    waited = _busy_events(store.path)
    assert len(waited) == 1 and "another process's lock" in waited[0], waited


@pytest.mark.slow  # 5.3 s in the quick tier (2026-11-29): over its 5 s rule
def test_a_driver_waits_out_a_reader_that_holds_its_lock_and_finishes_the_search(cli):
    spec = cli.write_spec("""
        name: held
        command: 'sleep 0.2; echo "@hpsearch step=0 loss={x}"'
        search:
          strategy: random
          trials: 4
          parallel: 1
          seed: 1
          space:
            x: {low: 0.0, high: 1.0}
        objective: {metric: loss}
        """)
    driver = cli.popen("submit", spec, env={**NETWORK, **SHORT_BUSY})
    store = cli.runs / "held" / STORE_FILE
    deadline = time.monotonic() + 30
    while not store.exists():
        assert time.monotonic() < deadline and driver.poll() is None, driver.communicate()
        time.sleep(0.02)
    reader = _holding_reader(store)
    time.sleep(1.5)  # the driver's next commits find it there, for 7 busy timeouts
    assert driver.poll() is None, driver.communicate()  # before: exit 1, "database is locked"
    reader.execute("COMMIT")
    reader.close()
    out, err = driver.communicate(timeout=60)
    assert driver.returncode == 0, err
    assert "waited" in err and "another process's lock" in err, err
    exp, trials = read_store(cli.runs, "held")
    assert exp.status == "completed" and [t.state for t in trials] == ["completed"] * 4
    assert _busy_events(store)


def test_a_reader_mid_query_holds_no_lock_that_the_driver_waits_for(tmp_path, monkeypatch):
    """A Reader whose query is slow (a large store over NFS, a stopped process) while the
    driver commits: the commit goes through at once, and the reader's answer is the store
    after that commit, not a mix of before and after."""
    store = _store(tmp_path, monkeypatch)
    reader = Reader(store.path)
    before = len(reader.events())
    started = threading.Event()

    def slow() -> int:
        started.set()
        time.sleep(0.6)
        return 1

    reader.db.conn.create_function("slow", 0, slow)
    answers: list = []
    query = threading.Thread(target=lambda: answers.append(reader.db.execute(
        "select (select count(*) from events), slow()").fetchone()))
    query.start()
    assert started.wait(5)
    began = time.monotonic()
    store.add_event("note", "committed while a reader was mid-query")
    took = time.monotonic() - began
    query.join(10)
    assert took < 0.5, f"the commit waited {took:.2f} s for the reader"  # before: 0.6 s
    assert not _busy_events(store.path)
    assert answers == [(before + 1, 1)]  # read again after the commit overlapped it
    reader.close()
    store.close()


def test_lock_free_reads_see_whole_commits_only(tmp_path, monkeypatch):
    """A writer commits 40 rows at a time, spilling pages to the file mid-transaction, 100
    times a second, while a Reader counts them: every count is a whole number of commits,
    and every read works."""
    store = _store(tmp_path, monkeypatch)
    store.close()
    writer = junk_commits(store.path, 2, pause=0.01)
    counts = []
    reader = Reader(store.path)  # one long-lived reader, as the TUI keeps
    while writer.poll() is None:
        counts.append(reader.db.execute(
            "select count(*) from events where kind = 'junk'").fetchone()[0])
        counts.append(sum(e["kind"] == "junk" for e in reader.events(limit=100_000)))
    commits = int(writer.stdout.read())
    reader.close()
    assert writer.returncode == 0 and commits > 10 and len(counts) > 10
    assert not [c for c in counts if c % 40], sorted(set(counts))
    assert len(set(counts)) > 3  # it saw the store grow

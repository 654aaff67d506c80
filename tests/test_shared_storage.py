"""Shared filesystems: the store's journal mode follows the runs dir's filesystem, the driver
lock is a file with host, pid and heartbeat (correct where flock is not), and `cancel` signals
only a driver it can prove is this experiment's, on this host.

Network mode is forced with HPSEARCH_STORAGE=network (this machine has no NFS); "another
host" is a lock file written as another host's driver would write it."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpsearch import procs
from hpsearch.errors import BadInput
from hpsearch.store import filesystem
from hpsearch.store.lockfile import LOCK_FILE, STALE_AFTER, this_host
from hpsearch.store.reader import Reader
from hpsearch.store.runs import STORE_FILE
from hpsearch.store.store import Store
from tests.helpers import junk_commits, read_store

NETWORK = {"HPSEARCH_STORAGE": "network"}


def _spec(cli, name: str, trials: int = 4, sleep: float = 0.1, parallel: int = 2) -> Path:
    return cli.write_spec(f"""
        name: {name}
        command: 'sleep {sleep}; echo "@hpsearch step=0 loss={{x}}"'
        search:
          strategy: random
          trials: {trials}
          parallel: {parallel}
          seed: 1
          space:
            x: {{low: 0.0, high: 1.0}}
        objective: {{metric: loss}}
        """, f"{name}.yaml")


def _journal_mode(path: Path) -> str:
    con = sqlite3.connect(path)
    try:
        return con.execute("PRAGMA journal_mode").fetchone()[0]
    finally:
        con.close()


def _write_lock(exp_dir: Path, age: float = 0.0, text: str | None = None, **fields) -> Path:
    """A lock file as a driver writes it (hpsearch.store.lockfile), with `fields` changed and its
    heartbeat `age` seconds old."""
    host, boot = this_host()
    record = {"format": 1, "experiment": exp_dir.name, "host": host, "boot_id": boot,
              "pid": 4242, "pid_start": 1, "acquired": time.time() - age, "token": "f00d"}
    record.update(fields)
    exp_dir.mkdir(parents=True, exist_ok=True)
    path = exp_dir / LOCK_FILE
    path.write_text(json.dumps(record) + "\n" if text is None else text)
    os.utime(path, (time.time() - age, time.time() - age))
    return path


def _dead_pid() -> tuple[int, int]:
    """(pid, start time) of a process that has exited."""
    proc = subprocess.Popen(["sleep", "0"])
    start = procs.start_time(proc.pid) or 1
    proc.wait()
    return proc.pid, start


@pytest.fixture
def sleeper():
    """A foreign process (not a driver) that must survive every refused cancel."""
    proc = subprocess.Popen(["sleep", "300"])
    yield proc
    proc.kill()
    proc.wait()


# -- filesystem detection --------------------------------------------------------------------
@pytest.mark.parametrize("path", ["/dev/shm", "/"])
def test_statfs_detects_this_machines_mounts(path, monkeypatch):
    monkeypatch.delenv("HPSEARCH_STORAGE", raising=False)
    found = filesystem.detect(path)
    # coreutils' `stat -f` asks the same statfs(2): the magic numbers must agree
    magic = int(subprocess.run(["stat", "-f", "-c", "%t", path], capture_output=True,
                               text=True, check=True).stdout, 16)
    assert (found.how, found.magic) == ("statfs", magic)
    mounted = filesystem.mount_type(path)  # the fallback, by longest mount point
    if found.magic == 0xEF53:  # one magic for ext2, ext3 and ext4
        assert mounted in ("ext2", "ext3", "ext4")
    else:
        assert found.fstype == mounted
    if path == "/dev/shm":
        assert (found.fstype, found.network, found.journal_mode) == ("tmpfs", False, "wal")
    # below a mount point, and not yet existing: the filesystem that will hold it
    assert filesystem.detect(Path(path) / "no" / "such" / "dir").fstype == found.fstype


def test_mountinfo_fallback_takes_the_longest_mount_point(tmp_path):
    info = tmp_path / "mountinfo"
    info.write_text(
        "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
        "40 27 0:50 / /lus rw - lustre 10.0.0.1@tcp:/fs rw\n"
        "41 40 0:51 / /lus/scratch\\040me rw - nfs4 srv:/x rw\n"
        "42 27 0:52 / /lustre rw - tmpfs tmpfs rw\n")
    assert filesystem.mount_type("/lus/a/b", str(info)) == "lustre"
    assert filesystem.mount_type("/lus/scratch me/runs", str(info)) == "nfs4"
    assert filesystem.mount_type("/lustre/x", str(info)) == "tmpfs"  # not under /lus
    assert filesystem.mount_type("/home", str(info)) == "ext4"
    assert filesystem.is_network("nfs4") and filesystem.is_network("fuse.sshfs")
    assert filesystem.is_network("somethingnew")  # unknown: the safe mode
    assert not filesystem.is_network("xfs") and not filesystem.is_network("overlay")


def test_override_forces_either_mode_and_bad_values_are_refused(monkeypatch):
    monkeypatch.setenv("HPSEARCH_STORAGE", "network")
    found = filesystem.detect("/dev/shm")
    assert (found.network, found.journal_mode, found.how) == (True, "delete", "HPSEARCH_STORAGE")
    monkeypatch.setenv("HPSEARCH_STORAGE", "local")
    assert filesystem.detect("/dev/shm").journal_mode == "wal"
    monkeypatch.setenv("HPSEARCH_STORAGE", "nfs")
    with pytest.raises(BadInput, match="HPSEARCH_STORAGE: 'nfs': expected network, local or auto"):
        filesystem.detect("/dev/shm")


def test_bad_override_is_exit_2_with_nothing_created(cli):
    proc = cli("submit", _spec(cli, "badenv"), env={"HPSEARCH_STORAGE": "lustre"}, check=2)
    assert "HPSEARCH_STORAGE: 'lustre': expected network, local or auto" in proc.stderr
    assert not (cli.runs / "badenv").exists()


# -- the store in network mode ---------------------------------------------------------------
@pytest.mark.slow  # over 5 s in the quick tier on 2026-11-28 (docs/testing.md#tiers)
def test_network_mode_search_runs_with_a_rollback_journal_and_live_readers(cli):
    # about 8 s of trials: a status takes seconds on a loaded machine (with 1 s, a loaded
    # fresh-clone run saw a single status while the driver ran)
    spec = _spec(cli, "shared", trials=12, sleep=2.0, parallel=3)
    driver = cli.popen("submit", spec, env={**NETWORK, "HPSEARCH_LOCK_HEARTBEAT": "0.2"})
    store, lock = cli.runs / "shared" / STORE_FILE, cli.runs / "shared" / LOCK_FILE
    deadline = time.monotonic() + 30
    while not store.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    record = json.loads(lock.read_text())
    assert (record["host"], record["pid"]) == (this_host()[0], driver.pid)
    first_beat = lock.stat().st_mtime
    statuses = 0
    while driver.poll() is None:  # readers in processes of their own, while the driver writes
        status = cli("status", "shared", env=NETWORK)
        assert status.returncode == 0, status.stderr
        if status.stdout.startswith("experiment shared: running"):
            assert f"driver: pid {driver.pid}" in status.stdout.splitlines()[0]
            statuses += 1
    out, err = driver.communicate()
    assert driver.returncode == 0, err
    assert statuses >= 2
    assert _journal_mode(store) == "delete"
    assert not Path(f"{store}-wal").exists() and not Path(f"{store}-shm").exists()
    assert not lock.exists()  # released
    notes = [e["message"] for e in _events(store) if e["kind"] == "storage"]
    assert notes and "journal_mode=delete" in notes[0] and "HPSEARCH_STORAGE" in notes[0]
    exp, trials = read_store(cli.runs, "shared")
    assert exp.status == "completed" and [t.state for t in trials] == ["completed"] * 12
    assert cli("status", "shared").returncode == 0  # and read later in local mode too
    assert first_beat < time.time() - 0.5  # the search ran long enough to see heartbeats


@pytest.mark.slow  # 3.1 s in the quick tier (2026-11-30): over its 3 s rule
def test_heartbeat_refreshes_the_lock_while_the_driver_runs(cli):
    spec = _spec(cli, "beat", trials=2, sleep=2, parallel=2)
    driver = cli.popen("submit", spec, env={**NETWORK, "HPSEARCH_LOCK_HEARTBEAT": "0.2"})
    lock = cli.runs / "beat" / LOCK_FILE
    deadline = time.monotonic() + 30
    while not lock.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1)
    age = time.time() - lock.stat().st_mtime
    assert age < 0.6, f"heartbeat {age:.1f} s old"
    assert driver.wait(60) == 0


def test_a_wal_store_is_switched_when_opened_in_network_mode_and_back(cli):
    spec = _spec(cli, "switch", trials=2)
    cli("submit", spec, check=0)
    store = cli.runs / "switch" / STORE_FILE
    assert _journal_mode(store) == "wal"  # this machine's disk is local
    cli("resume", "switch", env=NETWORK, check=0)
    assert _journal_mode(store) == "delete"
    cli("resume", "switch", check=0)
    assert _journal_mode(store) == "wal"
    notes = [e["message"] for e in _events(store) if e["kind"] == "storage"]
    assert any("journal_mode wal -> delete" in n for n in notes)
    assert any("journal_mode delete -> wal" in n for n in notes)


@pytest.mark.slow  # 3.1 s in the quick tier (2026-11-30): over its 3 s rule
def test_reader_recovers_a_store_left_mid_transaction_in_rollback_mode(tmp_path, monkeypatch):
    monkeypatch.setenv("HPSEARCH_STORAGE", "network")
    path = tmp_path / STORE_FILE
    Store.create(path, name="e", spec_yaml="x: 1\n", spec_file="s.yaml", base_dir="/",
                 strategy="random", directions=["minimize"], trials_requested=3).close()
    # a driver killed (really: os._exit) while a large write transaction spills to the file
    code = ("import sqlite3, os\n"
            f"c = sqlite3.connect({str(path)!r}, isolation_level=None)\n"
            "c.execute('PRAGMA cache_size=1'); c.execute('BEGIN IMMEDIATE')\n"
            "for i in range(3000):\n"
            "    c.execute('insert into events (time, kind, message) values (0, ?, ?)',"
            " ('junk', 'x' * 500))\n"
            "os._exit(9)\n")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 9
    assert Path(f"{path}-journal").exists()  # a hot journal: read-only opens fail on it
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        con.execute("select count(*) from events").fetchone()
    before = path.read_bytes(), Path(f"{path}-journal").read_bytes()
    reader = Reader(path)  # the last commit, read from a private copy rolled back there
    assert reader.experiment().name == "e"
    assert not [e for e in reader.events(limit=10000) if e["kind"] == "junk"]
    reader.close()
    # the reader wrote nothing: the store and its hot journal are as the driver left them
    assert (path.read_bytes(), Path(f"{path}-journal").read_bytes()) == before
    Store(path).close()  # the next driver rolls it back
    assert not Path(f"{path}-journal").exists()


@pytest.mark.slow  # over 5 s in the quick tier on 2026-11-28 (docs/testing.md#tiers)
def test_readers_during_commits_where_locks_do_not_reach_them_leave_the_store_intact(
        tmp_path, monkeypatch):
    """On BeeGFS, Lustre `localflock` or NFS `nolock` a reader on the login node cannot see
    the driver's lock, so each of the driver's journals looks hot to it. A reader that
    rolled one back destroyed the live transaction ("database disk image is malformed").
    SQLite's unix-none VFS (no locks) stands in for such a filesystem on the driver's side."""
    monkeypatch.setenv("HPSEARCH_STORAGE", "network")
    path = tmp_path / STORE_FILE
    Store.create(path, name="e", spec_yaml="x: 1\n", spec_file="s.yaml", base_dir="/",
                 strategy="random", directions=["minimize"], trials_requested=3).close()
    writer = junk_commits(path, 6, "vfs=unix-none")
    reads = 0
    while writer.poll() is None:
        reader = Reader(path)
        reader.experiment()
        reader.close()
        reads += 1
    commits = int(writer.stdout.read())
    assert writer.returncode == 0 and commits > 10 and reads > 10
    check = sqlite3.connect(path)
    assert check.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert check.execute("select count(*) from events where kind = 'junk'").fetchone()[0] \
        == 40 * commits  # not one commit lost
    check.close()


# -- the driver lock -------------------------------------------------------------------------
REQUEUED = {"SLURM_JOB_ID": "8812", "SLURM_RESTART_COUNT": "1"}  # a driver job's 2nd run
STALE_LOCKS = {  # case -> (lock file fields, environment of the new driver)
    "dead-driver-on-this-host": (lambda: dict(zip(("pid", "pid_start"), _dead_pid())), {}),
    "another-host-old-heartbeat": (lambda: dict(host="node-elsewhere", age=STALE_AFTER + 60),
                                   {}),
    "this-host-before-a-reboot": (lambda: dict(boot_id="0ld-b00t", age=STALE_AFTER + 60), {}),
    "old-garbage": (lambda: dict(text="not a lock\n", age=STALE_AFTER + 60), {}),
    # fresh heartbeat, but written by the run of this Slurm job that Slurm requeued
    "earlier-run-of-this-driver-job": (lambda: dict(host="node-elsewhere", slurm_job="8812",
                                                    slurm_restart=0, age=20), REQUEUED),
}


@pytest.mark.parametrize("case", list(STALE_LOCKS))
def test_a_stale_lock_is_taken_over(cli, case):
    spec = _spec(cli, "stale")
    fields, env = STALE_LOCKS[case]
    lock = _write_lock(cli.runs / "stale", **fields())
    proc = cli("submit", spec, env={**NETWORK, **env}, check=0)
    assert "already" not in proc.stderr
    exp, trials = read_store(cli.runs, "stale")
    assert exp.status == "completed" and len(trials) == 4
    assert not lock.exists()
    assert not list(lock.parent.glob(".driver.lock*")) and not list(lock.parent.glob("*takeover"))


@pytest.mark.parametrize("case", ["another-host", "namesake-other-boot", "same-driver-job-run",
                                  "young-garbage", "empty"])
def test_a_live_lock_of_another_driver_refuses_submit_and_resume(cli, case):
    spec = _spec(cli, "held")
    fields = {"another-host": dict(host="node-elsewhere", pid=4242),
              "namesake-other-boot": dict(boot_id="other-boot", pid=4242),
              "same-driver-job-run": dict(host="node-elsewhere", pid=4242, slurm_job="8812",
                                          slurm_restart=1),
              "young-garbage": dict(text="{\"pid\": \n"),
              "empty": dict(text="")}[case]
    env = {**NETWORK, **(REQUEUED if case == "same-driver-job-run" else {})}
    lock = _write_lock(cli.runs / "held", age=30, **fields)
    before = lock.read_bytes()
    proc = cli("submit", spec, env=env, check=2)
    if "garbage" not in case and case != "empty":
        host = this_host()[0] if case == "namesake-other-boot" else "node-elsewhere"
        assert f"already being driven by pid 4242 on host {host}" in proc.stderr
        assert re.search(r"heartbeat 3\d s ago", proc.stderr), proc.stderr
    else:
        assert "unreadable" in proc.stderr and "remove that file" in proc.stderr
    assert not (cli.runs / "held" / STORE_FILE).exists()
    assert not (cli.runs / "held" / "trials").exists()
    assert lock.read_bytes() == before  # left as it was
    # an existing experiment: resume is refused the same way, and its store is untouched
    lock.unlink()
    cli("submit", spec, check=0)
    lock = _write_lock(cli.runs / "held", age=30, **fields)
    events = _events(cli.runs / "held" / STORE_FILE)
    cli("resume", "held", env=env, check=2)
    assert _events(cli.runs / "held" / STORE_FILE) == events


def _events(store: Path) -> list[dict]:
    reader = Reader(store)
    try:
        return reader.events(limit=10000)
    finally:
        reader.close()


def test_a_lock_that_cannot_be_created_is_a_clear_error(cli):
    spec = _spec(cli, "nolock")
    cli.runs.parent.mkdir(parents=True, exist_ok=True)
    cli.runs.write_text("a file where the runs dir should be\n")
    proc = cli("submit", spec, env=NETWORK)
    assert proc.returncode == 2  # checked before the lock is written (store/private.py)
    assert f"runs dir {cli.runs} is not a folder" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow  # 31 s in the quick tier (2026-11-29): over its 5 s rule
def test_a_driver_whose_lock_was_taken_over_exits_at_once(cli):
    spec = _spec(cli, "lost", trials=2, sleep=30)
    driver = cli.popen("submit", spec, env={**NETWORK, "HPSEARCH_LOCK_HEARTBEAT": "0.2"})
    lock = cli.runs / "lost" / LOCK_FILE
    deadline = time.monotonic() + 30
    while not (cli.runs / "lost" / STORE_FILE).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    # what a takeover from another host does: a new lock renamed over the old one
    other = _write_lock(cli.runs / "lost" / "elsewhere", host="node-elsewhere", pid=777)
    os.rename(other, lock)
    assert driver.wait(10) == 1
    assert "now belongs to pid 777 on host node-elsewhere" in driver.stderr.read()
    assert json.loads(lock.read_text())["host"] == "node-elsewhere"  # not removed by it
    _, trials = read_store(cli.runs, "lost")
    for t in trials:  # its trials were left running for the new driver to adopt
        if t.pid:
            os.killpg(t.pid, signal.SIGKILL)


# -- cancel ----------------------------------------------------------------------------------
def _cancel_refuses(cli, sleeper, name: str, lock: Path, *expected: str) -> None:
    proc = cli("cancel", name, env=NETWORK)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    for text in expected:
        assert text in proc.stderr, proc.stderr
    assert sleeper.poll() is None and procs.alive(sleeper.pid, procs.start_time(sleeper.pid))
    assert lock.exists()
    assert read_store(cli.runs, name)[0].status == "completed"  # nothing marked cancelled


@pytest.mark.parametrize("text", ["", "\n", "garbage\n", "12345\n", "-1\n",
                                  '{"pid": 0}', "PID0"])
def test_cancel_refuses_empty_or_garbage_lock_files(cli, sleeper, text):
    cli("submit", _spec(cli, "junk"), check=0)
    if text == "PID0":
        lock = _write_lock(cli.runs / "junk", pid=0)
    else:
        lock = _write_lock(cli.runs / "junk", text=text)
    _cancel_refuses(cli, sleeper, "junk", lock, "unreadable", str(lock))


@pytest.mark.parametrize("pid", [-1, 1])
def test_cancel_refuses_a_lock_naming_pid_minus_one_or_init(cli, sleeper, pid):
    cli("submit", _spec(cli, "init"), check=0)
    lock = _write_lock(cli.runs / "init", pid=pid, pid_start=procs.start_time(1))
    _cancel_refuses(cli, sleeper, "init", lock, "unreadable")


def test_cancel_refuses_to_signal_a_foreign_process(cli, sleeper):
    cli("submit", _spec(cli, "foreign"), check=0)
    lock = _write_lock(cli.runs / "foreign", pid=sleeper.pid,
                       pid_start=procs.start_time(sleeper.pid))
    _cancel_refuses(cli, sleeper, "foreign", lock, f"names pid {sleeper.pid} on this host",
                    "sleep 300", "does not hold the lock file open", "not signalling it")


def test_cancel_of_a_driver_on_another_host_says_where_to_run_it(cli, sleeper):
    cli("submit", _spec(cli, "remote"), check=0)
    lock = _write_lock(cli.runs / "remote", host="node-elsewhere", pid=sleeper.pid, age=5)
    _cancel_refuses(cli, sleeper, "remote", lock,
                    f"the driver of 'remote' runs on host node-elsewhere (pid {sleeper.pid}",
                    "run `hpsearch cancel remote` there")
    status = cli("status", "remote", check=0).stdout
    assert f"driver: pid {sleeper.pid}" in status


def test_cancel_with_a_reused_pid_in_the_lock_signals_nothing(cli, sleeper):
    """The lock names the sleeper's pid with another start time: that driver is dead (its
    pid was reused), so cancel takes the stale lock and cancels as with no driver."""
    cli("submit", _spec(cli, "reused"), check=0)
    _write_lock(cli.runs / "reused", pid=sleeper.pid,
                pid_start=(procs.start_time(sleeper.pid) or 0) + 1)
    out = cli("cancel", "reused", env=NETWORK, check=0).stdout
    assert "no driver was running" in out
    assert sleeper.poll() is None
    assert not (cli.runs / "reused" / LOCK_FILE).exists()


def test_cancel_stops_a_proven_driver_in_network_mode(cli):
    spec = _spec(cli, "stopme", trials=4, sleep=60)
    out = cli("submit", spec, "--detach", env=NETWORK, check=0).stdout
    pid = int(out.split("(pid ")[1].split(")")[0])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if sum(t.state == "running" for t in read_store(cli.runs, "stopme")[1]) == 2:
                break
        except Exception:  # noqa: BLE001 - not created yet
            pass
        time.sleep(0.1)
    cancelled = cli("cancel", "stopme", env=NETWORK, check=0)
    assert f"stopped the driver (pid {pid})" in cancelled.stdout
    assert procs.start_time(pid) is None
    exp, trials = read_store(cli.runs, "stopme")
    # the third waited for a slot (asked ahead, tests/test_ask_ahead.py), never started
    assert exp.status == "cancelled"
    assert [t.state for t in trials] == ["cancelled", "cancelled", "queued"]

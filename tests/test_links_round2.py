"""Issue 37 item 10: files hpsearch writes or deletes are never reached through a link that
someone else planted, and a reader's snapshot of a store lives as long as its connection.

The attacker here plants a link where hpsearch would write a temporary file (its old name:
`.NAME.PID.tmp`, which anyone could guess), or swaps a folder for a link at the moment
between hpsearch's check and its act. Each test failed before its fix: the victim file was
overwritten, the victim folder written into or emptied, the snapshot's copy gone."""

from __future__ import annotations

import os
import pathlib
import sqlite3
import stat
from pathlib import Path

import pytest

from hpsearch.cli.main import main
from hpsearch.store import atomic, rows
from hpsearch.store.runs import STORE_FILE
from hpsearch.store.store import Store
from tests.conftest import Cli
from tests.test_other_users import _run_as, other_uid  # noqa: F401  (a fixture)

VICTIM = "the owner's own file\n"
TINY = """
name: tiny
command: 'echo "@hpsearch step=0 loss={x}"'
search: {strategy: random, trials: 1, parallel: 1, seed: 1,
         space: {x: {type: float, low: 0, high: 1}}}
objective: {metric: loss}
"""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Cli:
    """One finished one-trial search (its runs dir: tiny.runs)."""
    cli = Cli(tmp_path_factory.mktemp("tiny"))
    cli("submit", cli.write_spec(TINY), check=0)
    return cli


def _victim(folder: Path) -> Path:
    path = folder / "victim.txt"
    path.write_text(VICTIM)
    return path


def _plant(at: Path, target: Path) -> None:
    at.unlink(missing_ok=True)
    at.symlink_to(target)


def _regular(path: Path, mode: int | None = None) -> None:
    info = os.lstat(path)
    assert stat.S_ISREG(info.st_mode), path
    if mode is not None:
        assert stat.S_IMODE(info.st_mode) == mode, oct(info.st_mode)


# -- writing by rename -------------------------------------------------------------------------

def test_replace_file_takes_another_name_than_a_planted_one_and_replaces_a_link(
        tmp_path, monkeypatch):
    victim = _victim(tmp_path)
    names = iter(["feedfacefeedface"])
    real = atomic.secrets.token_hex
    monkeypatch.setattr(atomic.secrets, "token_hex", lambda n: next(names, None) or real(n))
    _plant(tmp_path / ".out.feedfacefeedface.tmp", victim)  # the first name it will draw
    _plant(tmp_path / "out", victim)
    atomic.replace_file(tmp_path / "out", "new\n")
    assert victim.read_text() == VICTIM
    assert (tmp_path / "out").read_text() == "new\n"
    _regular(tmp_path / "out", 0o600)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".out.feedfacefeedface.tmp", "out", "victim.txt"]  # nothing of its own left behind


def test_replace_file_as_open_leaves_the_mode_to_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        atomic.replace_file(tmp_path / "report", b"x", atomic.AS_OPEN)
    finally:
        os.umask(old)
    _regular(tmp_path / "report", 0o640)


def test_a_cancel_request_is_not_written_through_a_link_planted_after_an_unlink(
        tmp_path, monkeypatch):
    """Before: the request's temporary file had the pid's name; `unlink` then `write_text`
    left a moment in which a link planted at that name was written through."""
    from hpsearch.driver import slurm_job
    victim = _victim(tmp_path)
    exp = tmp_path / "exp"
    exp.mkdir()
    _plant(exp / f".{slurm_job.CANCEL_REQUEST}.{os.getpid()}.tmp", victim)
    real_unlink = pathlib.Path.unlink

    def unlink_then_plant(self, missing_ok=False):  # the attacker wins the race
        real_unlink(self, missing_ok=missing_ok)
        if self.name.endswith(".tmp"):
            self.symlink_to(victim)
    monkeypatch.setattr(pathlib.Path, "unlink", unlink_then_plant)
    slurm_job.request_cancel(exp)
    assert victim.read_text() == VICTIM
    _regular(exp / slurm_job.CANCEL_REQUEST, 0o600)
    assert slurm_job.cancel_requested(exp)


def test_the_driver_jobs_id_is_not_written_through_a_link(tmp_path):
    """Before: driver.job was written to `driver.job.tmp` by write_text, which follows a
    link there."""
    from hpsearch.driver import slurm_job
    from hpsearch.preflight import parse_spec
    from tests.test_sbatch import BASE

    class Slurm:
        def sbatch(self, script: str) -> str:
            return "4242"
    spec = parse_spec(BASE, "golden.yaml", tmp_path, runs_dir=tmp_path / "runs")
    spec.experiment_dir.mkdir(parents=True)
    victim = _victim(tmp_path)
    _plant(spec.experiment_dir / f"{slurm_job.DRIVER_JOB_FILE}.tmp", victim)
    assert slurm_job.submit(spec, None, Slurm()) == "4242"
    assert victim.read_text() == VICTIM
    _regular(spec.experiment_dir / slurm_job.DRIVER_JOB_FILE, 0o600)
    assert (spec.experiment_dir / slurm_job.DRIVER_JOB_FILE).read_text() == "4242\n"


def test_report_and_export_are_not_written_through_a_link_at_their_temporary_name(
        tiny, tmp_path, capsys):
    """Before: report.html and `export --out FILE` went to `.NAME.PID.tmp` by write_text, so
    someone who may write the output folder (a shared project space) and guesses the pid
    had the owner overwrite any file of theirs."""
    victim = _victim(tmp_path)
    out = tmp_path / "shared"
    out.mkdir()
    _plant(out / f".report.html.{os.getpid()}.tmp", victim)
    _plant(out / f".trials.csv.{os.getpid()}.tmp", victim)
    runs = ["--runs-dir", str(tiny.runs)]
    assert main(["report", "tiny", "--out", str(out), "--no-sacct", *runs]) == 0
    assert main(["export", "tiny", "--format", "csv", "--out", str(out / "trials.csv"),
                 *runs]) == 0
    capsys.readouterr()
    assert victim.read_text() == VICTIM
    _regular(out / "report.html")
    assert "hpsearch report: tiny" in (out / "report.html").read_text()
    _regular(out / "trials.csv")
    assert (out / "trials.csv").read_text().startswith("trial")


# -- the TensorBoard mirror's run folders ------------------------------------------------------

def test_a_link_planted_at_a_trials_run_folder_is_refused_not_written_through(tiny, tmp_path):
    """Before: an existing `<logdir>/<trial>` passed as long as it led to a folder, and the
    trial's event file was written wherever the link pointed."""
    pytest.importorskip("tensorboard")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    logdir = tmp_path / "tb"
    logdir.mkdir()
    _plant(logdir / "00000", elsewhere)
    proc = tiny("tensorboard", "tiny", "--logdir", logdir, check=2)
    assert f"{logdir / '00000'} is a symbolic link" in proc.stderr, proc.stderr
    assert list(elsewhere.iterdir()) == []
    (logdir / "00000").unlink()
    tiny("tensorboard", "tiny", "--logdir", logdir, check=0)  # its own folder: mirrored
    assert [p.name.startswith("events.out.tfevents.") for p in (logdir / "00000").iterdir()] == \
        [True]


def test_a_run_folder_of_another_user_is_refused(tiny, tmp_path, request):
    pytest.importorskip("tensorboard")
    other = request.getfixturevalue("other_uid")  # a real second user (needs root)
    logdir = tmp_path / "tb"
    logdir.mkdir()
    os.chmod(logdir, 0o1777)  # shared, as /tmp
    _run_as(other, logdir, "mkdir -m 777 00000")
    proc = tiny("tensorboard", "tiny", "--logdir", logdir, check=2)
    assert f"{logdir / '00000'} belongs to uid {other}, not to you" in proc.stderr
    assert list((logdir / "00000").iterdir()) == []


# -- deleting checkpoints ----------------------------------------------------------------------

def test_a_checkpoints_folder_swapped_for_a_link_after_the_check_empties_nothing_there(
        tmp_path, monkeypatch):
    """The trial (or anyone who may write its folder) swaps checkpoints/ for a link to
    another folder with a same-named entry, after the driver checked checkpoints/ and
    before it deletes: before, rmtree by path then emptied the other folder."""
    from hpsearch.ingest import checkpoints
    trial_dir = tmp_path / "trials" / "00000"
    folder = trial_dir / "checkpoints"
    (folder / "step-5").mkdir(parents=True)
    (folder / "step-5" / "weights").write_text("w")
    victim = tmp_path / "victim"
    (victim / "step-5").mkdir(parents=True)
    (victim / "step-5" / "data").write_text(VICTIM)
    target = folder / "step-5"
    swapped = []

    def swap_first(call):  # the first touch of the checkpoint itself: the attacker swaps
        def wrapped(path, *args, **kw):
            if not swapped and os.path.basename(os.fspath(path)) == "step-5":
                os.rename(folder, trial_dir / "moved")
                folder.symlink_to(victim)
                swapped.append(path)
            return call(path, *args, **kw)
        return wrapped
    for name in ("stat", "lstat", "open"):
        monkeypatch.setattr(os, name, swap_first(getattr(os, name)))
    row = rows.CheckpointRow(trial=0, step=5, path=str(target), bytes=1, time=0.0, attempt=1,
                             metric=None, deleted=None)
    assert checkpoints.remove(row, trial_dir) is None
    monkeypatch.undo()
    assert swapped, "the checkpoint was never touched"
    assert (victim / "step-5" / "data").read_text() == VICTIM
    assert not (trial_dir / "moved" / "step-5").exists()  # the real checkpoint went


def test_removing_checkpoints_never_follows_a_link(tmp_path):
    from hpsearch.ingest import checkpoints
    victim = tmp_path / "victim"
    (victim / "inner").mkdir(parents=True)
    (victim / "inner" / "data").write_text(VICTIM)
    trial_dir = tmp_path / "trials" / "00001"
    folder = trial_dir / "checkpoints"
    (folder / "step-1").mkdir(parents=True)
    (folder / "step-1" / "inner").symlink_to(victim / "inner")  # a link inside
    (folder / "step-2").symlink_to(victim)                     # the checkpoint a link
    (folder / "step-3.pt").write_text("x")

    def row(name: str) -> rows.CheckpointRow:
        return rows.CheckpointRow(0, 1, str(folder / name), 1, 0.0, 1, None, None)
    assert [checkpoints.remove(row(n), trial_dir) for n in ("step-1", "step-2", "step-3.pt",
                                                            "gone")] == [None] * 4
    assert list(folder.iterdir()) == []
    assert (victim / "inner" / "data").read_text() == VICTIM
    os.rename(folder, trial_dir / "real")
    folder.symlink_to(trial_dir / "real")
    (trial_dir / "real" / "step-4").write_text("x")
    assert checkpoints.remove(row("step-4"), trial_dir) == \
        f"not deleting {folder / 'step-4'}: outside {folder}"
    assert (trial_dir / "real" / "step-4").exists()


# -- a reader's snapshot around a hot journal --------------------------------------------------

def _mid_transaction(path: Path) -> sqlite3.Connection:
    """A store in rollback mode whose writer is mid-transaction, its changes spilled to the
    file, and holding no lock (SQLite's unix-none VFS: a filesystem whose locks do not reach
    the reader, as in tests/test_shared_storage.py): to a reader its journal is hot."""
    Store.create(path, name="e", spec_yaml="x: 1\n", spec_file="s.yaml", base_dir="/",
                 strategy="random", directions=["minimize"], trials_requested=3).close()
    writer = sqlite3.connect(f"file:{path}?vfs=unix-none", uri=True, isolation_level=None)
    writer.execute("PRAGMA cache_size=1")
    writer.execute("BEGIN IMMEDIATE")
    writer.executemany("insert into events (time, kind, message) values (0, 'junk', ?)",
                       [("x" * 500,)] * 3000)
    assert Path(f"{path}-journal").exists()
    return writer


def test_a_snapshot_is_kept_while_it_is_read_and_removed_when_it_is_closed(
        tmp_path, monkeypatch):
    """Before: open_snapshot returned its connection from inside the temporary folder's
    `with`, so the copy it reads was deleted before the first query (on NFS the folder's
    removal fails outright: the open file becomes a .nfs file)."""
    from hpsearch.store.read_only import open_snapshot
    monkeypatch.setenv("HPSEARCH_STORAGE", "network")  # a rollback journal, not WAL
    path = tmp_path / STORE_FILE
    writer = _mid_transaction(path)
    conn = open_snapshot(path)
    copy = Path(conn.execute("pragma database_list").fetchone()[2])
    assert copy.parent != path.parent and copy.name == STORE_FILE, copy
    assert copy.is_file(), "the snapshot's copy is gone while it is read"
    assert stat.S_IMODE(os.stat(copy.parent).st_mode) == 0o700
    assert conn.execute("select name from experiment").fetchall() == [("e",)]
    assert conn.execute("select count(*) from events where kind = 'junk'").fetchone() == (0,)
    conn.close()
    assert not copy.parent.exists()
    with pytest.raises(sqlite3.ProgrammingError):
        conn.execute("select 1")
    writer.execute("COMMIT")  # the store itself was not touched
    writer.close()
    check = sqlite3.connect(path)
    assert check.execute("select count(*) from events where kind = 'junk'").fetchone() == \
        (3000,)
    check.close()

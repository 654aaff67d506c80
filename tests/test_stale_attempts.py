"""What an attempt leaves behind is never read as another's (issue 37 item 9).

(a) A pilot reads the exit code that a trial's shell on another node wrote in the trial dir.
On NFS, a name this host saw missing (its own unlink, or a lookup that found nothing) keeps
answering "no such file" until the folder is checked with the server again: a trial that
exited 0 was recorded lost. NfsClientCache stands in for that part of Linux's NFS client.

(b) Metrics lines carry their attempt; the driver credits a line only to the attempt that
wrote it, so a stale attempt (a process still writing after the retry began) adds nothing
to the retry's metrics."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hpsearch.executors.base import Ended, Launch
from hpsearch.launch import attempt as attempt_files
from hpsearch.pilot import program
from hpsearch.pilot import protocol as p
from hpsearch.pilot.slots import Grant
from hpsearch.store import trusted


class NfsClientCache:
    """This host's memory of names found missing (Linux NFS negative dentries): a lookup
    of such a name answers "no such file" without asking the server, until the folder is
    opened (close-to-open makes the client check its attributes, which another host's
    write has changed). The attribute cache's own timeout (acdirmin, 30 s) outlasts a test."""

    def __init__(self, monkeypatch) -> None:
        self.missing: set[Path] = set()
        real_read, real_unlink, real_open = trusted.read_trusted, Path.unlink, os.open

        def read(path, limit, owner=None):
            path = Path(path)
            if path in self.missing:
                return None
            data = real_read(path, limit, owner)
            if data is None:
                self.missing.add(path)
            return data

        def unlink(path: Path, missing_ok: bool = False) -> None:
            self.missing.add(path)
            real_unlink(path, missing_ok=missing_ok)

        def open_(path, flags, *args, **kwargs):
            if flags & os.O_DIRECTORY:
                self.missing = {m for m in self.missing if m.parent != Path(path)}
            return real_open(path, flags, *args, **kwargs)

        monkeypatch.setattr(attempt_files, "read_trusted", read)
        monkeypatch.setattr(Path, "unlink", unlink)
        monkeypatch.setattr(os, "open", open_)


def _pilot(tmp_path: Path) -> program.Pilot:
    """A pilot of two nodes, its batch script on n1, in this process; nothing is run."""
    paths = p.PilotPaths(p.pilots_dir(tmp_path) / "1")
    paths.make()
    cfg = {"pilot": 1, "experiment": "t", "time_limit": 600, "nodes": 2, "slots_per_node": 1,
           "trial_nodes": 1, "trial_tasks_per_node": 1, "trial_cpus": 1, "trial_gpus": 0,
           "trial_time": None, "idle_timeout": 30, "grace": 60, "heartbeat": 5,
           "signal": None, "signal_before": 0, "kill_grace": 2}
    pilot = program.Pilot(paths, cfg, program.Allocation("77", ("n1", "n2"), "n1"))
    pilot.runner.submit = lambda launch: None  # the srun step is not run here
    return pilot


def _run_on_n2(pilot: program.Pilot, tmp_path: Path, attempt: int = 1) -> Path:
    """Start trial 3's attempt on node n2 (through srun, not run here); its trial dir."""
    tdir = tmp_path / "trials" / "00003"
    tdir.mkdir(parents=True, exist_ok=True)
    launch = Launch(3, attempt, "true", {"HPSEARCH_TRIAL_DIR": str(tdir),
                                         "HPSEARCH_ATTEMPT": str(attempt)}, tdir, tmp_path)
    pilot._start(p.name_of(3, attempt), launch, Grant(("n2",), 1), {})
    assert 3 in pilot.remote
    return tdir


def _told(pilot: program.Pilot, attempt: int = 1) -> dict:
    """What the pilot tells the driver of trial 3's end, once it has told it."""
    pilot._tell_held_ends(all_now=True)
    told = p.read_json(pilot.paths.file("ended", p.name_of(3, attempt)))
    assert told is not None
    return told


def test_a_remote_trial_that_exited_0_is_not_lost_to_the_pilots_own_unlink(tmp_path,
                                                                           monkeypatch):
    NfsClientCache(monkeypatch)
    pilot = _pilot(tmp_path)
    tdir = _run_on_n2(pilot, tmp_path, attempt=2)
    (tdir / "exit_code").write_text("0 2\n")  # n2's shell, through the server
    pilot._report(Ended(3, 2, 0, "exited"))
    told = _told(pilot, attempt=2)
    assert (told["reason"], told["exit_code"]) == ("exited", 0), told  # before: lost


def test_a_name_this_host_saw_missing_is_looked_up_again_at_the_trials_end(tmp_path,
                                                                            monkeypatch):
    cache = NfsClientCache(monkeypatch)
    pilot = _pilot(tmp_path)
    tdir = _run_on_n2(pilot, tmp_path)
    # anything on this host that looked for the file while the trial ran caches its absence
    assert attempt_files.read_exit_code(tdir, 1) is None and cache.missing
    (tdir / "exit_code").write_text("0 1\n")
    assert attempt_files.read_exit_code(tdir, 1) is None  # the stale answer, as NFS gives
    pilot._report(Ended(3, 1, 0, "exited"))
    told = _told(pilot)
    assert (told["reason"], told["exit_code"]) == ("exited", 0), told


@pytest.mark.parametrize("left", ["nothing", "an earlier attempt's"])
def test_a_remote_trial_whose_shell_wrote_no_exit_code_is_still_lost(tmp_path, monkeypatch,
                                                                      left):
    NfsClientCache(monkeypatch)
    pilot = _pilot(tmp_path)
    tdir = _run_on_n2(pilot, tmp_path, attempt=2)
    if left != "nothing":  # not unlinked at the start any more: it names attempt 1
        (tdir / "exit_code").write_text("0 1\n")
    pilot._report(Ended(3, 2, 0, "exited"))
    told = _told(pilot, attempt=2)
    assert (told["reason"], told["exit_code"]) == ("lost", None), told
    assert "wrote no exit code" in told["detail"]

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

from hpsearch.executors.base import Ended
from hpsearch.launch import attempt as attempt_files
from hpsearch.launch.attempt import Launch
from hpsearch.pilot import program, protocol
from hpsearch.pilot.slots import Grant
from hpsearch.store import trusted
from hpsearch.store.reader import Reader
from hpsearch.store.runs import STORE_FILE


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

        # what reads an attempt's files (exit code, peak) reads through this one
        monkeypatch.setattr(trusted, "read_trusted", read)
        monkeypatch.setattr(Path, "unlink", unlink)
        monkeypatch.setattr(os, "open", open_)


def _pilot(tmp_path: Path) -> program.Pilot:
    """A pilot of two nodes, its batch script on n1, in this process; nothing is run."""
    paths = protocol.PilotPaths(protocol.pilots_dir(tmp_path) / "1")
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
    pilot._start(protocol.name_of(3, attempt), launch, Grant(("n2",), 1), {})
    assert 3 in pilot.remote
    return tdir


def _told(pilot: program.Pilot, attempt: int = 1) -> dict:
    """What the pilot tells the driver of trial 3's end, once it has told it."""
    pilot._tell_held_ends(all_now=True)
    told = protocol.read_json(pilot.paths.file("ended", protocol.name_of(3, attempt)))
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


# -- (b) metrics lines of a stale attempt ------------------------------------------------------
STALE_TRIAL = '''
import json, os, subprocess, sys, time
from hpsearch import trial

tdir = trial.trial_dir()
if trial.attempt() == 1:
    trial.report(0, loss=5.0)
    # a process of attempt 1 that outlives it (a session of its own, no hpsearch variables):
    # once attempt 2 runs, it appends a report of attempt 1 to metrics.jsonl
    late = (
        "import json, pathlib, sys, time\\n"
        "d = pathlib.Path(sys.argv[1])\\n"
        "end = time.monotonic() + 30\\n"
        "while not (d / 'attempt2').exists() and time.monotonic() < end:\\n"
        "    time.sleep(0.02)\\n"
        "with open(d / 'metrics.jsonl', 'a') as f:\\n"
        "    f.write(json.dumps({'step': 9, 'time': time.time(), 'attempt': 1,"
        " 'loss': 100.0}) + '\\\\n')\\n"
        "(d / 'stale-written').touch()\\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HPSEARCH_")}
    subprocess.Popen([sys.executable, "-c", late, str(tdir)], env=env,
                     start_new_session=True)
    trial.resume_later()  # exit 75: the driver runs attempt 2
(tdir / "attempt2").touch()
trial.report(0, loss=1.0)
end = time.monotonic() + 30
while not (tdir / "stale-written").exists() and time.monotonic() < end:
    time.sleep(0.02)
time.sleep(0.5)  # the driver reads the stale line while attempt 2 runs
trial.report(1, loss=0.5)
'''


def test_a_stale_attempts_report_is_not_credited_to_the_retry(cli):
    (cli.cwd / "stale.py").write_text(STALE_TRIAL)
    spec = cli.write_spec("""
        name: stale
        command: "{python} stale.py"
        search:
          strategy: grid
          space:
            x: {choices: [1]}
        objective: {metric: loss}
        """)
    cli("submit", spec, check=0)
    tdir = cli.runs / "stale" / "trials" / "00000"
    assert (tdir / "stale-written").exists()  # the stale line was written during attempt 2
    reader = Reader(cli.runs / "stale" / STORE_FILE)
    try:
        trial = reader.trial(0)
        metrics = [(m["step"], m["name"], m["value"], m["attempt"]) for m in reader.metrics(0)]
        events = [e["message"] for e in reader.events(0, limit=1000)]
    finally:
        reader.close()
    assert trial.attempt == 2 and trial.state == "completed"
    assert trial.objective_values == [0.5], metrics  # before: 100.0, the stale line's
    assert metrics == [(0, "loss", 1.0, 2), (1, "loss", 0.5, 2)], metrics
    assert any("reports written by attempt 1 while attempt 2 runs are not counted" in m
               for m in events), events
    assert '"attempt": 2' in (tdir / "metrics.jsonl").read_text()  # trial.report says


@pytest.mark.parametrize("line, attempt", [
    ('{"step": 1, "attempt": 2, "loss": 0.5}', 2),
    ("step=1 attempt=2 loss=0.5", 2),
    ('{"step": 1, "loss": 0.5}', None),
])
def test_a_report_lines_attempt_is_read_as_its_attempt_not_a_metric(line, attempt):
    from hpsearch.ingest.metric_lines import json_record, pairs_record
    rec = (json_record if line.startswith("{") else pairs_record)(line)
    assert rec.get("attempt") == attempt and rec["loss"] == 0.5 and len(rec) == 3 + bool(attempt)
    assert type(rec.get("attempt")) is (int if attempt else type(None))  # before: 2.0, a metric


@pytest.mark.parametrize("value", ['0', '-1', '1.5', '"2"', 'true', 'null', '1e400'])
def test_a_report_with_a_bad_attempt_is_malformed(value):
    from hpsearch.ingest.metric_lines import Malformed, json_record
    with pytest.raises(Malformed, match="attempt: expected a whole number from 1"):
        json_record(f'{{"step": 1, "attempt": {value}, "loss": 0.5}}')


def test_attempt_is_a_reserved_name_in_trial_report(tmp_path, monkeypatch):
    from hpsearch import trial
    monkeypatch.setenv("HPSEARCH_TRIAL_DIR", str(tmp_path))
    with pytest.raises(ValueError, match="'attempt' is reserved"):
        trial.report(1, attempt=3.0)

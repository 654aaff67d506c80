"""`hpsearch delete` and `hpsearch events` (issue 15, item 5), on real local searches.

delete: with --yes; confirmed on a real terminal (a pty) by typing the name, anything else
keeps it; refused without a terminal and without --yes, for a bad or unknown name, while a
driver runs, and while trials run with no driver (unless --force; after `cancel` it is
allowed); a symbolic link is unlinked, never followed; a crash's leftover is never listed and
is removed by the next delete. events: oldest first, --trial, --kind, --limit, --json, an
unknown trial, a multi-line message.
"""

from __future__ import annotations

import json
import os
import pty
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

from hpsearch.cli.manage_cmds import event_lines
from tests.helpers import read_store
from tests.test_status_truth import FAILING, _running_trials, _wait

TINY = """
name: tiny
command: 'echo "@hpsearch step=0 loss={x}"'
search:
  strategy: grid
  space:
    x: {choices: [1, 2, 3]}
objective: {metric: loss}
executor: {type: local}
"""

SLEEPY = """
name: sleepy
command: 'sleep 60 && echo "@hpsearch step=0 loss={x}"'
search:
  strategy: grid
  space:
    x: {choices: [1]}
objective: {metric: loss}
executor: {type: local, grace: 1}
"""


def _running(cli, name: str) -> list:
    return [t for t in read_store(cli.runs, name)[1] if t.state == "running"]


def _listed(cli) -> list[str]:
    return [line.split()[0] for line in cli("status", check=0).stdout.splitlines()[1:]]


@pytest.mark.slow  # 4.8 s in the quick tier (2026-11-30): over its 3 s rule
def test_delete_with_yes_removes_it_and_a_crash_leftover_is_never_listed(cli):
    spec = cli.write_spec(TINY)
    cli("submit", spec, "--no-tui", check=0)
    other = cli.write_spec(TINY.replace("name: tiny", "name: tiny2"), "other.yaml")
    cli("submit", other, "--no-tui", check=0)
    # a delete that crashed after its rename left this behind: no experiment, never listed
    leftover = cli.runs / ".deleting" / "tiny2-4242-abcdef"
    shutil.copytree(cli.runs / "tiny2", leftover)
    assert _listed(cli) == ["tiny", "tiny2"]

    out = cli("delete", "tiny2", "--yes", check=0)
    assert f"deleted experiment 'tiny2' ({cli.runs / 'tiny2'})" in out.stdout
    assert not (cli.runs / "tiny2").exists() and not (cli.runs / ".deleting").exists()
    assert _listed(cli) == ["tiny"]
    cli("delete", spec, "--yes", check=0)  # a spec path names its experiment
    assert sorted(os.listdir(cli.runs)) == []
    assert "no experiments" in cli("status", check=0).stdout
    cli("submit", spec, "--no-tui", check=0)  # the name is free again


def _files(folder) -> list[str]:
    """What is in `folder`, but the files SQLite adds when the store is read (WAL mode)."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                  if not p.name.startswith("store.sqlite-"))


@pytest.mark.slow  # 4.4 s in the quick tier (2026-11-30): over its 3 s rule
def test_delete_refuses_bad_names_unknown_ones_and_no_terminal_without_yes(cli):
    cli("submit", cli.write_spec(TINY), "--no-tui", check=0)
    before = _files(cli.runs / "tiny")

    proc = subprocess.run([sys.executable, "-m", "hpsearch", "delete", "tiny"], cwd=cli.cwd,
                          env=cli.env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "stdin is not a terminal" in proc.stderr and "--yes" in proc.stderr
    proc = cli("delete", "tiny ", "--yes", check=2)  # not a valid name: nothing near it
    assert "bad experiment name 'tiny '" in proc.stderr
    for bad in ("../tiny", "..", ".deleting", "/tmp"):
        assert "bad experiment name" in cli("delete", bad, "--yes", check=2).stderr, bad
    proc = cli("delete", "tinny", "--yes", check=2)
    assert "no experiment 'tinny'" in proc.stderr and "did you mean 'tiny'" in proc.stderr
    (cli.runs / "notanexperiment").mkdir()  # a folder without a store is not deleted
    assert "no experiment 'notanexperiment'" in cli("delete", "notanexperiment",
                                                    "--yes", check=2).stderr
    assert (cli.runs / "notanexperiment").is_dir()
    assert _files(cli.runs / "tiny") == before


def _delete_on_a_terminal(cli, answer: str) -> tuple[int, str]:
    """`hpsearch delete tiny` with stdin a real terminal (a pty) on which `answer` is typed."""
    main, child = pty.openpty()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "hpsearch", "delete", "tiny"],
                                cwd=cli.cwd, env=cli.env, stdin=child, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        os.write(main, answer.encode() + b"\n")
        out, err = proc.communicate(timeout=60)
    finally:
        os.close(main)
        os.close(child)
    return proc.returncode, out + err


def test_delete_on_a_terminal_asks_for_the_name(cli):
    cli("submit", cli.write_spec(TINY), "--no-tui", check=0)
    code, text = _delete_on_a_terminal(cli, "yes")
    assert code == 1, text
    assert "Type the experiment's name to delete it:" in text
    assert "not deleted: you did not type 'tiny'" in text
    assert (cli.runs / "tiny" / "store.sqlite").exists()
    code, text = _delete_on_a_terminal(cli, "tiny")
    assert code == 0, text
    assert "deleted experiment 'tiny'" in text and not (cli.runs / "tiny").exists()


@pytest.mark.slow  # 3.3 s in the quick tier (2026-11-30): over its 3 s rule
def test_delete_refuses_while_a_driver_runs(cli):
    spec = cli.write_spec(SLEEPY)
    driver = cli.popen("submit", spec, "--no-tui")
    try:
        _wait(lambda: _running_trials(cli, "sleepy"))
        proc = cli("delete", "sleepy", "--yes", check=2)
        assert f"pid {driver.pid} on this host ({socket.gethostname()})" in proc.stderr
        assert "hpsearch cancel sleepy" in proc.stderr
        assert (cli.runs / "sleepy" / "store.sqlite").exists()
        assert "--force" not in proc.stderr  # --force does not override a live driver
        cli("delete", "sleepy", "--yes", "--force", check=2)
        cli("cancel", "sleepy", check=0)
        driver.wait(timeout=60)
    finally:
        if driver.poll() is None:
            driver.kill()
    cli("delete", "sleepy", "--yes", check=0)
    assert not (cli.runs / "sleepy").exists()


@pytest.mark.slow  # 4.7 s in the quick tier (2026-11-30): over its 3 s rule
def test_delete_refuses_trials_in_flight_with_no_driver_unless_forced_or_cancelled(cli):
    spec = cli.write_spec(SLEEPY)
    for way in ("force", "cancel"):
        driver = cli.popen("submit", spec, "--no-tui")
        _wait(lambda: _running_trials(cli, "sleepy"))
        trial = _running(cli, "sleepy")[0]
        driver.send_signal(signal.SIGKILL)  # its trial lives on, writing into the folder
        driver.wait(timeout=30)
        try:
            proc = cli("delete", "sleepy", "--yes", check=2)
            assert f"1 trial(s) (#0 running, pid {trial.pid}) still in flight with no " \
                "driver" in proc.stderr
            assert "Run `hpsearch cancel sleepy` first" in proc.stderr
            assert (cli.runs / "sleepy" / "store.sqlite").exists()
            if way == "force":
                proc = cli("delete", "sleepy", "--yes", "--force", check=0)
                assert f"deleted with 1 trial(s) (#0 running, pid {trial.pid}) still in " \
                    "flight (--force): they keep running" in proc.stderr
            else:
                cli("cancel", "sleepy", check=0)
                cli("delete", "sleepy", "--yes", check=0)
            assert not (cli.runs / "sleepy").exists()
        finally:
            try:
                os.killpg(trial.pid, signal.SIGKILL)  # --force left it running (see docs)
            except ProcessLookupError:
                assert way == "cancel"  # cancel stopped it


def test_delete_unlinks_a_symbolic_link_and_never_follows_one(cli, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    cli("submit", cli.write_spec(TINY), "--no-tui", "--runs-dir", elsewhere, check=0)
    cli.runs.mkdir()
    (cli.runs / "tiny").symlink_to(elsewhere / "tiny")
    proc = cli("delete", "tiny", "--yes", check=0)
    assert "removed the symbolic link" in proc.stdout and str(elsewhere / "tiny") in proc.stdout
    assert not (cli.runs / "tiny").is_symlink()
    assert (elsewhere / "tiny" / "store.sqlite").exists()  # the target is left in place
    assert not (elsewhere / "tiny" / "driver.lock").exists()

    # a link inside an experiment folder is removed as a link: what it points to stays
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("keep me")
    (elsewhere / "tiny" / "trials" / "00000" / "data").symlink_to(outside)
    cli("delete", "tiny", "--yes", "--runs-dir", elsewhere, check=0)
    assert not (elsewhere / "tiny").exists()
    assert (outside / "precious.txt").read_text() == "keep me"


@pytest.mark.slow  # over 5 s in the quick tier on 2026-11-28 (docs/testing.md#tiers)
def test_events_oldest_first_by_trial_kind_limit_and_json(cli):
    spec = cli.write_spec(TINY)
    cli("submit", spec, "--no-tui", check=0)
    lines = cli("events", "tiny", check=0).stdout.splitlines()
    cells = [line.split(None, 4) for line in lines]  # date time trial kind message
    assert [c[3] for c in cells][0] == "created" and cells[-1][2:4] == ["-", "completed"]
    stamps = [f"{c[0]} {c[1]}" for c in cells]
    assert stamps == sorted(stamps)
    assert all(time.strptime(s, "%Y-%m-%d %H:%M:%S") for s in stamps)
    assert [c[2] for c in cells if c[3] == "completed"] == ["0", "1", "2", "-"]

    trial = cli("events", spec, "--trial", "1", check=0).stdout.splitlines()
    assert len(trial) == 1 and trial[0].split(None, 4)[2:] == ["1", "completed",
                                                               "attempt 1 completed"]
    kinds = cli("events", "tiny", "--kind", "created", "storage", check=0).stdout.splitlines()
    assert [line.split()[3] for line in kinds] == ["created", "storage"]
    last_two = cli("events", "tiny", "--limit", "2", check=0)
    assert last_two.stdout.splitlines() == lines[-2:]
    # what is left out is said (issue 24): on stderr, so stdout stays one line an event
    assert last_two.stderr == (f"last 2 of {len(lines)} events, oldest first; --limit N "
                               "shows the last N, --limit 0 all\n"), last_two.stderr
    every = cli("events", "tiny", "--limit", "0", check=0)
    assert every.stdout.splitlines() == lines and every.stderr == ""
    assert cli("events", "tiny", "--json", "--limit", "1", check=0).stderr.startswith(
        f"last 1 of {len(lines)} events")

    data = json.loads(cli("events", "tiny", "--json", check=0).stdout)
    assert [(e["trial"], e["kind"]) for e in data] == [
        (None if c[2] == "-" else int(c[2]), c[3]) for c in cells]
    assert data[0]["kind"] == "created" and data[0]["trial"] is None
    assert data[0]["message"] == "experiment tiny: grid, 3 trials"
    assert data[0]["time"][:19].replace("T", " ") == stamps[0]

    proc = cli("events", "tiny", "--trial", "7", check=2)
    assert "experiment tiny has no trial 7 (trials 0 to 2)" in proc.stderr
    proc = cli("events", "tiny", "--kind", "bogus", check=0)
    assert proc.stdout == "" and "this log has: completed, created, storage" in proc.stderr
    assert "--limit" in cli("events", "tiny", "--limit", "-3", check=2).stderr
    assert "did you mean 'tiny'" in cli("events", "tinyy", check=2).stderr


def test_a_multi_line_message_is_indented_under_its_line():
    rows = [{"time": 1795700000.0, "trial": None, "kind": "created", "message": "one line"},
            {"time": 1795700001.0, "trial": 12, "kind": "failed",
             "message": "exit code 1\nTraceback:\n  ValueError: x"}]
    lines = event_lines(rows)
    assert len(lines) == 4
    column = lines[1].index("exit code 1")
    assert lines[0].index("one line") == column
    assert lines[2] == " " * column + "Traceback:"
    assert lines[3] == " " * column + "  ValueError: x"


def test_help_has_examples_and_a_missing_experiment_is_exit_2(cli):
    for command in ("delete", "events"):
        out = cli(command, "--help", check=0).stdout
        assert "examples:\n  hpsearch " + command in out
        assert "exit codes: 0 ok, 1 trials failed or search incomplete, 2 bad input" in out
        assert "no experiment 'nope'" in cli(command, "nope", "--yes" if command == "delete"
                                             else "--json", check=2).stderr
    assert not cli.runs.exists()


def test_a_failed_trials_stderr_in_its_event_is_indented_under_it(cli):
    spec = cli.write_spec(FAILING)  # its stderr ends with the ValueError line
    cli("submit", spec, "--no-tui")
    lines = cli("events", "failing", "--kind", "failed", "--trial", "0", check=0).stdout
    head, *rest = lines.splitlines()
    assert head.split(None, 4)[2:] == ["0", "failed", "attempt 1 failed: exit code 1"]
    column = head.index("attempt 1")
    assert rest and all(line.startswith(" " * column) for line in rest), lines
    assert rest[-1].strip() == "ValueError: loss diverged at lr=10.0"

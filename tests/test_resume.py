"""Crash safety on the local executor: the driver is SIGKILLed at chosen points and at random
moments; `hpsearch resume` must finish with exactly the requested trials, each run once."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import time
from collections import Counter

import pytest

from hpsearch import procs
from tests.helpers import read_store, wait_for_trials

TRIALS = 6


def _spec(cli, name: str, sleep: float = 0.3, trials: int = TRIALS, parallel: int = 2):
    runlog = cli.cwd / f"{name}.runs"
    return cli.write_spec(f"""
        name: {name}
        command: 'echo "{{trial_id}} $HPSEARCH_ATTEMPT" >> "$RUNLOG"; sleep {sleep}; echo "@hpsearch step=0 loss={{x}}"'
        env: {{RUNLOG: "{runlog}"}}
        search:
          strategy: tpe
          trials: {trials}
          parallel: {parallel}
          seed: 3
          space:
            x: {{low: 0.0, high: 1.0}}
        objective: {{metric: loss}}
        """, f"{name}.yaml"), runlog


def _assert_exactly_once(cli, name: str, runlog, trials: int = TRIALS):
    exp, rows = read_store(cli.runs, name)
    assert exp.status == "completed"
    assert [t.id for t in rows] == list(range(trials))
    assert all(t.state == "completed" for t in rows), [(t.id, t.state, t.error) for t in rows]
    assert len({t.params["x"] for t in rows}) == trials  # no trial duplicated
    runs = Counter(int(line.split()[0]) for line in runlog.read_text().splitlines())
    assert runs == Counter(range(trials)), f"each trial must run exactly once: {runs}"
    con = sqlite3.connect(cli.runs / name / "store.sqlite")
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()
    return rows


@pytest.mark.parametrize("point", ["after_insert", "after_launch", "after_running",
                                   "mid_ingest", "after_finish"])
def test_resume_after_sigkill_at_each_point(cli, point):
    spec, runlog = _spec(cli, f"kill-{point.replace('_', '-')}")
    name = spec.stem
    crashed = cli("submit", spec, env={"HPSEARCH_FAULT": f"{point}:3"})
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    cli("resume", name, check=0)
    rows = _assert_exactly_once(cli, name, runlog)
    # Stored but never launched: that same attempt is launched, it is not a second one.
    assert [t.attempt for t in rows] == [1] * TRIALS


def test_a_retry_stored_but_not_launched_runs_after_resume_not_ending_with_the_last_exit(cli):
    """The failed attempt's exit_code file is set aside before its retry is stored: a
    resumed driver found the retry 'ended while no driver ran' with the old exit code 1,
    and gave the trial up, before that order was fixed."""
    spec = cli.write_spec("""
        name: retry-crash
        command: 'echo "@hpsearch step=0 loss={x}"; [ "$HPSEARCH_ATTEMPT" != 1 ]'
        search: {strategy: grid, space: {x: {choices: [1]}}}
        objective: {metric: loss}
        retries: {max: 1}
        """)
    crashed = cli("submit", spec, env={"HPSEARCH_FAULT": "after_retry_stored:1"})
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    cli("resume", "retry-crash", check=0)
    _, rows = read_store(cli.runs, "retry-crash")
    assert [(t.state, t.attempt) for t in rows] == [("completed", 2)], rows[0].error


@pytest.mark.slow  # over 7 s in the quick tier (docs/testing.md#tiers)
def test_resume_adopts_trials_still_running(cli):
    """Both trials run when the driver dies; each sleeps 6 s so that they are still running
    when `resume` starts, even on a loaded 2-core machine (at 2.5 s, a CI-like run with
    other tests beside it saw them end first: ended while no driver ran, not adopted)."""
    spec, runlog = _spec(cli, "adopt", sleep=6, trials=2)
    crashed = cli("submit", spec, env={"HPSEARCH_FAULT": "after_running:2"})
    assert crashed.returncode == -signal.SIGKILL
    _, rows = read_store(cli.runs, "adopt")
    running = [t for t in rows if t.state == "running"]
    assert len(running) == 2 and all(procs.alive(t.pid, t.pid_start) for t in running)
    cli("resume", "adopt", check=0, timeout=180)
    _assert_exactly_once(cli, "adopt", runlog, trials=2)
    events = cli("status", "adopt", check=0)
    assert events.returncode == 0
    from hpsearch.store.reader import Reader
    reader = Reader(cli.runs / "adopt" / "store.sqlite")
    adopted = [e for e in reader.events(limit=1000) if e["kind"] == "adopted"]
    reader.close()
    assert {e["trial"] for e in adopted} == {t.id for t in running}
    assert all(t.attempt == 1 for t in read_store(cli.runs, "adopt")[1])


@pytest.mark.slow  # over 5 s in the quick tier on 2026-11-28 (docs/testing.md#tiers)
def test_resume_after_sigkill_at_random_moments(cli):
    spec, runlog = _spec(cli, "chaos", sleep=0.2, trials=10, parallel=3)
    rng = random.Random(20261126)
    proc = cli.popen("submit", spec)
    for _ in range(6):
        time.sleep(rng.uniform(0.3, 1.2))
        if proc.poll() is not None:
            break
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        # Killed before the experiment was recorded, it is not there: submit again.
        started = (cli.runs / "chaos" / "store.sqlite").exists()
        proc = cli.popen("resume", "chaos") if started else cli.popen("submit", spec)
    proc.wait(timeout=120)
    if proc.returncode != 0:  # the last kill may have landed late: finish the search
        cli("resume", "chaos", check=0)
    _assert_exactly_once(cli, "chaos", runlog, trials=10)


@pytest.mark.slow  # 3.1 s in the quick tier (2026-11-30): over its 3 s rule
def test_ctrl_c_cancels_running_trials_by_process_group_and_resume_finishes(cli):
    spec = cli.write_spec("""
        name: ctrlc
        command: 'if [ ! -e go-fast ]; then sleep 60 & sleep 60; fi; echo "@hpsearch step=0 loss={x}"'
        search:
          strategy: random
          trials: 4
          parallel: 2
          seed: 0
          space:
            x: {low: 0.0, high: 1.0}
        objective: {metric: loss}
        """)
    proc = cli.popen("submit", spec)
    rows = wait_for_trials(cli, "ctrlc", lambda rows: sum(t.state == "running" for t in rows) == 2)
    began = time.monotonic()
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 1
    assert time.monotonic() - began < 15
    _, after = read_store(cli.runs, "ctrlc")
    # the third was stored, waiting for a slot (tests/test_ask_ahead.py), and never started
    assert [t.state for t in after] == ["cancelled", "cancelled", "queued"]
    for t in rows:  # the whole process group is gone, background `sleep` included
        assert t.pid is None or _group_gone(t.pid)
    (cli.cwd / "go-fast").touch()
    cli("resume", "ctrlc", check=0)
    _, final = read_store(cli.runs, "ctrlc")
    assert [t.state for t in final] == ["completed"] * 4
    assert [t.attempt for t in final] == [2, 2, 1, 1]


def test_a_trial_killed_by_the_ctrl_c_that_stops_its_driver_is_cancelled_not_failed(cli):
    """A trial whose shell is forked at the instant of Ctrl-C is still in the driver's process
    group until setsid and dies by that SIGINT (exit 130); CI's Snakemake resume test then
    found it failed. Here the trial makes that happen for certain: it sends its driver SIGINT,
    then dies by SIGINT itself. It is cancelled, not failed, and resume runs it again."""
    spec = cli.write_spec("""
        name: caught
        command: 'if [ ! -e stopped ]; then touch stopped; kill -INT $PPID; kill -INT $$; fi; echo "@hpsearch step=0 loss={x}"'
        search:
          strategy: random
          trials: 1
          seed: 0
          space:
            x: {low: 0.0, high: 1.0}
        objective: {metric: loss}
        """)
    proc = cli("submit", spec, "--no-tui", check=1)  # stopped: cancelled, exit 1
    _, after = read_store(cli.runs, "caught")
    assert [(t.state, t.attempt) for t in after] == [("cancelled", 1)]
    assert "trial 0 failed" not in proc.stdout + proc.stderr
    cli("resume", "caught")
    _, final = read_store(cli.runs, "caught")
    assert [(t.state, t.attempt) for t in final] == [("completed", 2)]


@pytest.mark.slow  # 4.4 s in the quick tier (2026-11-30): over its 3 s rule
def test_second_ctrl_c_exits_at_once_and_resume_adopts_the_trial_still_running(cli):
    """A trial that ignores SIGTERM (grace 120 s): the first Ctrl-C waits for it, the second
    makes the driver exit at once and say so; the trial keeps running, and `resume` adopts
    it (same attempt, no second process) instead of starting it again."""
    spec = cli.write_spec("""
        name: twice
        command: 'trap "" TERM; while [ ! -e go ]; do sleep 0.1; done; echo "@hpsearch step=0 loss={x}"'
        search:
          strategy: random
          trials: 1
          parallel: 1
          seed: 0
          space:
            x: {low: 0.0, high: 1.0}
        objective: {metric: loss}
        executor: {type: local, grace: 120s}
        """)
    proc = cli.popen("submit", spec)
    rows = wait_for_trials(cli, "twice", lambda rows: rows and rows[0].state == "running")
    proc.send_signal(signal.SIGINT)
    time.sleep(1.5)
    assert proc.poll() is None  # waiting for the trial that ignores SIGTERM
    began = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 1 and time.monotonic() - began < 5, err
    assert "stopped without waiting: trial(s) 0 may still run" in out + err
    _, after = read_store(cli.runs, "twice")
    assert after[0].state == "running" and procs.alive(rows[0].pid, rows[0].pid_start)
    (cli.cwd / "go").touch()
    cli("resume", "twice", check=0, timeout=60)
    _, final = read_store(cli.runs, "twice")
    assert (final[0].state, final[0].attempt, final[0].pid) == ("completed", 1, rows[0].pid)


@pytest.mark.slow  # 3.0 s in the quick tier (2026-11-30): over its 3 s rule
def test_detached_driver_refuses_a_second_and_stops_on_cancel(cli):
    spec = cli.write_spec("""
        name: bg
        command: 'sleep 60; echo "@hpsearch step=0 loss={x}"'
        search:
          strategy: random
          trials: 3
          parallel: 2
          space:
            x: {low: 0.0, high: 1.0}
        objective: {metric: loss}
        """)
    out = cli("submit", spec, "--detach", check=0).stdout
    pid = int(out.split("(pid ")[1].split(")")[0])
    assert os.getsid(pid) != os.getsid(0)  # its own session: survives our terminal closing
    rows = wait_for_trials(cli, "bg", lambda rows: sum(t.state == "running" for t in rows) == 2)
    second = cli("resume", "bg", check=2)
    assert f"already being driven by pid {pid}" in second.stderr
    assert f"pid {pid}" in cli("status", check=0).stdout
    cancelled = cli("cancel", "bg", check=0)
    assert "stopped the driver" in cancelled.stdout
    assert procs.start_time(pid) is None
    exp, after = read_store(cli.runs, "bg")
    # the third waited for a slot (asked ahead, tests/test_ask_ahead.py), never started
    assert exp.status == "cancelled"
    assert [t.state for t in after] == ["cancelled", "cancelled", "queued"]
    assert all(_group_gone(t.pid) for t in rows if t.pid is not None)


def _group_gone(pgid: int, timeout: float = 5) -> bool:
    """SIGKILLed orphans linger a moment until init reaps them."""
    deadline = time.monotonic() + timeout
    while procs.group_alive(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True

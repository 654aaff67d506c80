"""`status`, `watch` and the live lines tell the truth (issue 15, item 3): an experiment whose
driver is gone is `interrupted` with the command to continue, a trial that ended while no
driver ran keeps its true end time, and a failed trial shows its cause, not only its exit code.
"""

from __future__ import annotations

import signal
import time

import pytest

from hpsearch.ingest.outcome import cause
from tests.helpers import read_store

SLEEPY = """
name: sleepy
command: 'sleep {s} && echo "@hpsearch step=0 loss={s}"'
search:
  strategy: grid
  parallel: 2
  space:
    s: {choices: [1.5, 8]}
objective: {metric: loss}
executor: {type: local, grace: 1}
"""

FAILING = """
name: failing
command: >-
  python3 -c "import sys; print('warming up', file=sys.stderr);
  raise ValueError('loss diverged at lr=' + sys.argv[1])" {lr}
search:
  strategy: grid
  space:
    lr: {choices: [10.0]}
objective: {metric: loss}
executor: {type: local}
"""


def _wait(test, timeout: float = 30):
    deadline = time.monotonic() + timeout
    while not test():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def _running_trials(cli, name: str) -> int:
    try:
        return sum(t.state == "running" for t in read_store(cli.runs, name)[1])
    except Exception:  # noqa: BLE001 - the store is not there yet
        return 0


@pytest.mark.slow  # long end-to-end run, 10 to 200 s (docs/testing.md#tiers)
def test_a_killed_driver_shows_interrupted_with_the_resume_command_and_true_end_times(cli):
    spec = cli.write_spec(SLEEPY)
    driver = cli.popen("submit", spec)
    _wait(lambda: _running_trials(cli, "sleepy") == 2)
    driver.send_signal(signal.SIGKILL)  # its trials live on: the 1.5 s one ends unwatched
    driver.wait(10)
    killed_at = time.time()

    shown = cli("status", "sleepy", check=0).stdout
    assert "experiment sleepy: interrupted," in shown, shown
    assert "hpsearch resume sleepy" in shown
    listing = cli("status", check=0).stdout.splitlines()
    assert any(line.split()[:2] == ["sleepy", "interrupted"] for line in listing), listing
    view = cli("watch", "sleepy", "--once", check=0).stdout
    assert "interrupted" in view and "hpsearch resume sleepy" in view, view

    time.sleep(4)  # the short trial has ended, with no driver to see it
    resumed_at = time.time()
    out = cli("resume", "sleepy", "--executor", "local", timeout=120, check=0).stdout
    assert "completed" in out
    exp, trials = read_store(cli.runs, "sleepy")
    short = next(t for t in trials if t.params["s"] == 1.5)
    assert short.state == "completed"
    # its end is when it ended (after its 1.5 s of sleep), not when resume saw it
    assert killed_at - 1.5 < short.finished < resumed_at - 2, (short.finished, resumed_at)
    assert 1.4 < short.duration < 3.0, short.duration
    assert "experiment sleepy: completed" in cli("status", "sleepy", check=0).stdout


def test_a_failed_trial_shows_its_exception_in_the_live_lines_status_and_watch(cli):
    spec = cli.write_spec(FAILING)
    out = cli("submit", spec, check=1).stdout
    want = "exit code 1: ValueError: loss diverged at lr=10.0"
    assert f"trial 0 failed: {want}" in out, out
    assert want in cli("status", "failing", check=0).stdout
    assert "ValueError: loss diverged" in cli("watch", "failing", "--once", check=0).stdout


def test_cause_picks_the_line_that_names_the_failure():
    trace = ("exit code 1\nTraceback (most recent call last):\n  File \"t.py\", line 3\n"
             "    raise RuntimeError('CUDA out of memory')\nRuntimeError: CUDA out of memory\n")
    assert cause(trace) == "exit code 1: RuntimeError: CUDA out of memory"
    assert cause("exit code 137\nstep 5\nslurmstepd: error: Detected 1 oom_kill event\nbye") \
        == "exit code 137: slurmstepd: error: Detected 1 oom_kill event"
    assert cause("exit code 2\nusage: train.py [-h]\n") == "exit code 2: usage: train.py [-h]"
    assert cause("timeout") == "timeout"
    assert cause(None) == "" and cause("") == ""
    assert len(cause("exit code 1\n" + "KeyError: " + "x" * 500)) == 160


def test_the_resume_hint_names_a_driver_job_that_may_still_be_queued(tmp_path):
    from hpsearch.ingest.outcome import resume_hint
    assert resume_hint("x", tmp_path) == "continue it with: hpsearch resume x"
    (tmp_path / "driver.job").write_text("4242\n")
    assert resume_hint("x", tmp_path) == ("its driver job 4242 may still be pending or "
                                          "requeued (squeue -j 4242); if it is gone, continue "
                                          "it with: hpsearch resume x")

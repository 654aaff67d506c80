"""Failure classes and retry rules: each class gets its rule, a trial that gives up is
failed and the search goes on, a time limit is raised, and a trial interrupted by a real
signal before its time limit saves, exits 75 and resumes to the same result."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from hpsearch.driver import retry
from hpsearch.executors.base import Ended
from hpsearch.preflight import parse_spec
from hpsearch.store.reader import Reader
from tests.helpers import read_store

BASE = """
name: r
command: "echo {x}"
search: {strategy: random, trials: 1, space: {x: {low: 0.0, high: 1.0}}}
objective: {metric: loss}
"""


def _parse(extra: str):
    return parse_spec(BASE + extra, "spec.yaml", Path("/tmp"))


def _attempts(cli, name, trial):
    reader = Reader(cli.runs / name / "store.sqlite")
    try:
        return reader.attempts(trial)
    finally:
        reader.close()


def test_each_end_gets_its_failure_class():
    def cls(reason, code=None):
        return retry.classify(Ended(0, 1, code, reason))

    assert [cls("exited", 3), cls("exited", 137), cls("exited", 75), cls("exited", 127),
            cls("exited", 126)] == ["exit", "exit", "interrupted", "launch_error",
                                    "launch_error"]
    assert [cls(r) for r in ("timeout", "out_of_memory", "node_fail", "boot_fail", "preempted",
                             "launch_error", "lost", "failed", "deadline")] == [
        "timeout", "out_of_memory", "node_fail", "boot_fail", "preempted", "launch_error",
        "lost", "other", "other"]


def test_rules_count_per_class_and_progress_does_not_count():
    spec = _parse("retries: {max: 1, exit_2: 0, timeout: {max: 1}}")
    A = retry.Attempt

    def decide(this, earlier=(), steps=None):
        return retry.decide(spec.retries, this, list(earlier), steps or {})

    assert decide(A(1, "exit", 3)).retry and not decide(A(2, "exit", 3), [A(1, "exit", 3)]).retry
    assert not decide(A(1, "exit", 2)).retry  # exit_2: 0 wins over max: 1
    assert decide(A(2, "exit", 3), [A(1, "exit", 2)]).retry  # exit_2 is its own rule
    assert decide(A(2, "node_fail"), [A(1, "out_of_memory")]).retry  # defaults: 3 and 2
    # timeouts that saved a newer checkpoint are free; one without progress counts
    steps = {1: 5, 2: 9, 3: 9}
    assert decide(A(2, "timeout"), [A(1, "timeout")], steps).retry
    assert decide(A(3, "timeout"), [A(1, "timeout"), A(2, "timeout")], steps).retry
    decision = decide(A(4, "timeout"), [A(1, "timeout"), A(2, "timeout"), A(3, "timeout")],
                      steps)
    assert not decision.retry and decision.describe() == "no retry left for timeout (1 allowed)"


def test_next_attempt_excludes_nodes_and_raises_memory_and_time():
    spec = _parse("""
resources: {mem: 4G, time: "01:30:00", sbatch_extra: ["--exclude=n9"]}
retries: {timeout: {max: 3, time_factor: 2}, out_of_memory: {max: 3, mem_factor: 1.5}}
""")
    A = retry.Attempt
    history = [A(1, "node_fail", nodes="n[1-2]"), A(2, "out_of_memory", nodes="n3"),
               A(3, "out_of_memory", nodes="n4"), A(4, "timeout", nodes="n5"),
               A(5, "preempted", nodes="n6")]
    plan = retry.next_overrides(spec.retries, spec.resources, history, {})
    assert plan.sbatch_extra == ("--exclude=n[1-2,9]", "--mem=9216M", "--time=0-03:00:00")
    assert plan.time_factor == 2.0
    assert plan.describe() == "excluding n[1-2,9]; memory x2.25: 9216M; time limit x2"
    assert retry.next_overrides(spec.retries, spec.resources, [A(1, "exit", 1)],
                                {}).sbatch_extra == ()
    # the options reach the batch script after the spec's, so sbatch takes them
    import dataclasses

    from hpsearch.launch.attempt import build_launch
    from hpsearch.slurm.sbatch import batch_script
    launch = dataclasses.replace(build_launch(spec.trial_recipe(False), 0, 6, {"x": 0.5}),
                                 sbatch_extra=plan.sbatch_extra)
    lines = batch_script(spec.slurm_job(), launch).splitlines()
    assert lines.index("#SBATCH --mem=9216M") > lines.index("#SBATCH --mem=4G")
    assert lines.index("#SBATCH --exclude=n[1-2,9]") > lines.index("#SBATCH --exclude=n9")


def test_a_trial_that_gives_up_is_failed_and_the_search_finishes(cli):
    # Even trials always exit 3 (one retry: 2 attempts); odd ones exit 2 on attempt 1 (no
    # retry for exit 2). A TPE search with one slot must still run all 6 trials.
    spec = cli.write_spec("""
        name: gives-up
        command: 'if [ $(({trial_id} % 2)) = 0 ]; then exit 3; fi; if [ "$HPSEARCH_ATTEMPT" = 1 ]; then exit 2; fi; echo "@hpsearch step=0 loss={x}"'
        search:
          strategy: tpe
          trials: 6
          parallel: 1
          seed: 1
          max_failures: false   # every trial fails: fail-fast would stop the search at 5
          space:
            x: {low: 0.0, high: 1.0}
        objective: {metric: loss}
        retries: {max: 1, exit_2: 0}
        """)
    proc = cli("submit", spec, check=1, timeout=180)
    exp, trials = read_store(cli.runs, "gives-up")
    assert exp.status == "failed"  # every requested trial ran to its end, and failed
    assert [t.state for t in trials] == ["failed"] * 6
    assert [t.attempt for t in trials] == [2, 1] * 3
    assert [(a["failure"], a["exit_code"]) for a in _attempts(cli, "gives-up", 0)] == [
        ("exit", 3), ("exit", 3)]
    assert "trial 0 failed: exit code 3 (exit; no retry left for exit (1 allowed))" \
        in proc.stdout
    assert "no retry left for exit_2 (0 allowed)" in proc.stdout
    assert all(t.sampler_attrs is not None for t in trials)


@pytest.mark.slow  # 3.8 s in the quick tier (2026-11-30): over its 3 s rule
def test_timeout_rule_raises_the_local_time_limit(cli):
    spec = cli.write_spec("""
        name: slowish
        command: 'sleep 1.5; echo "@hpsearch step=0 loss={x}"'
        search: {strategy: random, trials: 1, space: {x: {low: 0.0, high: 1.0}}}
        objective: {metric: loss}
        executor: {type: local, timeout: 1, grace: 1}
        retries: {timeout: {max: 1, time_factor: 3}}
        """)
    cli("submit", spec, check=0)
    _, (t,) = read_store(cli.runs, "slowish")
    assert t.state == "completed" and t.attempt == 2
    first, second = _attempts(cli, "slowish", 0)
    assert first["failure"] == "timeout" and "stopped after 1s timeout" in first["reason"]
    assert second["overrides"] == "time limit x3" and second["failure"] is None


def test_command_not_found_is_a_launch_error_retried_once(cli):
    # a program looked up on PATH: one named by its path is refused before any launch
    # (tests/test_first_afternoon.py)
    spec = cli.write_spec("""
        name: typo
        command: 'hpsearch-no-such-train --x {x}'
        search: {strategy: random, trials: 1, space: {x: {low: 0.0, high: 1.0}}}
        objective: {metric: loss}
        """)
    cli("submit", spec, check=1)
    assert [(a["failure"], a["exit_code"]) for a in _attempts(cli, "typo", 0)] == [
        ("launch_error", 127), ("launch_error", 127)]


@pytest.mark.slow  # 4.5 s in the quick tier (2026-11-30): over its 3 s rule
def test_signal_before_the_time_limit_checkpoints_and_resumes_to_the_same_result(cli):
    # Each attempt gets SIGUSR2 1.6 s in (timeout 3 s, signal 1.4 s before), saves and
    # exits 75; the next resumes from its checkpoint. `interrupted: 0`: only progress lets it
    # go on. 1.6 s: on a loaded 2-core machine the trial's Python start took more than the
    # 0.6 s this test once gave it, then (CI, 2026-11-30) more than 1.1 s, and the signal
    # came before its handler. 30 steps of 0.15 s: three attempts at least, however fast.
    (cli.cwd / "train.py").write_text('''
import sys, time
from hpsearch import trial
trial.should_stop()
steps, total = 30, 0.0
latest = trial.latest_checkpoint()
start, total = (0, 0.0) if latest is None else map(float, latest.read_text().split())
for step in range(int(start), steps):
    time.sleep(0.15)
    total += (step * 0.37) % 1.0
    trial.report(step, loss=total)
    with trial.checkpoint(step) as path:
        path.write_text(f"{step + 1} {total!r}")
    if trial.interrupted():
        print(f"got SIG{trial.interrupted()} after step {step}", flush=True)
        trial.resume_later()
trial.result(loss=total)
''')
    spec = cli.write_spec("""
        name: chunks
        command: '{python} train.py --x {x}'
        search: {strategy: random, trials: 1, space: {x: {low: 0.0, high: 1.0}}}
        objective: {metric: loss}
        executor: {type: local, timeout: 3, grace: 5}
        checkpoints: {keep_last: 1, signal: USR2, signal_before: 1.4}
        retries: {interrupted: 0}
        """)
    began = time.monotonic()
    cli("submit", spec, check=0, timeout=120)
    _, (t,) = read_store(cli.runs, "chunks")
    expected = sum((s * 0.37) % 1.0 for s in range(30))
    assert t.state == "completed" and t.objective_values[0] == expected
    attempts = _attempts(cli, "chunks", 0)
    assert len(attempts) >= 3, attempts
    assert all(a["failure"] == "interrupted" and a["exit_code"] == 75 for a in attempts[:-1])
    tdir = cli.runs / "chunks" / "trials" / "00000"
    assert "got SIGUSR2 after step" in (tdir / "stdout.attempt1.log").read_text()
    assert [p.name for p in (tdir / "checkpoints").iterdir()] == ["step-00000029"]
    assert time.monotonic() - began < 60


def test_batch_script_passes_the_signal_on_to_the_trial(tmp_path):
    """Slurm's --signal=B: signals only the batch shell; run the batch script with bash the
    same way and signal the shell alone: the trial must get it, save, and exit 75."""
    import dataclasses
    import os
    import signal
    import subprocess

    from hpsearch.launch.attempt import build_launch
    from hpsearch.slurm.sbatch import batch_script
    (tmp_path / "train.py").write_text('''
import time
from hpsearch import trial
trial.should_stop()
for step in range(600):
    time.sleep(0.05)
    if trial.interrupted():
        with trial.checkpoint(step) as path:
            path.write_text(trial.interrupted())
        trial.resume_later()
''')
    spec = parse_spec(BASE.replace('"echo {x}"', '"{python} train.py {x} > out.txt"') +
                      "checkpoints: {signal: USR2, signal_before: 90}\n", "spec.yaml", tmp_path)
    launch = build_launch(spec.trial_recipe(False), 0, 1, {"x": 0.5})
    tdir = tmp_path / "trial"
    (tdir / "checkpoints").mkdir(parents=True)
    env = {**launch.env, "HPSEARCH_TRIAL_DIR": str(tdir),
           "HPSEARCH_CHECKPOINT_DIR": str(tdir / "checkpoints")}
    script = batch_script(spec.slurm_job(), dataclasses.replace(launch, env=env, trial_dir=tdir))
    assert "#SBATCH --signal=B:USR2@90" in script.splitlines()
    (tmp_path / "job.sh").write_text(script)
    shell = subprocess.Popen(["bash", "job.sh"], cwd=tmp_path, start_new_session=True)
    time.sleep(1.0)
    os.kill(shell.pid, signal.SIGUSR2)  # the batch shell only, as B: does
    assert shell.wait(timeout=30) == 75
    assert (tdir / "exit_code").read_text().split() == ["75", str(launch.attempt)]
    (saved,) = (tdir / "checkpoints").iterdir()
    assert saved.read_text() == "USR2"

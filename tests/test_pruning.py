"""Early stopping on the local executor, through the real CLI: Optuna's pruners judge each
trial's intermediate reports; a pruned trial is told (STOP file, SIGTERM, SIGKILL after the
grace period), recorded `pruned` with its step and value, never retried, and its slot goes to
the next trial. A killed driver resumes with the same decisions."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap

import pytest

from tests.helpers import kill_driver_repeatedly, read_store

# A learning curve: loss(step) = x + 1/(step+1), one report every `pause` seconds.
CURVE = textwrap.dedent("""
    import os, signal, sys, time
    from hpsearch import trial
    p = trial.params()
    if p.get("stubborn"):  # ignores both the STOP file and SIGTERM
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        trial.should_stop()  # installs the SIGTERM handler
    loss = None
    for step in range(int(p["steps"])):
        loss = p["x"] + 1.0 / (step + 1)
        trial.report(step, loss=loss)
        if not p.get("stubborn") and trial.should_stop():
            break
        time.sleep(float(p["pause"]))
    trial.result(loss=loss)
""")

SPEC = """
name: {name}
command: {python} {script} {{x}} {{steps}} {{pause}} {{stubborn}}
search:
  strategy: grid
  parallel: {parallel}
  space:
    x: {{choices: {xs}}}
    steps: {{value: {steps}}}
    pause: {{value: {pause}}}
    stubborn: {{value: {stubborn}}}
  pruner: {pruner}
objective: {{metric: loss, direction: minimize}}
retries: {{max: 3}}
executor: {{type: local, grace: 1}}
"""


def _spec(cli, name="p", xs=(0, 1, 2, 3, 4, 5), steps=8, pause=0.25, parallel=1,
          stubborn="false", pruner="{type: median, n_startup_trials: 2, n_warmup_steps: 1}"):
    script = cli.cwd / "curve.py"
    script.write_text(CURVE)
    return cli.write_spec(SPEC.format(name=name, script=script, python=sys.executable, xs=list(xs), steps=steps,
                                      pause=pause, parallel=parallel, stubborn=stubborn,
                                      pruner=pruner), f"{name}.yaml")


def _steps(cli, name: str) -> dict[int, list[int]]:
    """trial -> the steps it reported, from its own metrics file."""
    out = {}
    for t in read_store(cli.runs, name)[1]:
        lines = (cli.runs / name / "trials" / f"{t.id:05d}" / "metrics.jsonl").read_text()
        out[t.id] = [json.loads(line)["step"] for line in lines.splitlines()]
    return out


@pytest.mark.slow  # over 7 s in the quick tier (docs/testing.md#tiers)
def test_median_pruner_stops_worse_trials_early_and_never_retries_them(cli):
    spec = _spec(cli)
    proc = cli("submit", spec, check=0)
    exp, trials = read_store(cli.runs, "p")
    states = [t.state for t in trials]
    # x grows with the trial id: after 2 completed trials every later one is worse than the
    # median at step 1 (the first step after the warm-up), and is stopped there.
    assert states == ["completed"] * 2 + ["pruned"] * 4, (states, proc.stdout)
    assert exp.status == "completed"
    steps = _steps(cli, "p")
    for t in trials[2:]:
        assert t.attempt == 1  # never retried, although retries.max is 3
        assert t.stop_request["step"] == 1 and t.stop_request["value"] == pytest.approx(
            t.params["x"] + 0.5)
        assert "pruned by median(n_startup_trials=2, n_warmup_steps=1) at step 1" in t.error
        assert max(steps[t.id]) < 4, steps  # it stopped long before its 8 steps
        # stopped within the ingest interval (1 s) plus the grace period (1 s) of its report
        took = float(re.search(r"stopped ([\d.]+) s after", t.error).group(1))
        assert took < 2.0, t.error
    assert "trial 2 pruned at step 1" in proc.stdout
    shown = cli("status", "p", check=0).stdout
    assert "pruned" in shown and "4 pruned" in shown, shown


def test_a_pruned_trial_runs_no_step_after_the_report_it_was_pruned_at(cli):
    """Its should_stop() after that report waits for the driver's verdict (as Optuna's
    in-process `report(); should_prune()`): it reports steps 0 and 1, not a third, though
    it looks for its stop only once a step (tests/test_verdict_wait.py). Steps of 0.5 s:
    it waits up to half of that, time enough for the driver on a loaded machine."""
    cli("submit", _spec(cli, name="v", xs=(0, 1, 2), steps=3, pause=0.5), check=0)
    _, trials = read_store(cli.runs, "v")
    assert [t.state for t in trials] == ["completed", "completed", "pruned"]
    assert trials[2].stop_request["step"] == 1
    assert _steps(cli, "v")[2] == [0, 1]


@pytest.mark.slow  # over 7 s in the quick tier (docs/testing.md#tiers)
def test_a_trial_that_ignores_stop_and_sigterm_is_killed_after_the_grace_period(cli):
    spec = _spec(cli, name="stub", xs=(0, 1, 2), steps=40, pause=0.1, stubborn="true")
    cli("submit", spec, check=0)
    _, trials = read_store(cli.runs, "stub")
    assert [t.state for t in trials] == ["completed", "completed", "pruned"]
    pruned = trials[2]
    assert pruned.exit_code in (137, 143)  # its shell took SIGTERM; the group got SIGKILL
    took = float(re.search(r"stopped ([\d.]+) s after", pruned.error).group(1))
    assert took < 3.0, pruned.error  # the ingest interval, the grace period, the next poll
    assert len(_steps(cli, "stub")[2]) < 30  # it did not run its 40 steps (4 s) to the end
    left = subprocess.run(["pgrep", "-f", str(cli.cwd / "curve.py")], capture_output=True)
    assert left.stdout == b"", left.stdout  # nothing of the stubborn trial runs on
    assert (cli.runs / "stub" / "trials" / "00002" / "STOP").exists()


@pytest.mark.slow  # long end-to-end run, 10 to 200 s (docs/testing.md#tiers)
def test_asha_decisions_are_the_same_when_the_driver_is_killed_repeatedly(cli):
    """Successive halving keeps each rung a trial passed in the study; the store keeps them
    and a resumed driver puts them back, so its decisions equal an uninterrupted run's."""
    xs = (3, 1, 4, 0, 5, 2, 6, 0.5, 7, 1.5)
    asha = "{type: asha, min_resource: 1, reduction_factor: 2}"
    cli("submit", _spec(cli, name="once", xs=xs, steps=6, pause=0.05, pruner=asha), check=0)
    kills = kill_driver_repeatedly(cli, _spec(cli, name="killed", xs=xs, steps=6, pause=0.2,
                                              pruner=asha), "killed", {}, kills=8,
                                   delays=(0.8, 2.0))
    assert sum("killed" in k for k in kills) >= 4, kills
    cli("resume", "killed", check=0)
    _, once = read_store(cli.runs, "once")
    _, killed = read_store(cli.runs, "killed")

    def decisions(trials):
        return [(t.state, (t.stop_request or {}).get("step"), t.pruner_attrs) for t in trials]

    assert decisions(killed) == decisions(once)
    assert {t.state for t in once} == {"completed", "pruned"}  # it did prune something
    assert all(t.attempt == 1 or t.state == "completed" for t in killed)


@pytest.mark.parametrize("pruner,problem", [
    ("{type: median, n_warmup_steps: -1}", "search.pruner.n_warmup_steps: expected an "
                                           "integer >= 0"),
    ("{type: hyperband}", "missing required key 'max_resource' for the hyperband pruner"),
    ("{type: asha, reduction_factor: 1}", "search.pruner.reduction_factor: expected an "
                                          "integer >= 2"),
    ("{type: percentile, percentile: 100}", "expected a percentile above 0 and below 100"),
    ("{type: threshold}", "needs 'lower', 'upper' or both"),
    ("{type: patient, patience: 2, wrapped: {type: patient, patience: 1}}",
     "expected a pruner to make patient"),
    ("{type: medain}", "unknown pruner 'medain'; expected one of"),
    ("{type: median, warmup: 3}", "unknown key 'warmup'"),
])
def test_bad_pruner_options_are_refused_with_file_line_and_key(cli, pruner, problem):
    spec = _spec(cli, name="bad", pruner=pruner)
    proc = cli("submit", spec, check=2)
    assert problem in proc.stderr, proc.stderr
    assert "bad.yaml:11: search.pruner" in proc.stderr, proc.stderr
    assert not (cli.runs / "bad").exists()  # nothing written


def test_a_pruner_needs_one_objective(cli):
    spec = cli.write_spec("""
        name: mo
        command: "true"
        search: {strategy: random, trials: 2, space: {x: {low: 0, high: 1}}, pruner: median}
        objective: [{metric: a}, {metric: b}]
    """)
    proc = cli("submit", spec, check=2)
    assert "search.pruner.type: early stopping judges one objective" in proc.stderr

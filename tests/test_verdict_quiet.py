"""The driver's verdict names the first step at which the pruner may stop the trial
(JUDGED "ATTEMPT STEP QUIET"): successive halving judges a trial only at its next rung, so
the trial's should_stop() need not wait for the verdict on the reports in between
(tests/test_verdict_wait.py has the trial's side). These run Optuna's real pruners: a promise
the pruner then breaks fails here, whatever Optuna version is installed."""

from __future__ import annotations

import random

import pytest

from hpsearch.pruning.policy import EarlyStopping
from hpsearch.pruning.stopper import JUDGED_FILE, Stopper
from hpsearch.spec.model import Objective, Pruner

PRUNERS = {
    "asha": Pruner("successive_halving", (("min_resource", 1), ("reduction_factor", 3))),
    "asha-rate": Pruner("successive_halving", (("min_resource", 2), ("reduction_factor", 2),
                                               ("min_early_stopping_rate", 1))),
    "hyperband": Pruner("hyperband", (("min_resource", 1), ("max_resource", 27),
                                      ("reduction_factor", 3))),
    "median": Pruner("median", (("n_startup_trials", 2), ("n_warmup_steps", 4))),
    "percentile": Pruner("percentile", (("percentile", 25.0), ("n_warmup_steps", 3))),
    "threshold": Pruner("threshold", (("upper", 1.5), ("n_warmup_steps", 5))),
    "wilcoxon": Pruner("wilcoxon", ()),
}


@pytest.mark.parametrize("name", sorted(PRUNERS))
def test_no_trial_is_stopped_below_the_step_its_verdict_promised(name):
    """40 trials of 27 steps, 8 at a time in a random order of reports, as a driver reading
    them as written: every stop comes at or past the last QUIET told to that trial."""
    rng = random.Random(name)
    policy = EarlyStopping(PRUNERS[name], Objective("loss", "minimize"), "quiet")
    quiet: dict[int, int] = {}
    steps: dict[int, int] = {}
    level = {t: rng.uniform(0, 2) for t in range(40)}
    running, waiting, skipped, stops = [], list(range(40)), 0, 0
    while running or waiting:
        while waiting and len(running) < 8:
            trial = waiting.pop(0)
            policy.add(trial)
            running.append(trial)
        trial = rng.choice(running)
        step = steps.get(trial, 0) + 1
        steps[trial] = step
        value = level[trial] + 1 / step + rng.gauss(0, 0.05)
        skipped += step < quiet.get(trial, 0)  # its should_stop() would not wait
        decision, _ = policy.observe(trial, [{"step": step, "loss": value}])
        if decision is not None:
            assert step >= quiet.get(trial, 0), (trial, step, quiet.get(trial))
            stops += 1
        elif step < 27:
            quiet[trial] = policy.quiet_until(trial, step)
            assert quiet[trial] > step
            continue
        running.remove(trial)
        policy.ended(trial, "pruned" if decision else "completed",
                     None if decision else value)
    assert stops > 0  # the pruner did stop trials, so the promises were put to the test
    if name != "wilcoxon":  # a pruner with no rule is waited for at every step
        assert skipped > 0


@pytest.mark.parametrize("pruner,attrs,step,expected", [
    ("asha", {}, 1, 2),                                    # no rung passed: any step
    ("asha", {"completed_rung_0": 0.5}, 1, 3),
    ("asha", {"completed_rung_0": 0.5, "completed_rung_1": 0.4}, 3, 9),
    ("asha-rate", {}, 1, 4),                               # 2 x 2 ** (1 + 0)
    ("hyperband", {"completed_rung_0": 0.5}, 2, 3),        # the bracket of rate 0, a bound
    ("median", {}, 1, 4),
    ("median", {}, 6, 7),
    ("wilcoxon", {}, 6, 7),
])
def test_the_first_step_a_pruner_may_stop_a_trial_at(pruner, attrs, step, expected):
    from hpsearch.pruning.pruners import first_stop_step
    assert first_stop_step(PRUNERS[pruner], step, attrs) == expected


def test_the_verdict_is_written_once_until_the_trial_reaches_that_step(tmp_path):
    """Between rungs the driver writes no JUDGED (the trial does not wait for one): fewer
    file writes for each report read."""
    policy_spec = PRUNERS["asha"]
    stopper = Stopper(policy_spec, Objective("loss", "minimize"), "quiet", store=None,
                      executor=None, search=None, on_event=print)  # type: ignore[arg-type]
    stopper.added(0)
    judged = tmp_path / JUDGED_FILE
    for step in (1, 2, 3, 4):
        assert stopper.policy.observe(0, [{"step": step, "loss": 1.0}]) == (None, None) \
            or step in (1, 3)
        judged.unlink(missing_ok=True)
        stopper.go_on(tmp_path, 0, 1, step)
        said = judged.read_text().split() if judged.exists() else None
        assert said == {1: ["1", "1", "3"], 2: None, 3: ["1", "3", "9"], 4: None}[step]
    stopper.go_on(tmp_path, 0, 2, 4)  # a new attempt is told again
    assert judged.read_text().split() == ["2", "4", "9"]

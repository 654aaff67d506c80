"""benchmarks/early_stopping.py: its specs validate, its accounting, and a minimal run."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"
sys.path.insert(0, str(BENCH))

import _es_measure as measure  # noqa: E402
import _es_problems as problems  # noqa: E402
import early_stopping  # noqa: E402

from hpsearch.driver import session  # noqa: E402


def test_every_problem_and_method_is_a_valid_spec(tmp_path):
    for name, direction in (("mfh6", "minimize"), ("digits", "maximize")):
        problem = problems.Problem(name, 27, 12, "y", direction, 0.01, 0.1)
        for method in problems.METHODS:
            job = problems.Job(problem, method, 1, "random", 2, tmp_path)
            spec_path = tmp_path / f"{name}-{method}.yaml"
            spec_path.write_text(yaml.safe_dump(problems.spec_dict(job, "/site")))
            spec, exists = session.new_experiment(spec_path, tmp_path, None, False)
            assert not exists
            assert (spec.search.pruner is None or spec.search.pruner.type == "none") == \
                (method == "none"), method


def _search(reports, maximize=False, steps=3):
    return measure.Search(steps, maximize, [measure.Report(t, tr, s, v)
                                            for t, tr, s, v in reports],
                          len(reports), 1.0, 2, {}, 1.0)


def test_resource_counts_every_step_and_the_target_only_at_full_fidelity():
    # trial 0 runs 3 steps to 0.5; trial 1 looks better at step 0 (0.1) but ends at 0.4
    search = _search([(1, 0, 0, 0.9), (2, 1, 0, 0.1), (3, 0, 1, 0.7), (4, 1, 1, 0.3),
                      (5, 0, 2, 0.5), (6, 1, 2, 0.4)])
    assert search.resource == 6
    assert search.best() == 0.4  # the step-0 value 0.1 is not a result
    assert search.resource_to(0.45) == 6 and search.resource_to(0.5) == 5
    assert math.isinf(search.resource_to(0.3))
    up = _search([(1, 0, 0, 0.2), (2, 0, 1, 0.8), (3, 0, 2, 0.9)], maximize=True)
    assert up.best() == 0.9 and up.resource_to(0.85) == 3
    assert math.isnan(_search([(1, 0, 0, 0.2)]).best())


def test_goal_needs_the_target_on_most_seeds_and_a_third_of_the_resource():
    def cell(ratio, to_target):
        return early_stopping.Cell([], ratio, [], to_target, [], [], [], {})
    cells = {("mfh6", "asha"): cell([0.3, 0.33, 0.2], [10, math.inf, 12]),
             ("mfh6", "asha-promo"): cell([0.2, 0.5, 0.4], [5, 6, 7])}
    asha, promo = early_stopping.goal_lines(["mfh6"], cells)
    assert asha.startswith("ok: ASHA (stop)") and "2/3 seeds" in asha
    assert promo.startswith("MISS: ASHA (promotion)") and "0.40 x" in promo


@pytest.mark.skipif(problems.generators_file() is None,
                    reason="mf-prior-bench (pip install --no-deps mf-prior-bench==1.10.0)")
@pytest.mark.slow  # 5.0 s in the quick tier (2026-11-30): over its 3 s rule
def test_minimal_run_prints_the_table_and_a_goal_line_per_asha_mode(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(BENCH / "early_stopping.py"), "--quick", "--mf-trials", "6",
         "--methods", "none", "asha-promo", "--dir", str(tmp_path)],
        capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines() if line.startswith("mfh3 ")]
    assert [row[1:3] for row in rows] == [["no", "pruning"], ["ASHA", "(promotion)"]]
    assert rows[0][3] == "54"  # 6 trials x 9 steps, none of them stopped
    goals = [line for line in proc.stdout.splitlines() if line.startswith(("ok: ", "MISS: "))]
    assert len(goals) == 2 and "not measured" in goals[0]  # ASHA (stop) was not run
    assert list(tmp_path.iterdir()) == []  # the runs dir is removed

"""benchmarks/pbt.py: every row is a valid spec at the same budget, and a minimal run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"
sys.path.insert(0, str(BENCH))

import _pbt_problems as problems  # noqa: E402
import pbt  # noqa: E402

from hpsearch.driver import session  # noqa: E402


def test_every_row_of_both_problems_is_a_valid_spec(tmp_path):
    for problem in (problems.toy(40, 4), problems.digits(16, 2)):
        for row in pbt.rows_of(problem.name, (2, 4), ray=False):
            name = f"{problem.name}-{row.label}".replace(" ", "-").replace(",", "")
            path = tmp_path / f"{name.replace('(', '').replace(')', '')}.yaml"
            path.write_text(yaml.safe_dump(problems.spec(problem, path.stem, row.method,
                                                         row.members, 0, list(row.enqueue))))
            spec, exists = session.new_experiment(path, tmp_path, None, False)
            assert not exists
            assert spec.search.strategy == ("random" if row.method == "asha" else row.method)


def test_asha_gets_the_trials_of_the_budget():
    toy = problems.toy(40, 4)
    assert toy.asha_rungs() == [5, 10, 20, 40]
    assert toy.asha_cost() == 5 + 5 / 2 + 10 / 4 + 20 / 8  # 12.5 steps a trial
    assert toy.asha_trials(4) == round(160 / 12.5 / problems.ASYNC_SPEND)
    assert problems.digits(16, 2).asha_rungs() == [2, 4, 8, 16]


@pytest.mark.slow
def test_minimal_run_prints_every_toy_row_and_its_goal_lines():
    proc = subprocess.run(
        [sys.executable, str(BENCH / "pbt.py"), "--problems", "toy", "--no-ray", "--seeds", "1",
         "--steps", "4", "--interval", "2"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = [line.split(" | ")[1] for line in proc.stdout.splitlines()
            if line.startswith("| toy |")]
    assert rows == [row.label for row in pbt.rows_of("toy", (2, 4), ray=False)]
    trained = {line.split(" | ")[1]: line.split(" | ")[4] for line in proc.stdout.splitlines()
               if line.startswith("| toy |")}
    assert trained["random, 4 trials"] == "16"  # 4 trials x 4 steps
    goals = [line for line in proc.stdout.splitlines() if line.startswith(("ok: ", "MISS: "))]
    assert len(goals) == 3  # beats random at 2 and 4, the paper's start
    assert "not measured: Ray Tune" in proc.stdout

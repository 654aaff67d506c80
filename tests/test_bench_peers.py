"""benchmarks/peers.py: the curves are deterministic, and a tiny run of the hpsearch and
Optuna rows prints every column and the goal lines (Ray Tune and Syne Tune not needed)."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"
sys.path.insert(0, str(BENCH))

import _curves  # noqa: E402


def test_curves_fall_to_their_final_value_and_the_log_is_read_back(tmp_path):
    w = _curves.Workload(9, 3, 0.0)
    for i in range(9):
        values = [_curves.loss(i, s, 3) for s in range(3)]
        assert values == sorted(values, reverse=True)
        assert math.isclose(values[-1], _curves.CURVES[i][0])
    log = str(tmp_path / "steps.log")
    best = min(range(9), key=lambda i: _curves.loss(i, 2, 3))
    _curves.run_steps(w, best, 0, 3, log, lambda step, v: None)
    stats = _curves.read_log(log, w, 0.0, w.best_final() + 0.02)
    assert (stats.steps_run, stats.processes) == (3, 1)
    assert stats.best == w.best_final()
    assert stats.to_target < math.inf


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_tiny_run_prints_every_row_and_the_goal_lines():
    done = subprocess.run([sys.executable, str(BENCH / "peers.py"), "--tiny", "--tools",
                           "hpsearch", "optuna"], capture_output=True, text=True, timeout=55,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    rows = [ln for ln in lines if ln.startswith(("hpsearch ", "optuna "))]
    assert len(rows) == 4, done.stdout
    for row in rows:
        assert "not run" not in row, row
        fields = row.split()
        # makespan, steps run, processes, best value, to target: numbers (to target may be
        # "never" when a mode does not train the best configuration in full)
        numbers = [f for f in fields if f.replace(".", "", 1).isdigit() or f == "never"]
        assert len(numbers) >= 5, row
    goals = [ln for ln in lines if ln.startswith(("ok: ", "MISS: "))]
    assert len(goals) == 2, done.stdout
    assert any("time to target" in g for g in goals)
    assert any("within 10% of in-process Optuna's makespan" in g or
               "within 10% of in-process Optuna's" in g for g in goals)

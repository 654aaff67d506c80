"""benchmarks/search_quality.py: the test functions' optima and a minimal run through hpsearch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"
sys.path.insert(0, str(BENCH))

import _objectives as objectives  # noqa: E402


def test_handwritten_functions_have_zero_regret_at_their_known_minimizers():
    for x in objectives.BRANIN_MINIMIZERS:
        assert objectives.evaluate("branin", list(x)) == pytest.approx(objectives.BRANIN_OPT,
                                                                       abs=1e-9)
    h6 = objectives.evaluate("hartmann6", list(objectives.HARTMANN6_MINIMIZER))
    assert h6 == pytest.approx(objectives.HARTMANN6_OPT, abs=1e-9)
    assert h6 >= objectives.HARTMANN6_OPT  # no negative regret


def test_bbob_functions_reach_their_optimum_at_the_optimizer():
    ioh = pytest.importorskip("ioh", reason="the `bench` extra (pip install -e .[bench])")
    for name, (fid, dim) in objectives.BBOB.items():
        problem = ioh.get_problem(fid, instance=objectives.BBOB_INSTANCE, dimension=dim,
                                  problem_class=ioh.ProblemClass.BBOB)
        fn = objectives.describe(name)
        assert fn.dim == dim and fn.f_opt == problem.optimum.y
        at_opt = objectives.evaluate(name, [float(v) for v in problem.optimum.x])
        assert at_opt == pytest.approx(fn.f_opt, abs=1e-8)


@pytest.mark.slow  # long end-to-end run, 10 to 200 s (docs/testing.md#tiers)
def test_minimal_run_prints_the_table_and_the_goal_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(BENCH / "search_quality.py"), "--quick", "--seeds", "2",
         "--trials", "5", "--methods", "random", "tpe", "--functions", "branin", "hartmann6",
         "--dir", str(tmp_path)],
        capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert any(line.startswith("function") and "/random" in line for line in lines)
    rows = [line.split() for line in lines if line.split()[:1] in (["branin"], ["hartmann6"])]
    assert [(row[0], row[1]) for row in rows] == [
        ("branin", "random"), ("branin", "tpe"), ("hartmann6", "random"), ("hartmann6", "tpe")]
    assert "20 trials" not in proc.stdout and "8 searches, 40 trials" in proc.stdout
    assert sum(line.startswith(("ok: ", "MISS: ")) for line in lines) == 1
    assert "TPE reaches the Hartmann6 target" in lines[-1]
    assert list(tmp_path.iterdir()) == []  # the runs dir is removed

"""benchmarks/peers_cluster.py --kill on the emulated cluster: a node crash (set DOWN, its
jobs' processes SIGKILLed) and the orchestrator SIGKILLed, mid-run, in tiny runs. The rows
print what each tool lost and ran again; hpsearch loses nothing either way (the pilot's
trials run again from their checkpoints; `hpsearch resume` adopts the running pilot), and
the crashed node is back in service afterwards. A slurm_clock test: it takes a node down."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent.parent / "benchmarks"
pytestmark = pytest.mark.slurm_clock
# makespan, steps, processes, jobs, best, to target, lost, steps again/configurations
COLUMNS = re.compile(r" (\d+\.\d) +(\d+) +(\d+) +(\d+) +(\d\.\d{4}) +(\d+\.\d|never) +(\d+) "
                     r"+(\d+)/(\d+)  \S")


def _run(slurm_cluster, kill: str, *rows: str) -> dict[str, tuple[str, ...]]:
    proc = subprocess.run([sys.executable, str(BENCH / "peers_cluster.py"), "--tiny", "--kill",
                           kill, "--rows", *rows], capture_output=True, text=True,
                          env=slurm_cluster.env, timeout=600, cwd=BENCH.parent)
    assert proc.returncode == 0, proc.stderr
    found = {line.split()[0]: COLUMNS.search(line) for line in proc.stdout.splitlines()
             if line.startswith(("hpsearch ", "optuna+submitit "))}
    assert all(found.values()) and len(found) == len(rows), proc.stdout
    assert f"the {kill} killed once" in proc.stdout, proc.stdout
    return {tool: match.groups() for tool, match in found.items() if match}


def test_a_node_crash_mid_run_loses_no_hpsearch_trial_and_the_node_comes_back(slurm_cluster):
    rows = _run(slurm_cluster, "node", "pilots-stop", "optuna-submitit")
    _, steps, _, jobs, _, _, lost, _, _ = rows["hpsearch"]
    assert lost == "0" and int(steps) >= 9, rows
    assert int(jobs) >= 2, rows  # the crashed pilot, and one that ran its trials again
    assert "optuna+submitit" in rows
    states = slurm_cluster.run("sinfo", "-h", "-o", "%T").stdout.split()
    assert states and not any("down" in s or "drain" in s for s in states), states


def test_the_orchestrator_killed_mid_run_and_resumed_loses_and_repeats_nothing(slurm_cluster):
    rows = _run(slurm_cluster, "orchestrator", "pilots-stop")
    _, steps, _, jobs, _, _, lost, again, _ = rows["hpsearch"]
    assert (lost, again, jobs) == ("0", "0", "1") and int(steps) >= 9, rows

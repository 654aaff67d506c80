"""benchmarks/peers_cluster.py on the emulated cluster: a tiny run of hpsearch's pilots row
and of the Optuna + submitit recipe (benchmarks/_optuna_submitit.py) prints both rows with
every column and a goal line; each ran all 9 configurations' first steps, the recipe in its
8 worker jobs (a worker that started late may run none)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent.parent / "benchmarks"


def test_a_tiny_run_of_pilots_and_optuna_with_submitit_prints_rows_and_a_goal(slurm_cluster):
    proc = subprocess.run([sys.executable, str(BENCH / "peers_cluster.py"), "--tiny", "--rows",
                           "pilots-stop", "optuna-submitit"], capture_output=True, text=True,
                          env=slurm_cluster.env, timeout=600, cwd=BENCH.parent)
    assert proc.returncode == 0, proc.stderr
    # makespan, steps, processes, jobs, best, to target, versions
    columns = re.compile(r" (\d+\.\d) +(\d+) +(\d+) +(\d+) +(\d\.\d{4}) +(\d+\.\d|never) +(\S.*)$")
    rows = {line.split()[0]: columns.search(line) for line in proc.stdout.splitlines()
            if line.startswith(("hpsearch ", "optuna+submitit "))}
    assert set(rows) == {"hpsearch", "optuna+submitit"} and all(rows.values()), proc.stdout
    _, steps, _, jobs, _, _, _ = rows["hpsearch"].groups()
    assert int(steps) >= 9 and jobs == "1", proc.stdout  # one pilot ran every trial
    _, steps, procs, jobs, _, _, versions = rows["optuna+submitit"].groups()
    # 8 worker jobs; a worker that started after the others took every trial runs none
    assert int(steps) >= 9 and jobs == "8" and 1 <= int(procs) <= 8, proc.stdout
    assert "submitit" in versions, proc.stdout
    assert any(line.startswith(("ok: on the cluster", "MISS: on the cluster"))
               for line in proc.stdout.splitlines()), proc.stdout

"""benchmarks/brokerage.py --quick on the emulated cluster: its mechanics, not its timings.
Every row of the three scenarios prints and parses, every row's trials all completed in one
attempt each, and each scenario prints its goal lines. With the second cluster's controller
stopped midway, no trial launched meanwhile ran there (hpsearch.executors.sites skips a site
whose Slurm does not answer and moves what it held there), and with scouts no trial ended at
the tighter limit. A slurm_clock test: it stops hpsearch2's slurmctld for a few seconds and
holds node1-4 of the first cluster with a long job while the scouts rows run."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent.parent / "benchmarks"
pytestmark = pytest.mark.slurm_clock
ROW = re.compile(r"^(?P<label>\S.*?) +(?P<trials>\d+) +(?P<done>\d+) +(?P<attempts>\d+) "
                 r"+(?P<makespan>\d+) +(?P<wait>\d+\.\d)  (?P<where>\S.*)$")
LABELS = ["sites left+right", "sites bind early", "left alone", "right alone",
          "plain --partition=left,right", "clusters left+hpsearch2", "scouts (auto 00:30:00)",
          "no scouts (00:30:00)"]
GOALS = {"busy": 2, "clusters": 3, "scouts": 2}


def _sections(stdout: str) -> dict[str, list[str]]:
    """The output's lines under each scenario's heading (`busy: ...`)."""
    found: dict[str, list[str]] = {}
    current = None
    for line in stdout.splitlines():
        head = line.split(":", 1)[0]
        if head in GOALS:
            current = head
            found[current] = []
        elif current:
            found[current].append(line)
    return found


@pytest.mark.timeout(300)
def test_a_quick_run_prints_every_row_complete_and_every_goal_line(slurm_cluster):
    proc = subprocess.run([sys.executable, str(BENCH / "brokerage.py"), "--quick"],
                          capture_output=True, text=True, env=slurm_cluster.env, timeout=280,
                          cwd=BENCH.parent)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sections = _sections(proc.stdout)
    assert list(sections) == list(GOALS), proc.stdout
    rows = {m["label"]: m for line in proc.stdout.splitlines() if (m := ROW.match(line))}
    assert list(rows) == LABELS, proc.stdout
    for label, row in rows.items():
        assert row["done"] == row["attempts"] == row["trials"], (label, proc.stdout)
    assert set(rows["sites left+right"]["where"].split(";")[0].replace(",", "").split()[::2]) <= {
        "left", "right"}, proc.stdout
    for name, lines in sections.items():
        goals = [line for line in lines if line.startswith(("ok: ", "MISS: "))]
        assert len(goals) == GOALS[name], (name, proc.stdout)
    clusters = "\n".join(sections["clusters"])
    assert "ok: nothing lost: " in clusters, clusters
    assert re.search(r"went there first \(moved at once\) and 0 ran there", clusters), clusters
    assert "ok: no trial lost to the tighter limit: 0 ended TIMEOUT" in proc.stdout, proc.stdout

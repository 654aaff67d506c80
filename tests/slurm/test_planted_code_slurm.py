"""Code planted in the folder `submit` ran from never runs as the owner on the cluster (issue
37, item 1): a pilot search submitted with `--driver-job` from a folder holding
`hpsearch/__init__.py`, `uuid.py`, `runpy.py` and `json.py` that write a marker when
imported. Slurm starts the driver job in the spec's workdir (its --chdir) and the pilot in
the folder sbatch ran from, both that folder; before the fix both started with
`python -m`, which put it first on sys.path. The user runs the `hpsearch` console script,
as on a login node (its own folder, bin/, is first on its sys.path)."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

from tests.helpers import read_store
from tests.test_planted_code import plant

RUN = uuid.uuid4().hex[:6]
SPEC = """
name: {name}
command: 'echo "@hpsearch step=0 loss={{x}}"'
search: {{strategy: grid, parallel: 2, space: {{x: {{choices: [1, 2, 3]}}}}}}
objective: {{metric: loss}}
resources: {{nodes: 1, time: "00:02:00"}}
executor:
  type: slurm
  poll_interval: 0.5
  pilots: {{nodes: 1, time: "00:05:00", max: 1, slots_per_node: 2, idle_timeout: 5}}
"""


def test_a_pilot_search_in_a_driver_job_imports_nothing_from_the_submit_folder(
        cli, slurm_cluster):
    name = f"planted-{RUN}"
    spec = cli.write_spec(SPEC.format(name=name))
    marker = plant(cli.cwd)
    hpsearch = Path(sys.executable).parent / "hpsearch"
    env = {**cli.env, **slurm_cluster.env}
    proc = subprocess.run([str(hpsearch), "submit", str(spec), "--driver-job", "--wait"],
                          cwd=cli.cwd, env=env, capture_output=True, text=True, timeout=280)
    assert not marker.exists(), marker.read_text()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    experiment, trials = read_store(cli.runs, name)
    assert experiment.status == "completed"
    assert sorted(t.objective_values[0] for t in trials) == [1, 2, 3]
    jobs = slurm_cluster.run("sacct", "-X", "--noheader", "--parsable2", "-S", "now-1hour",
                             "-o", "JobName,WorkDir").stdout
    # both kinds of job ran, and in the planted folder
    started = [line for line in jobs.splitlines() if line.endswith(f"|{cli.cwd}")]
    assert any(line.startswith("hps-driver.") for line in started), jobs
    assert any(".pilot." in line for line in started), jobs

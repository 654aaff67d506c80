"""A trial in a charliecloud image, run inside a pilot on the real emulated cluster: the pilot
reuses the per-job path's container wrapping, on its own node and, through `srun --overlap`,
on the other node of its allocation."""

from __future__ import annotations

import time
import uuid

from hpsearch.slurm.hostlist import expand
from tests.helpers import job_prefix, read_store
from tests.slurm.test_executor import CH_TRIAL, ch_image
from tests.slurm.test_pilots import _env, _pilot_jobs

RUN = uuid.uuid4().hex[:6]

SPEC = """
name: {name}
executor:
  type: slurm
  poll_interval: 1s
  pilots: {{nodes: 2, time: "00:05:00", max: 1, idle_timeout: 10, heartbeat: 1}}
container: {{runtime: charliecloud, image: "{image}", binds: {binds}}}
resources: {{nodes: 1, time: "00:02:00"}}
command: "python trial.py # {{x}}"
search: {{strategy: grid, parallel: 2, space: {{x: {{choices: [0.25, 0.75]}}}}}}
objective: {{metric: loss}}
"""

# holds its slot a moment, so the two trials run at once, one on each node of the pilot
TRIAL = CH_TRIAL + "import time\ntime.sleep(2)\n"


def _pilot_nodes(slurm_cluster, job_id: str, timeout: float = 60) -> str:
    """The pilot job's node list, once sacct has its final record (for a few seconds after
    it ends, sacct may show it as a job named `allocation` on one node)."""
    deadline = time.monotonic() + timeout
    while True:
        (record,) = slurm_cluster.wait_for_accounting(job_id, "State,NodeList,JobName")
        if record[2].endswith(".pilot.1"):
            return record[1]
        assert time.monotonic() < deadline, record
        time.sleep(0.5)


def test_trial_runs_inside_a_charliecloud_image_in_a_pilot(cli, slurm_cluster, tmp_path):
    """2 trials in one 2-node pilot (1 slot a node): each ran inside the image (ch-run sets
    CH_RUNNING; the host's /etc is not there), on the node the store says, one on each of
    the pilot's nodes, and the pilot's job is the only Slurm job of the search."""
    image, binds = ch_image(tmp_path)
    (cli.cwd / "trial.py").write_text(TRIAL)
    name = f"pl-ch-{RUN}"
    spec = cli.write_spec(SPEC.format(name=name, image=image, binds=list(binds)), "ch.yaml")
    proc = cli("submit", spec, env=_env(slurm_cluster), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _, trials = read_store(cli.runs, name)
    assert len(trials) == 2
    (pilot_job,) = {t.job_id for t in trials}  # both in the one pilot (max: 1)
    pilot_nodes = _pilot_nodes(slurm_cluster, pilot_job)
    # the pilot's job is the search's only job: no trial was a job of its own
    assert list(_pilot_jobs(slurm_cluster, job_prefix(cli.runs, name), {pilot_job})) \
        == [pilot_job]
    for t in trials:
        assert t.state == "completed" and t.objective_values == [t.params["x"]]
        out = (cli.runs / name / "trials" / f"{t.id:05d}" / "stdout.log").read_text()
        assert f"inside True False {t.nodes}" in out, out
    assert sorted(t.nodes for t in trials) == sorted(expand(pilot_nodes))

"""A pilot's node agents on the real emulated cluster (hpsearch.pilot.agents, issue 42 item 2):
the trials on a pilot's other node start through one long-lived `srun --overlap` step there,
not a step launch of their own each; `pilots.agents: false` keeps a step per trial.

Without a cluster: tests/test_node_agent.py. A trial on an agent stopped within its grace,
its checkpoint signal, and a node whose slurmd dies: tests/slurm/test_pilot_remote_stop.py
and tests/slurm/test_pilots.py, which run through the agents as they now are."""

from __future__ import annotations

import time
import uuid

from hpsearch.pilot.agents import STEP_NAME
from hpsearch.slurm.hostlist import expand
from tests.helpers import job_prefix, read_store
from tests.slurm.test_pilots import _attempts, _pilot_jobs

RUN = uuid.uuid4().hex[:6]

SPEC = """
name: {name}
command: 'echo "node=$SLURMD_NODENAME"; sleep 1.5; echo "@hpsearch step=0 loss={{x}}"'
search:
  strategy: grid
  parallel: 4
  space:
    x: {{choices: {xs}}}
objective: {{metric: loss}}
resources: {{nodes: 1, time: "00:02:00"}}
executor:
  type: slurm
  poll_interval: 1s
  pilots: {{nodes: 2, time: "00:10:00", max: 1, slots_per_node: 2, idle_timeout: 10,
            heartbeat: 1, agents: {agents}}}
"""


def _steps(slurm_cluster, job_id: str, want) -> list[str]:
    """The names of the pilot job's steps in accounting, once `want(names)` holds (steps
    reach slurmdbd a moment after they end), or after 30 s."""
    deadline = time.monotonic() + 30
    while True:
        out = slurm_cluster.run("sacct", "--parsable2", "--noheader", "-j", job_id,
                                "-o", "JobID,JobName").stdout
        names = [line.split("|")[1] for line in out.splitlines()
                 if "." in line.split("|")[0] and line.split("|")[0].split(".")[1].isdigit()]
        if want(names) or time.monotonic() > deadline:
            return names


def _search(cli, slurm_cluster, agents: str) -> tuple[str, int]:
    """12 trials of 1.5 s in one 2-node pilot of 2 slots a node: its job id, and how many
    trials ran on its other node (not its batch host, the first)."""
    name = f"agents-{agents}-{RUN}"
    spec = cli.write_spec(SPEC.format(name=name, xs=list(range(12)), agents=agents))
    proc = cli("submit", spec, env=slurm_cluster.env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _, trials = read_store(cli.runs, name)
    assert len(trials) == 12 and all(t.state == "completed" for t in trials), proc.stdout
    attempts = _attempts(cli.runs, name)
    assert all(len(a) == 1 for a in attempts.values()), attempts  # none run again
    pilots = _pilot_jobs(slurm_cluster, job_prefix(cli.runs, name), {t.job_id for t in trials})
    assert len(pilots) == 1
    (job_id,) = pilots
    per_node: dict[str, int] = {}
    for t in trials:
        out = (cli.runs / name / "trials" / f"{t.id:05d}" / "stdout.log").read_text()
        node = out.split("node=")[1].split()[0]
        assert node == t.nodes  # the pilot's word on where it ran is where it ran
        per_node[node] = per_node.get(node, 0) + 1
    assert len(per_node) == 2, per_node
    return job_id, per_node.get(expand(pilots[job_id])[1], 0)


def test_trials_on_a_pilots_other_node_start_through_its_agent_not_a_step_each(
        cli, slurm_cluster):
    """With agents (the default): one agent step on the pilot's other node, and no trial
    there started as a step of its own: the first wave waited in the agent's stdin while
    its Python started (before, those started as steps). With `agents: false`: a step per
    trial there, no agent."""
    job_id, other = _search(cli, slurm_cluster, "true")
    assert other >= 4, other  # about half of them
    names = _steps(slurm_cluster, job_id, lambda n: STEP_NAME in n)
    assert names.count(STEP_NAME) == 1, names
    own_steps = [n for n in names if n.startswith("hpsearch-trial-")]
    assert own_steps == [], names

    job_id, other = _search(cli, slurm_cluster, "false")
    names = _steps(slurm_cluster, job_id,
                   lambda n: sum(x.startswith("hpsearch-trial-") for x in n) >= other)
    assert STEP_NAME not in names, names
    assert sum(n.startswith("hpsearch-trial-") for n in names) == other, (names, other)

"""Population-based training on the emulated Slurm cluster (issue 41 item 4): each segment of
a member a Slurm job of its own, or a slot of a pilot; the exploits' checkpoints taken on the
shared filesystem, and every member's model history the schedule the store keeps."""

from __future__ import annotations

import re
import shutil
import sys
import uuid

import pytest

from hpsearch.search.pbt_schedule import lived
from tests.conftest import EXAMPLES
from tests.helpers import read_store
from tests.pbt_segments import WARM, attempt_logs, check_segments, digits_spec
from tests.slurm.test_pruning_slurm import _attempt_jobs
from tests.test_pbt import TOY, _history, _replayed

RUN = uuid.uuid4().hex[:6]

SPEC = """
name: {name}
command: "{python} train.py"
search:
  strategy: pbt
  population: 4
  parallel: 2
  seed: 5
  perturbation_interval: 4
  max_resource: 12
  space:
    h0: {{type: float, low: 0.0, high: 1.0}}
    h1: {{type: float, low: 0.0, high: 1.0}}
objective: {{metric: Q, direction: maximize}}
resources: {{nodes: 1, time: "00:02:00"}}
executor:
  type: slurm
  poll_interval: 1s
{pilots}
"""
PILOTS = ("  pilots: {nodes: 1, time: '00:05:00', max: 1, slots_per_node: 2, idle_timeout: 10,"
          " heartbeat: 1}")


@pytest.mark.parametrize("mode", ["jobs", "pilots"])
def test_pbt_members_run_their_segments_as_jobs_or_pilot_slots(cli, slurm_cluster, mode):
    name = f"pbt-{mode}-{RUN}"
    shutil.copy(TOY, cli.cwd / "train.py")
    spec = cli.write_spec(SPEC.format(name=name, python=sys.executable,
                                      pilots=PILOTS if mode == "pilots" else ""))
    proc = cli("submit", spec, "--no-tui", env=slurm_cluster.env, check=0, timeout=300)
    exp, trials = read_store(cli.runs, name)
    assert [t.state for t in trials] == ["completed"] * 4, proc.stdout
    history = _history(cli.runs, name)
    assert any(lineage for _, lineage, _ in history.values()), proc.stdout
    schedules = {tid: h[0] for tid, h in history.items()}
    for t in trials:  # each model's history is the schedule kept, to the last bit
        assert _replayed(lived(schedules, t.id), 12) == t.objective_values[0], t.id
        assert [s for s, _ in history[t.id][2]][-1] == 11
    attempts = sum(t.attempt for t in trials)
    assert attempts >= 12, attempts  # 3 segments a member, more after a donor behind
    jobs = {a for t in trials for a in _attempt_jobs(cli.runs, name, t.id)}
    if mode == "pilots":
        assert len(jobs) == 1, jobs  # one pilot ran every segment
    else:
        assert len(jobs) == attempts, jobs  # each segment its own Slurm job


def test_a_two_node_member_s_ranks_train_each_segment_with_its_scheduled_lr(cli, slurm_cluster):
    """The digits DDP example under pbt, each member 2 ranks on 2 nodes (launcher srun, gloo
    on CPU) in a 2-node pilot with warm servers: every rank of a segment loads the same
    checkpoint, the donor's copy after an exploit, and trains with the lr the store's
    schedule has for it. (A Slurm job a segment took 151 s on the loaded machine: each
    segment's 4 ranks import torch, 13-20 s each; in the pilot only the first segment does.)"""
    name = f"pbt-srun-{RUN}"
    shutil.copy(EXAMPLES / "digits_ddp" / "train.py", cli.cwd / "train.py")
    spec = digits_spec(name, "srun", "{nodes: 2, tasks_per_node: 1, cpus_per_task: 1, "
                       "time: '00:02:00'}", f"{{type: slurm, poll_interval: 1s, warm: {WARM}, "
                       "pilots: {nodes: 2, time: '00:05:00', max: 1, slots_per_node: 2, "
                       "idle_timeout: 5, heartbeat: 0.5}}")
    proc = cli("submit", cli.write_spec(spec), "--no-tui", env=slurm_cluster.env, check=0,
               timeout=300)
    trials = check_segments(cli.runs, name, ranks=2, output=proc.stdout)
    jobs = {a for t in trials for a in _attempt_jobs(cli.runs, name, t.id)}
    assert len(jobs) == 1, jobs  # one 2-node pilot ran every segment, warm after its first
    for t in trials:  # each segment's two ranks on its two nodes
        for log in attempt_logs(cli.runs / name / "trials" / f"{t.id:05d}"):
            nodes = re.findall(r"^rank \d/2 local 0 on (\S+) ", log.read_text(), re.M)
            assert sorted(nodes) == ["node1", "node2"], (log, nodes)

"""GPU slots in a multi-node pilot (issue 26, item 1): each trial sees its own GPU, also on
the pilot's other nodes, where it runs as an `srun --overlap` step. Slurm gives such a step
all of the job's GPUs on its node and slurmstepd sets CUDA_VISIBLE_DEVICES to them: before,
every trial on the second node saw both ('0,1').

The test cluster's GPUs are placeholders (2 per node, character devices with /dev/null's
numbers; no CUDA here): what is checked is what a trial is told, CUDA_VISIBLE_DEVICES, per
node and per slot. Real GPUs: benchmarks/gpu/ on the lent GPU machine."""

from __future__ import annotations

import uuid
from collections import defaultdict

from tests.helpers import read_store

RUN = uuid.uuid4().hex[:6]

SPEC = """
name: {name}
command: >-
  echo "node=$SLURMD_NODENAME gpus=$CUDA_VISIBLE_DEVICES began=$(date +%s.%N)"; sleep 4;
  echo "ended=$(date +%s.%N)"; echo "@hpsearch step=0 loss={{x}}"
search:
  strategy: grid
  parallel: 4
  space:
    x: {{choices: [1, 2, 3, 4]}}
objective: {{metric: loss}}
resources: {{nodes: 1, gpus_per_node: 1, time: "00:02:00"}}
executor:
  type: slurm
  poll_interval: 0.5
  pilots: {{nodes: 2, time: "00:05:00", max: 1, slots_per_node: 2, idle_timeout: 5,
            heartbeat: 0.5}}
"""


def test_trials_in_a_two_node_pilot_each_see_their_own_gpu_on_every_node(cli, slurm_cluster):
    name = f"pl-gpu-{RUN}"
    spec = cli.write_spec(SPEC.format(name=name))
    cli("submit", spec, env=slurm_cluster.env, check=0, timeout=300)
    _, trials = read_store(cli.runs, name)
    assert [t.state for t in trials] == ["completed"] * 4
    seen = {}
    for t in trials:
        out = (cli.runs / name / "trials" / f"{t.id:05d}" / "stdout.log").read_text()
        words = dict(w.split("=", 1) for line in out.splitlines() for w in line.split()
                     if "=" in w and not w.startswith("@"))
        seen[t.id] = (words["node"], words["gpus"], float(words["began"]),
                      float(words["ended"]))
    by_node = defaultdict(list)
    for node, gpus, began, ended in seen.values():
        assert gpus in ("0", "1"), seen  # one GPU each, on every node
        by_node[node].append((gpus, began, ended))
    assert len(by_node) == 2, seen  # the pilot's two nodes both ran trials
    for runs in by_node.values():  # two at a time on a node, never on one GPU
        pairs = [(a, b) for i, a in enumerate(runs) for b in runs[i + 1:]
                 if a[1] < b[2] and b[1] < a[2]]
        assert pairs and all(a[0] != b[0] for a, b in pairs), seen


MULTI = """
name: {name}
command: >-
  echo "node=$SLURMD_NODENAME rank=$RANK gpus=$CUDA_VISIBLE_DEVICES began=$(date +%s.%N)";
  sleep 4; echo "ended=$(date +%s.%N)"; echo "@hpsearch step=0 loss={{x}}"
search:
  strategy: grid
  parallel: 2
  space:
    x: {{choices: [1, 2]}}
objective: {{metric: loss}}
launcher: srun
resources: {{nodes: 2, tasks_per_node: 1, gpus_per_node: 1, time: "00:02:00"}}
executor:
  type: slurm
  poll_interval: 0.5
  pilots: {{nodes: 2, time: "00:05:00", max: 1, slots_per_node: 2, idle_timeout: 5,
            heartbeat: 0.5}}
"""


def test_two_node_trials_in_a_pilot_get_their_slots_gpu_in_their_own_srun_steps(
        cli, slurm_cluster):
    """Two 2-node trials side by side in one 2-node pilot, ranks started by the trial's own
    srun (launcher srun): on each node, each rank sees one GPU, and the two trials' ranks
    on a node see different ones (srun's --gpu-bind from SLURM_GPU_BIND; before, every
    rank saw both GPUs)."""
    name = f"pl-gpu2-{RUN}"
    spec = cli.write_spec(MULTI.format(name=name))
    cli("submit", spec, env=slurm_cluster.env, check=0, timeout=300)
    _, trials = read_store(cli.runs, name)
    assert [t.state for t in trials] == ["completed"] * 2
    ranks = defaultdict(dict)  # node -> trial -> gpus
    for t in trials:
        out = (cli.runs / name / "trials" / f"{t.id:05d}" / "stdout.log").read_text()
        for line in out.splitlines():
            words = dict(w.split("=", 1) for w in line.split() if "=" in w)
            if "rank" in words:
                ranks[words["node"]][t.id] = words["gpus"]
    assert sorted(ranks) == ["node1", "node2"] or len(ranks) == 2, ranks
    for node, seen in ranks.items():
        assert sorted(seen) == [0, 1], ranks  # both trials had a rank on every node
        assert sorted(seen.values()) == ["0", "1"], ranks  # one GPU each, not the same

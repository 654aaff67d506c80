"""Leaf-switch placement on the real emulated clusters (issue 4).

Both clusters have 8 nodes under 4 leaf switches (leafK holds node(2K-1) and node(2K)). One
runs the tree topology plugin (hpsearch asks Slurm for --switches=1@max_wait); the other has
TopologyPlugin=topology/none and hpsearch names the nodes itself from the topology file.
Blocker jobs hold one node in each of leaf1..leaf3, so the only leaf with two free nodes is
leaf4, while five single free nodes would let a naive scheduler span leaves.
"""

from __future__ import annotations

import time
import uuid

import pytest

from hpsearch.placement.topology import load_topology
from hpsearch.slurm.hostlist import expand
from tests.helpers import read_store

RUN = uuid.uuid4().hex[:6]
# Per search: 2 at a time, so with the blockers the leaf-switch policy holds one back each
# time (only leaf4 has two free nodes). 10 took 37 s and 26 s of CI's run 3 for the two
# two-node tests; 4 show the same.
TRIALS = 4

SPEC = """
name: {name}
command: 'sleep 1; echo "@hpsearch step=0 loss={{x}}"'
search:
  strategy: random
  trials: {trials}
  parallel: 2
  seed: 3
  space:
    x: {{low: 0.0, high: 1.0}}
objective: {{metric: loss}}
resources: {{nodes: {nodes}, time: "00:05:00"}}
executor: {{type: slurm, poll_interval: 0.5, array: false}}
placement: {placement}
"""


def _search(cli, cluster, label: str, placement: str, nodes: int = 2, trials: int = TRIALS):
    """Runs a search on `cluster`; returns its trials (all must complete)."""
    name = f"{label}-{RUN}"
    spec = cli.write_spec(SPEC.format(name=name, trials=trials, nodes=nodes,
                                      placement=placement), f"{name}.yaml")
    cli("submit", spec, env=cluster.env, check=0, timeout=600)
    _, trials_ = read_store(cli.runs, name)
    assert [t.state for t in trials_] == ["completed"] * trials
    return trials_


def _sacct_nodes(cluster, job_id: str) -> list[str]:
    """The job's nodes from sacct, once its NodeList has all AllocNodes of them (while the
    nodes finish the job, sacct lists only those still completing)."""
    deadline = time.monotonic() + 30
    while True:
        state, alloc, nodelist = cluster.wait_for_accounting(
            job_id, "State,AllocNodes,NodeList")[0]
        nodes = expand(nodelist)
        if len(nodes) == int(alloc) or time.monotonic() > deadline:
            return nodes
        time.sleep(0.5)


def _leaves_of(cluster, trials) -> list[set[str]]:
    """Per trial, the leaves its job ran under, from sacct's NodeList and the topology."""
    topology = load_topology(cluster.state_dir / "etc" / "topology.conf")
    spans = []
    for trial in trials:
        nodes = _sacct_nodes(cluster, trial.job_id)
        assert len(nodes) == 2, (trial.id, nodes)
        leaves = topology.leaves_spanned(nodes)
        assert trial.leaves == ",".join(sorted(leaves)), "store's leaves differ from sacct's"
        spans.append(leaves)
    return spans


@pytest.fixture
def blockers(request):
    """Exclusive jobs on node1, node3 and node5, cancelled after the test."""
    cluster = request.getfixturevalue(request.param)
    ids = [cluster.sbatch("--exclusive", f"--nodelist={node}", "--job-name=hps-blocker",
                          "--time=00:15:00", "--output=/dev/null", "--wrap", "sleep 900")
           for node in ("node1", "node3", "node5")]
    _wait_running(cluster, ids)
    yield cluster
    cluster.run("scancel", *ids)


def _wait_running(cluster, ids: list[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        out = cluster.run("squeue", "-h", "-j", ",".join(ids), "-o", "%T").stdout.split()
        if out.count("RUNNING") == len(ids):
            return
        if time.monotonic() > deadline:
            pytest.fail(f"blocker jobs not running after {timeout}s: {out}")
        time.sleep(0.3)


@pytest.mark.parametrize("blockers", ["slurm_flat_cluster"], indirect=True)
def test_without_tree_plugin_every_two_node_trial_stays_under_one_leaf(cli, blockers):
    """Slurm knows no switches here; hpsearch names free nodes under one leaf (--nodelist)
    and holds a trial back while no leaf has two free nodes."""
    cluster = blockers
    topo = cluster.state_dir / "etc" / "topology.conf"
    on = _search(cli, cluster, "pl-flat-on", f"{{policy: leaf-switch, topology: {topo}, "
                                             "max_wait: 10m}")
    spans = _leaves_of(cluster, on)
    assert all(len(s) == 1 for s in spans), spans
    assert set().union(*spans) == {"leaf4"}  # the only leaf with two free nodes
    off = _search(cli, cluster, "pl-flat-any", f"{{policy: any, topology: {topo}}}")
    spanning = sum(len(s) > 1 for s in _leaves_of(cluster, off))
    print(f"\nwithout the tree plugin, policy any: {spanning} of {TRIALS} two-node trials "
          "spanned leaves; policy leaf-switch: 0")
    assert spanning > 0  # the blockers make Slurm's linear choice span leaves


@pytest.mark.parametrize("blockers", ["slurm_cluster"], indirect=True)
def test_with_tree_plugin_every_two_node_trial_stays_under_one_leaf(cli, blockers):
    """The tree plugin is on: hpsearch asks for --switches=1@max_wait and reads the leaves
    from `scontrol show topology`."""
    cluster = blockers
    on = _search(cli, cluster, "pl-tree-on", "{policy: leaf-switch, max_wait: 10m}")
    spans = _leaves_of(cluster, on)
    assert all(len(s) == 1 for s in spans), spans
    off = _search(cli, cluster, "pl-tree-any", "{policy: any}")
    spanning = sum(len(s) > 1 for s in _leaves_of(cluster, off))
    print(f"\nwith the tree plugin, policy any: {spanning} of {TRIALS} two-node trials "
          "spanned leaves; policy leaf-switch: 0")


@pytest.mark.parametrize("blockers", ["slurm_flat_cluster"], indirect=True)
def test_single_node_trials_are_packed_into_the_fullest_leaf(cli, blockers):
    """Free nodes: node2, node4, node6 (alone in their leaves) and leaf4 whole. Best fit
    puts single-node trials on the lone nodes and keeps leaf4 whole for bigger trials."""
    cluster = blockers
    topo = cluster.state_dir / "etc" / "topology.conf"
    trials = _search(cli, cluster, "pl-pack", f"{{topology: {topo}}}", nodes=1, trials=4)
    used = {_sacct_nodes(cluster, t.job_id)[0] for t in trials}
    assert used <= {"node2", "node4", "node6"}, used


@pytest.mark.parametrize("blockers", ["slurm_flat_cluster"], indirect=True)
def test_topology_command_and_status_show_leaves_and_trials(cli, blockers):
    """`hpsearch topology` lists each leaf's free and used nodes and the trials running on
    it; `status` shows the leaf each trial ran under."""
    cluster = blockers
    topo = cluster.state_dir / "etc" / "topology.conf"
    name = f"pl-show-{RUN}"
    text = SPEC.format(name=name, trials=1, nodes=2, placement=f"{{topology: {topo}}}")
    spec = cli.write_spec(text.replace("sleep 1;", "sleep 30;"), f"{name}.yaml")
    driver = cli.popen("submit", spec, env=cluster.env)
    try:
        deadline = time.monotonic() + 60
        while True:  # until the trial runs on its nodes
            out = cli("status", name, env=cluster.env, check=None).stdout
            if "[leaf4]" in out:
                break
            assert time.monotonic() < deadline, out
            time.sleep(0.5)
        shown = cli("topology", name, env=cluster.env, check=0).stdout
        rows = {line.split()[0]: line for line in shown.splitlines()[1:]}
        assert f"{name}#0" in rows["leaf4"] and "2 node[7-8]" in rows["leaf4"]
        assert rows["leaf1"].split()[1:5] == ["1", "node2", "1", "node1"]  # free, used
        assert f"{name}#0" not in rows["leaf1"]
    finally:
        cli("cancel", name, env=cluster.env, check=None)
        driver.communicate(timeout=120)

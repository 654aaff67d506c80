"""The test cluster itself (scripts/slurm-cluster.sh): nodes, topology, GPUs, srun across
nodes, accounting, arrays, scancel. Every other Slurm test relies on what these check."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

from .conftest import SCRIPT, SlurmCluster

CAPTURED = Path(__file__).resolve().parent / "captured"


def node_states(cluster: SlurmCluster) -> dict[str, str]:
    out = cluster.run("sinfo", "-h", "-N", "-o", "%N|%T|%P").stdout
    return {node: state for node, state, _ in (line.split("|") for line in out.splitlines())}


def test_sinfo_lists_eight_idle_nodes_in_the_default_partition(slurm_cluster: SlurmCluster):
    deadline = time.monotonic() + 30  # jobs of an earlier test may still be completing
    while set((states := node_states(slurm_cluster)).values()) != {"idle"}:
        assert time.monotonic() < deadline, states
        time.sleep(0.5)
    assert sorted(states) == sorted(slurm_cluster.nodes)
    out = slurm_cluster.run("sinfo", "-h", "-N", "-p", "debug", "-o", "%N|%P|%c|%m|%G").stdout
    assert set(out.splitlines()) == {f"{n}|debug*|4|4000|gpu:2" for n in slurm_cluster.nodes}


def test_partitions_left_and_right_halve_the_nodes_under_debug(slurm_cluster: SlurmCluster):
    """Two sites with disjoint nodes (two leaf switches each) in one cluster, beside the
    default partition of every node; over the second half, a preemptible partition and one
    that preempts it."""
    out = slurm_cluster.run("sinfo", "-h", "-N", "-o", "%N|%P").stdout
    partitions: dict[str, set[str]] = {}
    for line in out.splitlines():
        node, partition = line.split("|")
        partitions.setdefault(partition, set()).add(node)
    half = {"node5", "node6", "node7", "node8"}
    assert partitions == {"debug*": set(slurm_cluster.nodes),
                          "left": {"node1", "node2", "node3", "node4"},
                          "right": half, "scavenger": half, "urgent": half}
    assert slurm_cluster.partitions == {
        "debug": slurm_cluster.nodes, "left": slurm_cluster.nodes[:4],
        "right": slurm_cluster.nodes[4:], "scavenger": slurm_cluster.nodes[4:],
        "urgent": slurm_cluster.nodes[4:]}


def test_a_second_cluster_shares_slurmdbd_and_answers_to_dash_m(slurm_cluster: SlurmCluster):
    """hpsearch2, 4 nodes of its own, reached from this cluster's SLURM_CONF with -M; the
    users this cluster knows have an association there too."""
    assert slurm_cluster.second_cluster == "hpsearch2"
    assert slurm_cluster.second_cluster_nodes == tuple(f"h2node{i}" for i in range(1, 5))
    assert slurm_cluster.second_cluster_partitions == {
        "debug": slurm_cluster.second_cluster_nodes}
    out = slurm_cluster.run("sinfo", "-M", "hpsearch2", "-h", "-N", "-o", "%N|%c|%m|%G").stdout
    assert set(out.splitlines()) == {f"h2node{i}|4|4000|gpu:2" for i in range(1, 5)}
    assert slurm_cluster.run("scontrol", "-M", "hpsearch2", "ping").stdout.endswith("is UP\n")
    listed = slurm_cluster.run("sacctmgr", "-n", "-P", "list", "clusters",
                               "format=cluster,controlport").stdout.split()
    assert {line.split("|")[0] for line in listed} == {"hpsearch", "hpsearch2"}
    assert all(int(line.split("|")[1]) > 0 for line in listed)  # each slurmctld registered
    assoc = slurm_cluster.run("sacctmgr", "-n", "-P", "list", "assoc", "format=cluster,user")
    users = {cluster: set() for cluster in ("hpsearch", "hpsearch2")}
    for line in assoc.stdout.split():
        cluster, user = line.split("|")
        if user:
            users[cluster].add(user)
    assert "root" in users["hpsearch"] and users["hpsearch"] <= users["hpsearch2"]


def test_topology_is_four_leaf_switches_of_two_nodes_under_one_spine(
        slurm_cluster: SlurmCluster):
    out = slurm_cluster.run("scontrol", "show", "topology").stdout
    switches = {}
    for line in out.splitlines():
        fields = dict(word.split("=", 1) for word in line.split())
        switches[fields["SwitchName"]] = fields
    assert {name: (s["Level"], s["Nodes"]) for name, s in switches.items()
            if name.startswith("leaf")} == {
        "leaf1": ("0", "node[1-2]"), "leaf2": ("0", "node[3-4]"),
        "leaf3": ("0", "node[5-6]"), "leaf4": ("0", "node[7-8]")}
    assert switches["spine"]["Level"] == "1"
    assert switches["spine"]["Switches"] == "leaf[1-4]"
    assert switches["spine"]["Nodes"] == "node[1-8]"


def test_two_node_srun_runs_one_task_on_each_node(slurm_cluster: SlurmCluster):
    # All nodes share this host's hostname; SLURMD_NODENAME tells them apart.
    out = slurm_cluster.run("srun", "-N2", "-n2", "--ntasks-per-node=1", "bash", "-c",
                            "echo $SLURM_PROCID $SLURMD_NODENAME").stdout
    ranks = dict(line.split() for line in out.splitlines())
    assert sorted(ranks) == ["0", "1"]
    assert len(set(ranks.values())) == 2 and set(ranks.values()) <= set(slurm_cluster.nodes)


def test_declared_gpus_are_allocated_as_gres(slurm_cluster: SlurmCluster):
    out = slurm_cluster.run("srun", "-N1", "--gres=gpu:2", "bash", "-c",
                            "echo $SLURM_GPUS_ON_NODE ${CUDA_VISIBLE_DEVICES-unset}").stdout
    assert out.split() == ["2", "0,1"]


def test_finished_batch_job_is_listed_completed_by_sacct_with_its_node(
        slurm_cluster: SlurmCluster, tmp_path: Path):
    job = slurm_cluster.sbatch("-J", "hello", "-o", str(tmp_path / "out"),
                               "--wrap", "echo hello from $SLURMD_NODENAME")
    # (wait_for_accounting waits out the few seconds in which sacct may list a short job
    # that just ended under the name "allocation": captured/sacct_transient_allocation_name.txt)
    [(state, exit_code, nodes, name)] = slurm_cluster.wait_for_accounting(
        job, "State,ExitCode,NodeList,JobName")
    assert (state, exit_code, name) == ("COMPLETED", "0:0", "hello")
    assert (tmp_path / "out").read_text() == f"hello from {nodes}\n"


def test_failed_job_is_listed_failed_with_its_exit_code(slurm_cluster: SlurmCluster):
    job = slurm_cluster.sbatch("-o", "/dev/null", "--wrap", "exit 3")
    assert slurm_cluster.wait_for_accounting(job, "State,ExitCode") == [["FAILED", "3:0"]]


def test_job_array_of_four_runs_every_task(slurm_cluster: SlurmCluster, tmp_path: Path):
    job = slurm_cluster.sbatch("--array=0-3", "-o", str(tmp_path / "out_%a"),
                               "--wrap", "echo $SLURM_ARRAY_TASK_ID")
    rows = slurm_cluster.wait_for_accounting(job, "State,JobID", rows=4)
    assert sorted(rows) == [["COMPLETED", f"{job}_{i}"] for i in range(4)]
    assert [(tmp_path / f"out_{i}").read_text() for i in range(4)] == [f"{i}\n" for i in range(4)]


def test_scancel_stops_a_running_job(slurm_cluster: SlurmCluster):
    job = slurm_cluster.sbatch("-o", "/dev/null", "--wrap", "sleep 300")
    deadline = time.monotonic() + 30
    while slurm_cluster.run("squeue", "-h", "-j", job, "-o", "%T").stdout.strip() != "RUNNING":
        assert time.monotonic() < deadline, "the job never started"
        time.sleep(0.3)
    slurm_cluster.run("scancel", job)
    slurm_cluster.wait_until_gone_from_queue(job, timeout=30)
    [(state,)] = slurm_cluster.wait_for_accounting(job, "State")
    assert re.fullmatch(r"CANCELLED by \d+", state), state


def test_sacct_without_accounting_says_so_and_exits_1(slurm_cluster: SlurmCluster,
                                                       tmp_path: Path):
    """A cluster without accounting is not a cluster without jobs: sacct prints a notice on
    stderr and exits 1 (22.05), exactly as captured in captured/sacct_no_accounting.*."""
    conf = tmp_path / "slurm.conf"
    conf.write_text("".join(line for line in slurm_cluster.conf.read_text().splitlines(True)
                            if not line.startswith("AccountingStorage")))
    proc = subprocess.run(["sacct", "--parsable2", "--noheader", "-j", "1"],
                          env={**slurm_cluster.env, "SLURM_CONF": str(conf)},
                          capture_output=True, text=True, timeout=30)
    captured = {part: (CAPTURED / f"sacct_no_accounting.{part}.txt").read_text()
                for part in ("stdout", "stderr", "exitcode")}
    assert (proc.stdout, proc.stderr, f"{proc.returncode}\n") == (
        captured["stdout"], captured["stderr"], captured["exitcode"])


def test_start_again_is_quick_and_keeps_the_same_cluster(slurm_cluster: SlurmCluster):
    began = time.monotonic()
    proc = subprocess.run(["bash", str(SCRIPT), "start"], capture_output=True, text=True,
                          timeout=120, env={**slurm_cluster.env,
                                            "HPSEARCH_SLURM_DIR": str(slurm_cluster.state_dir)})
    assert proc.returncode == 0, proc.stderr
    assert f"export SLURM_CONF={slurm_cluster.conf}" in proc.stdout
    assert time.monotonic() - began < 20

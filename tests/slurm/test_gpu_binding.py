"""GPU and core binding on a cluster that binds like a production one (issue 26, item 1):
slurm_bound_cluster has task/cgroup and task/affinity, 4 GPUs and this host's CPUs (2 here,
at most 4) per node. 1- and 2-GPU trials run as plain jobs, as arrays, as 2-node jobs, and in
pilots with two slots per node, one node and two; every rank of every trial prints the GPUs
it sees (CUDA_VISIBLE_DEVICES), the GPU ids Slurm gave its job or step, and the CPUs it may
run on (tests/slurm/bind_probe.sh). Checked: each rank has its trial's GPU count and CPU
count, and no two trials running at once on a node share a GPU or a core.

Before the pilot fix, a pilot's trials on its other nodes saw every GPU of the node, and
every trial step Slurm started there was bound to the node's lowest core: overlapping steps
cannot pick their cores, so each step now takes all of the pilot's CPUs on the node and
narrows itself to its slot's (hpsearch.launch.base.CPU_NARROW). The GPUs are placeholders
(character devices with /dev/null's numbers; no CUDA here), so what is checked is what each
rank is told and the CPU mask the kernel holds it to. Real GPUs: benchmarks/gpu/."""

from __future__ import annotations

import re
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.helpers import read_store

RUN = uuid.uuid4().hex[:6]
PROBE = Path(__file__).with_name("bind_probe.sh")

JOBS = """
name: {name}
command: sh {probe} {{x}} 3
search:
  strategy: grid
  parallel: 8
  space:
    x: {{choices: [1, 2]}}
    nodes: {{choices: [1, 2]}}
    gpus: {{choices: [1, 2]}}
objective: {{metric: loss}}
launcher: srun
resources: {{nodes: "{{nodes}}", tasks_per_node: 1, gpus_per_node: "{{gpus}}",
             time: "00:05:00"}}
executor: {{type: slurm, poll_interval: 0.5, array: {array}}}
"""

PILOT = """
name: {name}
command: sh {probe} {{x}} 4
search:
  strategy: grid
  parallel: {parallel}
  space:
    x: {{choices: [1, 2, 3, 4]}}
objective: {{metric: loss}}
launcher: {launcher}
resources: {{nodes: {nodes}, tasks_per_node: 1, gpus_per_node: {gpus}, time: "00:02:00"}}
executor:
  type: slurm
  poll_interval: 0.5
  pilots: {{nodes: 2, time: "00:05:00", max: 1, slots_per_node: 2, idle_timeout: 5,
            heartbeat: 0.5}}
"""


def _cpus(text: str) -> set[int]:
    """'0-2,5' -> {0, 1, 2, 5}"""
    found: set[int] = set()
    for part in text.split(","):
        low, _, high = part.partition("-")
        found.update(range(int(low), int(high or low) + 1))
    return found


def _ranks(cli, name: str) -> list[dict]:
    """Every rank's line, parsed; checks the search completed."""
    _, trials = read_store(cli.runs, name)
    assert trials and all(t.state == "completed" for t in trials), \
        [(t.id, t.state) for t in trials]
    ranks = []
    for t in trials:
        out = (cli.runs / name / "trials" / f"{t.id:05d}" / "stdout.log").read_text()
        for line in out.splitlines():
            if line.startswith("bind "):
                rank = dict(w.split("=", 1) for w in line.split()[1:])
                rank.update(trial=t.id, params=t.params)
                ranks.append(rank)
    return ranks


def _check(ranks: list[dict], gpus_of, nodes_of, cpus_of=lambda r: 1,
           gpu_map: dict[str, set[str]] | None = None, together: bool = True) -> None:
    """Each rank: its trial's GPUs (as Slurm named them; among its node's `gpu_map` where
    given), its CPUs (one for a 1-CPU task; `cpus_of`); every trial has a rank on each of
    its nodes; trials that ran at once on a node share no GPU and no core, and (`together`)
    some did run at once (else nothing was tested)."""
    by_trial: dict[int, set[str]] = {}
    for r in ranks:
        cvd = [g for g in r["cvd"].split(",") if g]
        assert len(cvd) == gpus_of(r) and r["gpus"] == r["cvd"], r
        assert gpu_map is None or set(cvd) <= gpu_map[r["node"]], (r, gpu_map[r["node"]])
        assert len(_cpus(r["cpus"])) == cpus_of(r), r  # a 1-CPU task is held to one core
        by_trial.setdefault(r["trial"], set()).add(r["node"])
    assert all(len(nodes) == nodes_of(t) for t, nodes in by_trial.items()), by_trial
    shared = 0
    for i, a in enumerate(ranks):
        for b in ranks[i + 1:]:
            if a["node"] != b["node"] or a["trial"] == b["trial"]:
                continue
            if float(a["began"]) < float(b["ended"]) and float(b["began"]) < float(a["ended"]):
                shared += 1
                assert not {g for g in a["cvd"].split(",") if g} & set(b["cvd"].split(",")), \
                    (a, b)
                assert not _cpus(a["cpus"]) & _cpus(b["cpus"]), (a, b)
    assert shared or not together, ranks  # two trials at once on one node


@pytest.mark.parametrize("array", [False, True], ids=["jobs", "arrays"])
def test_gpu_trials_as_jobs_get_their_own_gpus_and_cores_on_every_node(
        cli, slurm_bound_cluster, array):
    """1- and 2-GPU trials on 1 and 2 nodes, as plain jobs or arrays: Slurm binds them."""
    name = f"bind-{'arr' if array else 'job'}-{RUN}"
    spec = cli.write_spec(JOBS.format(name=name, probe=PROBE,
                                      array="true" if array else "false"), f"{name}.yaml")
    cli("submit", spec, "--no-tui", "-q", env=slurm_bound_cluster.env, check=0, timeout=300)
    ranks = _ranks(cli, name)
    _check(ranks, lambda r: r["params"]["gpus"], lambda t: next(
        r["params"]["nodes"] for r in ranks if r["trial"] == t))


@pytest.mark.parametrize(("nodes", "gpus", "launcher"),
                         [(1, 1, "none"), (2, 2, "srun"), (2, 1, "torchrun"),
                          (2, 1, "mpirun")],
                         ids=["1-node-1-gpu", "2-node-2-gpu-srun", "2-node-1-gpu-torchrun",
                              "2-node-1-gpu-mpirun"])
def test_trials_in_a_two_node_pilot_get_their_slots_gpus_and_cores(
        cli, slurm_bound_cluster, nodes, gpus, launcher):
    """Two slots per node in a 2-node pilot: 1-node trials (on its first node as its own
    processes, on the other through an `srun --overlap` step), or 2-node trials whose
    ranks the trial's own srun starts, directly or as torchrun's workers. Before, trials on
    the second node saw all its GPUs, and every step there ran on the node's lowest core."""
    name = f"bind-pl{nodes}-{launcher}-{RUN}"
    # The pilot's 4 slots in one wave: 4 one-node trials, or 2 two-node ones (a second wave
    # of 2 took 27 s of CI's run 3 with torchrun, whose agent on each node imports torch)
    text = PILOT if nodes == 1 else PILOT.replace("[1, 2, 3, 4]", "[1, 2]")
    spec = cli.write_spec(text.format(name=name, probe=PROBE, nodes=nodes, gpus=gpus,
                                      launcher=launcher, parallel=4 // nodes), f"{name}.yaml")
    # torchrun runs inside the pilot: the interpreter's bin dir (the venv) on its PATH
    env = {**slurm_bound_cluster.env,
           "PATH": f"{Path(sys.executable).parent}:{slurm_bound_cluster.env.get('PATH', '')}"}
    cli("submit", spec, "--no-tui", "-q", env=env, check=0, timeout=300)
    ranks = _ranks(cli, name)
    _check(ranks, lambda r: gpus, lambda t: nodes)
    assert len({r["node"] for r in ranks}) == 2  # the pilot's two nodes both ran trials


SIZED = PILOT.replace("x: {{choices: [1, 2, 3, 4]}}",
                      "x: {{choices: [1, 2, 3]}}\n    g: {{choices: [1, 2]}}")


def test_trials_of_one_and_two_gpus_share_a_pilot_each_on_its_own_gpus_and_cores(
        cli, slurm_bound_cluster):
    """Per-trial GPUs in a pilot (issue 25 item 1): a slot is the smallest trial's share (1
    GPU, 1 core), and a 2-GPU trial takes 2 adjacent slots of its node, with both their GPUs
    and cores; 1- and 2-GPU trials run side by side, on the pilot's first node and, through
    srun, its second, and no two at once on a node share a GPU or a core."""
    name = f"bind-sized-{RUN}"
    spec = cli.write_spec(SIZED.format(name=name, probe=PROBE, nodes=1, gpus='"{g}"',
                                       launcher="none", parallel=4), f"{name}.yaml")
    cli("submit", spec, "--no-tui", "-q", env=slurm_bound_cluster.env, check=0, timeout=300)
    ranks = _ranks(cli, name)
    _check(ranks, lambda r: r["params"]["g"], lambda t: 1, lambda r: r["params"]["g"])
    assert {r["params"]["g"] for r in ranks} == {1, 2} and len({r["node"] for r in ranks}) == 2


# g first: x varies fastest, so trials 0-2 ask for no GPU and take slot 0 of both nodes
CPU_AND_GPU = PILOT.replace("x: {{choices: [1, 2, 3, 4]}}",
                            "g: {{choices: [0, 1]}}\n    x: {{choices: [1, 2, 3]}}")


def test_a_cpu_only_trial_in_a_gpu_pilot_sees_no_gpu_and_is_charged_none(
        cli, slurm_bound_cluster):
    """Trials of no GPU and of one share a pilot of 2 GPUs a node (issue 37, item 6): the
    CPU-only trials see no GPU in any rank, on the pilot's first node and through srun on
    its second (before: their slot's GPU, and on the second node every GPU of the pilot's
    step), the 1-GPU trials their own node's GPU, and the store charges the CPU-only ones no
    GPU (what gpu_hours counts)."""
    name = f"bind-cpu-gpu-{RUN}"
    spec = cli.write_spec(CPU_AND_GPU.format(name=name, probe=PROBE, nodes=1, gpus='"{g}"',
                                             launcher="none", parallel=4), f"{name}.yaml")
    cli("submit", spec, "--no-tui", "-q", env=slurm_bound_cluster.env, check=0, timeout=300)
    ranks = _ranks(cli, name)
    _check(ranks, lambda r: r["params"]["g"], lambda t: 1)
    assert {r["params"]["g"] for r in ranks} == {0, 1}
    assert len({r["node"] for r in ranks if r["params"]["g"] == 0}) == 2, ranks  # one by srun
    _, trials = read_store(cli.runs, name)
    assert all((t.gpus or "") == "" for t in trials if t.params["g"] == 0), \
        [(t.id, t.params, t.gpus) for t in trials]


def _hold(cluster, tmp_path: Path, node: str, *options: str) -> tuple[str, set[str]]:
    """A job holding part of `node` (its options) until cancelled: (its id, the GPU ids it
    holds there, as slurmctld lists them: `scontrol show job -d`, GRES=gpu:N(IDX:a-b))."""
    job = cluster.sbatch(f"--nodelist={node}", "--ntasks=1", *options, "--time=00:10:00",
                         f"--output={tmp_path}/hold-{node}.out", "--wrap=sleep 600")
    for _ in range(60):
        shown = cluster.run("scontrol", "show", "job", "-d", job).stdout
        if "JobState=RUNNING" in shown:
            found = re.search(r"GRES=gpu[^(\s]*\(IDX:([0-9,-]+)\)", shown)
            return job, (_ids(found.group(1)) if found else set())
        time.sleep(0.5)
    pytest.fail(f"job {job} holding {node} never ran:\n{shown}")


def _ids(text: str) -> set[str]:
    return {str(i) for i in _cpus(text)}


ONE_SLOT = PILOT.replace("slots_per_node: 2", "slots_per_node: 1")


def test_a_trial_on_a_pilots_other_node_gets_that_nodes_gpus_not_the_first_nodes(
        cli, slurm_bound_cluster, tmp_path):
    """The emulated nodes all number their GPUs 0..3 (Slurm 22.05 names a GPU by its index on
    its node, whatever its gres.conf File=), so where a pilot holds the same GPUs on every
    node, a trial on its second node shown the first node's ids passed. Here other jobs
    hold GPU 0 of node1 and GPUs 0-1 of node2, and every CPU of the other nodes, so the
    pilot gets GPU 1 on node1 and GPU 2 on node2: a trial on node2 must see 2, its node's,
    not 1, its pilot's first node's (issue 37, the binding tests' blind spot)."""
    holders: list[str] = []
    try:
        held = {}
        for node, gres in (("node1", "gpu:1"), ("node2", "gpu:2")):
            job, ids = _hold(slurm_bound_cluster, tmp_path, node, "--cpus-per-task=1",
                             f"--gres={gres}")
            holders.append(job)
            held[node] = ids
        for k in range(3, 9):
            holders.append(_hold(slurm_bound_cluster, tmp_path, f"node{k}", "--exclusive")[0])
        assert held == {"node1": {"0"}, "node2": {"0", "1"}}, held
        name = f"bind-ids-{RUN}"
        spec = cli.write_spec(ONE_SLOT.format(name=name, probe=PROBE, nodes=1, gpus=1,
                                              launcher="none", parallel=2), f"{name}.yaml")
        cli("submit", spec, "--no-tui", "-q", env=slurm_bound_cluster.env, check=0,
            timeout=300)
    finally:
        if holders:
            slurm_bound_cluster.run("scancel", *holders, check=False)
    ranks = _ranks(cli, name)
    free = {node: {"0", "1", "2", "3"} - ids for node, ids in held.items()}
    assert {r["node"] for r in ranks} == {"node1", "node2"}, ranks
    _check(ranks, lambda r: 1, lambda t: 1, gpu_map=free, together=False)  # 1 slot a node


WARM = """
name: {name}
command: "{{python}} {probe} {{x}} 3"
search:
  strategy: grid
  parallel: 2
  space:
    x: {{choices: [1, 2, 3, 4]}}
objective: {{metric: loss}}
launcher: torchrun
resources: {{nodes: 2, tasks_per_node: 1, gpus_per_node: 1, time: "00:02:00"}}
executor:
  type: slurm
  poll_interval: 0.5
  warm: [decimal]
  pilots: {{nodes: 2, time: "00:05:00", max: 1, slots_per_node: 2, idle_timeout: 5,
            heartbeat: 0.5}}
"""


def test_two_node_trials_in_a_pilot_start_warm_on_every_node_on_their_slots_cores(
        cli, slurm_bound_cluster):
    """executor.warm with 2-node torchrun trials in a pilot (issue 26 item 6): each trial's
    ranks start in a new srun step, and a warm server serves one step, so before, every
    segment's ranks ran cold. The pilot now runs one server per node in a step of its own
    (hpsearch.pilot.warm_servers): the later trials' ranks fork from it on both nodes, each
    on its slot's GPU and its client's core."""
    name = f"bind-warm-{RUN}"
    spec = cli.write_spec(WARM.format(name=name, probe=PROBE.with_name("warm_probe.py")),
                          f"{name}.yaml")
    cli("submit", spec, "--no-tui", "-q", env=slurm_bound_cluster.env, check=0, timeout=300)
    ranks = _ranks(cli, name)
    _check(ranks, lambda r: 1, lambda t: 2)
    later = [r for r in ranks if r["trial"] >= 2]  # the servers had time to import
    assert len(later) == 4 and all(r["warm"] == "True" for r in later), ranks

"""Per-trial resources on the emulated cluster (8 nodes, Gres=gpu:2 each): one search over
nodes 1, 2 and gpus_per_node 1, 2, as plain jobs and as arrays (one array per size, the
2-node trials as jobs of their own); sacct must show each trial's job with its own size.
The same without a cluster: tests/test_trial_sizes.py."""

from __future__ import annotations

import uuid

import pytest

from tests.helpers import read_store

RUN = uuid.uuid4().hex[:6]  # job names must not meet an earlier session's in accounting

SPEC = """
name: {name}
command: 'echo "nodes=$SLURM_JOB_NUM_NODES"; echo "@hpsearch step=0 loss={{x}}"'
search:
  strategy: grid
  parallel: 8
  space:
    x: {{choices: [0.25, 0.5]}}
    nodes: {{choices: [1, 2]}}
    gpus: {{choices: [1, 2]}}
objective: {{metric: loss}}
resources: {{nodes: "{{nodes}}", gpus_per_node: "{{gpus}}", time: "00:05:00"}}
executor: {{type: slurm, poll_interval: 0.5, array: {array}}}
"""


def _gpus(alloc_tres: str) -> int:
    """The GPUs of a job from sacct's AllocTRES ('billing=2,cpu=2,gres/gpu=4,mem=...')."""
    tres = dict(item.split("=", 1) for item in alloc_tres.split(",") if "=" in item)
    return int(tres.get("gres/gpu", 0))


@pytest.mark.parametrize("array", [False, True], ids=["jobs", "arrays"])
def test_each_trial_runs_as_a_job_of_its_own_size(cli, slurm_cluster, array):
    name = f"sizes-{'arr' if array else 'job'}-{RUN}"
    spec = cli.write_spec(SPEC.format(name=name, array="true" if array else "false"),
                          f"{name}.yaml")
    cli("submit", spec, "--no-tui", "-q", env=slurm_cluster.env, check=0, timeout=300)
    _, trials = read_store(cli.runs, name)
    assert len(trials) == 8 and all(t.state == "completed" for t in trials)
    for t in trials:
        nodes, gpus = t.params["nodes"], t.params["gpus"]
        (record,) = slurm_cluster.wait_for_accounting(t.job_id, "State,NNodes,AllocTRES")
        assert record[:2] == ["COMPLETED", str(nodes)], (t.id, t.job_id, record)
        assert _gpus(record[2]) == nodes * gpus, (t.id, t.job_id, record)
        out = (cli.runs / name / "trials" / f"{t.id:05d}" / "stdout.log").read_text()
        assert f"nodes={nodes}" in out
    if array:  # single-node trials in arrays, never two sizes in one; 2-node ones alone
        single = [t for t in trials if t.params["nodes"] == 1]
        assert all("_" in t.job_id for t in single)  # ready together: arrays of 2 tasks
        sizes: dict[str, set] = {}
        for t in single:
            sizes.setdefault(t.job_id.split("_")[0], set()).add(t.params["gpus"])
        assert all(len(gpus) == 1 for gpus in sizes.values()), sizes
        assert all("_" not in t.job_id for t in trials if t.params["nodes"] == 2)


PILOT = """
name: {name}
command: >-
  date +%s.%N > "$HPSEARCH_TRIAL_DIR/t0"; echo "nodes=$SLURM_JOB_NODELIST";
  sleep 2; date +%s.%N > "$HPSEARCH_TRIAL_DIR/t1"; echo "@hpsearch step=0 loss={{x}}"
search:
  strategy: grid
  parallel: 4
  space:
    x: {{choices: [1, 2, 3]}}
    nodes: {{choices: [1, 2, 4]}}
objective: {{metric: loss}}
resources: {{nodes: "{{nodes}}"}}
executor:
  type: slurm
  poll_interval: 0.5
  pilots: {{nodes: 4, max: 1, slots_per_node: 1, time: "00:05:00", idle_timeout: 10,
            heartbeat: 1}}
"""


def test_one_pilot_runs_trials_of_1_2_and_4_nodes_and_never_starves_the_4_node_ones(
        cli, slurm_cluster):
    """Trials of 1, 2 and 4 nodes in that order, again and again, through one 4-node pilot
    (one slot a node): 1- and 2-node trials share it, and a 4-node trial, once no pilot has
    room for it, is promised the pilot: no trial after it starts before it does (Slurm's
    backfill, here with no trial time known), so the trials behind it cannot keep it
    waiting. Each trial runs on its own count of distinct nodes, no node held by two trials
    at once."""
    from hpsearch.slurm.hostlist import expand

    name = f"sizes-pilot-{RUN}"
    spec = cli.write_spec(PILOT.format(name=name), f"{name}.yaml")
    proc = cli("submit", spec, "--no-tui", "-q", env=slurm_cluster.env, check=0, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _, trials = read_store(cli.runs, name)
    assert [t.params["nodes"] for t in trials] == [1, 2, 4] * 3
    assert all(t.state == "completed" for t in trials), [(t.id, t.state) for t in trials]
    assert len({t.job_id for t in trials}) == 1  # one pilot ran them all
    runs = {}
    for t in trials:
        tdir = cli.runs / name / "trials" / f"{t.id:05d}"
        nodes = expand(t.nodes)
        assert len(set(nodes)) == t.params["nodes"], (t.id, t.nodes)
        assert f"nodes={t.nodes}" in (tdir / "stdout.log").read_text()
        runs[t.id] = (float((tdir / "t0").read_text()), float((tdir / "t1").read_text()),
                      set(nodes))
    for a, (a0, a1, a_nodes) in runs.items():
        for b, (b0, b1, b_nodes) in runs.items():
            if a < b and a_nodes & b_nodes:
                assert a1 <= b0 or b1 <= a0, (a, b, runs[a], runs[b])  # never side by side
    assert any(a0 < b1 and b0 < a1 for a, (a0, a1, _) in runs.items()
               for b, (b0, b1, _) in runs.items() if a < b), runs  # some shared the pilot
    for big in (t.id for t in trials if t.params["nodes"] == 4):
        later = [tid for tid in runs if tid > big and runs[tid][0] < runs[big][0]]
        assert not later, (big, later, runs)  # none overtook the 4-node trial


BACKFILL = """
name: {name}
command: >-
  date +%s.%N > "$HPSEARCH_TRIAL_DIR/t0"; sleep {{s}};
  date +%s.%N > "$HPSEARCH_TRIAL_DIR/t1"; echo "@hpsearch step=0 loss={{s}}"
search:
  strategy: random
  trials: 4
  parallel: 4
  seed: 1
  space:
    n: {{choices: [1, 4]}}
    limit: {{choices: ["00:01:00", "00:03:00"]}}
    s: {{choices: [2, 6]}}
  enqueue:
    - {{n: 1, limit: "00:03:00", s: 6}}
    - {{n: 4, limit: "00:01:00", s: 2}}
    - {{n: 1, limit: "00:01:00", s: 2}}
    - {{n: 1, limit: "00:03:00", s: 2}}
objective: {{metric: loss}}
resources: {{nodes: "{{n}}", time: "{{limit}}"}}
executor:
  type: slurm
  poll_interval: 0.5
  pilots: {{nodes: 4, max: 1, slots_per_node: 1, time: "00:05:00", idle_timeout: 10,
            heartbeat: 1}}
"""


def test_a_trial_whose_own_time_limit_ends_it_first_backfills_a_4_node_trials_promise(
        cli, slurm_cluster):
    """Per-trial time limits in a pilot (issue 25 item 1), Slurm's backfill rule: trial 1
    (4 nodes) waits for trial 0 (1 node, 3-minute limit); trial 2 (1 minute) may start
    meanwhile on the nodes promised to trial 1, as it will be done before trial 0's limit;
    trial 3 (3 minutes, not done by then) may not, and starts after trial 1. With one time
    limit for all, trial 2 would wait for trial 1 too."""
    name = f"sizes-backfill-{RUN}"
    spec = cli.write_spec(BACKFILL.format(name=name), f"{name}.yaml")
    proc = cli("submit", spec, "--no-tui", "-q", env=slurm_cluster.env, check=0, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _, trials = read_store(cli.runs, name)
    assert [(t.params["n"], t.params["limit"]) for t in trials] == [
        (1, "00:03:00"), (4, "00:01:00"), (1, "00:01:00"), (1, "00:03:00")]
    assert all(t.state == "completed" for t in trials) and len({t.job_id for t in trials}) == 1
    t0 = {t.id: float((cli.runs / name / "trials" / f"{t.id:05d}" / "t0").read_text())
          for t in trials}
    t1 = {t.id: float((cli.runs / name / "trials" / f"{t.id:05d}" / "t1").read_text())
          for t in trials}
    assert t0[2] < t0[1], (t0, t1)  # backfilled ahead of the 4-node trial
    assert t0[1] >= t1[0] and t0[3] >= t1[1], (t0, t1)  # the others waited their turn


# Strong scaling, simulated by the trial: 0.4 s of work a step split over its ranks, and
# 0.02 s a step waiting for the others (what an all-reduce would cost); every rank reports.
TIMED = """
name: {name}
command: >-
  {{python}} -c "import os, time; from hpsearch import trial;
  world = int(os.environ['SLURM_NTASKS']);
  [(time.sleep(0.4 / world + 0.02), trial.report_timing(s, step_s=0.4 / world + 0.02,
  compute_s=0.4 / world, items=64)) for s in range(4)];
  trial.rank() or trial.result(loss=0.5)"
search:
  strategy: grid
  parallel: 2
  space:
    nodes: {{choices: [1, 2]}}
objective: {{metric: loss}}
launcher: srun
resources: {{nodes: "{{nodes}}", tasks_per_node: 1}}
executor:
  type: slurm
  poll_interval: 0.5
  pilots: {{nodes: 2, max: 1, slots_per_node: 1, time: "00:05:00", idle_timeout: 10,
            heartbeat: 1}}
"""


def test_a_search_over_node_counts_shows_each_trials_efficiency_and_scale_reruns_one(
        cli, slurm_cluster):
    """Trials of 1 and 2 nodes in a pilot, every rank reporting its step timing: `status`
    shows each trial's parallel efficiency and the 2-node trial's speedup (issue 25 item 3,
    on the cluster: ranks on two nodes, their files read by the driver); then `hpsearch
    scale NAME --trial 0 --nodes 1,2` (item 4) runs trial 0's configuration again at both
    sizes as a child experiment in pilots, the parent's store only read, and prints the
    curve. The timings are the trial's own (sleeps): what is checked is how they are
    gathered and shown, not this host's speed."""
    import hashlib

    from hpsearch.driver.scale_spec import parent_of
    from hpsearch.slurm.hostlist import expand

    name = f"scale-pilot-{RUN}"
    spec = cli.write_spec(TIMED.format(name=name), f"{name}.yaml")
    cli("submit", spec, "--no-tui", "-q", env=slurm_cluster.env, check=0, timeout=300)
    _, trials = read_store(cli.runs, name)
    assert [t.state for t in trials] == ["completed", "completed"], [t.error for t in trials]
    status = cli("status", name, check=0).stdout
    assert "PE 95% (LB 100% CE 95%) 1 rank " in status, status
    assert "PE 91% (LB 100% CE 91%) 2 ranks, x1.9 (95% of ideal)" in status, status
    store = cli.runs / name / "store.sqlite"
    before = hashlib.sha256(store.read_bytes()).hexdigest()
    proc = cli("scale", name, "--trial", "0", "--nodes", "1,2", "-q", "--no-tui",
               env=slurm_cluster.env, check=0, timeout=300)
    exp, trials = read_store(cli.runs, f"{name}-scale-0")
    assert parent_of(exp.spec_yaml) == (name, 0)
    # the parent's per-trial nodes parameter is the one the child varies
    assert sorted((t.params["nodes"], len(set(expand(t.nodes))), t.state) for t in trials) == [
        (1, 1, "completed"), (2, 2, "completed")], [(t.params, t.nodes) for t in trials]
    assert hashlib.sha256(store.read_bytes()).hexdigest() == before
    lines = proc.stdout.splitlines()
    head = next(line for line in lines if line.lstrip().startswith("nodes"))
    assert "speedup" in head and "ring model s/step" in head, proc.stdout
    two = next(line.split() for line in lines if line.split()[:1] == ["2"])
    assert "1.91" in two, proc.stdout

"""`launcher: mpirun` for real: Open MPI's mpirun on the emulated cluster (issue 13, item 4).

The trial program (tests/slurm/mpi_allreduce.py) joins a gloo group through the variables
the launcher sets and all-reduces RANK + 1 over every rank mpirun started; each rank writes
the Slurm node it ran on (SLURMD_NODENAME, set by slurmstepd) to ranks/<RANK>.json.

- As a plain job: `hpsearch submit` with `executor: slurm`, 2 nodes x 2 tasks.
- On a subset of a bigger allocation, the way a pilot runs a multi-node trial: a 4-node
  sbatch whose script narrows SLURM_JOB_NODELIST, SLURM_NODELIST, SLURM_NNODES,
  SLURM_JOB_NUM_NODES and SLURM_TASKS_PER_NODE to two of its nodes, then runs the
  launcher's text. Open MPI starts its daemons with srun, which ignores those variables.

Needs mpirun (Debian's openmpi-bin; scripts/test.sh installs it).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import uuid
from collections import Counter
from pathlib import Path

import pytest

from hpsearch.launch import RankLayout, make_launcher, make_runtime, port_for
from hpsearch.slurm.hostlist import expand
from tests.helpers import read_store

PROGRAM = Path(__file__).resolve().parent / "mpi_allreduce.py"
RUN = uuid.uuid4().hex[:6]  # job names must not meet an earlier session's in accounting
NODES, TASKS_PER_NODE = 2, 2
WORLD = NODES * TASKS_PER_NODE
SCALE = 3.0
ALL_REDUCED = SCALE * WORLD * (WORLD + 1) / 2  # the sum of (RANK + 1) * SCALE: 30

SPEC = f"""
name: {{name}}
command: '{{{{python}}}} {PROGRAM} --scale {{{{scale}}}}'
search:
  strategy: grid
  space:
    scale: {{{{choices: [{SCALE}]}}}}
objective: {{{{metric: sum, direction: maximize}}}}
resources: {{{{nodes: {NODES}, tasks_per_node: {TASKS_PER_NODE}, time: "00:03:00"}}}}
executor: {{{{type: slurm, poll_interval: 1s}}}}
launcher: mpirun
env:
  OMP_NUM_THREADS: 1
"""


@pytest.fixture(autouse=True)
def _needs_mpirun():
    if shutil.which("mpirun") is None:
        reason = "mpirun not installed (apt-get install openmpi-bin; scripts/test.sh does)"
        if os.environ.get("CI"):
            pytest.fail(f"CI is set, so the MPI tests must run, but: {reason}", pytrace=False)
        pytest.skip(reason)


def _ranks(trial_dir: Path) -> list[dict]:
    """The records the ranks wrote, ordered by rank."""
    records = [json.loads(p.read_text()) for p in (trial_dir / "ranks").glob("*.json")]
    return sorted(records, key=lambda r: r["rank"])


def _assert_two_per_node_on(records: list[dict], nodes: list[str]) -> None:
    """WORLD ranks, TASKS_PER_NODE on each of `nodes`, rank order following node order
    (NODE_RANK 0 is the first node), and every rank saw the whole all-reduce."""
    assert [r["rank"] for r in records] == list(range(WORLD)), records
    assert Counter(r["node"] for r in records) == {n: TASKS_PER_NODE for n in nodes}, records
    for r in records:
        assert r["node"] == nodes[r["rank"] // TASKS_PER_NODE], records
        assert r["node_rank"] == r["rank"] // TASKS_PER_NODE, records
        assert r["local_rank"] == r["rank"] % TASKS_PER_NODE, records
        assert r["ompi_rank"] == r["rank"], records  # RANK is the one Open MPI gave
        assert r["world_size"] == WORLD and r["sum"] == ALL_REDUCED, records


def test_mpi_trial_runs_as_a_plain_slurm_job_over_two_nodes(cli, slurm_cluster):
    name = f"mpi-plain-{RUN}"
    spec = cli.write_spec(SPEC.format(name=name), "mpi.yaml")
    proc = cli("submit", spec, env=slurm_cluster.env, timeout=240)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    _, (trial,) = read_store(cli.runs, name)
    trial_dir = cli.runs / name / "trials" / f"{trial.id:05d}"
    assert trial.state == "completed", (trial.error, (trial_dir / "stderr.log").read_text())
    assert trial.objective_values == [ALL_REDUCED]  # rank 0's report of the all-reduce
    (record,) = slurm_cluster.wait_for_accounting(trial.job_id, "State,NodeList,AllocNodes")
    assert record[0] == "COMPLETED" and record[2] == str(NODES)
    job_nodes = expand(record[1])
    assert len(set(job_nodes)) == NODES
    _assert_two_per_node_on(_ranks(trial_dir), job_nodes)


def _subset_script(out: Path, port: int) -> str:
    """A batch script that runs the mpirun text on the last two nodes of its allocation,
    with the node variables narrowed the way a pilot narrows them for one trial."""
    layout = RankLayout(nodes=NODES, tasks_per_node=TASKS_PER_NODE, master_port=port,
                        under_slurm=True)
    body = make_launcher("mpirun").wrap(f"{sys.executable} {PROGRAM} --scale {SCALE}", layout,
                                        make_runtime(None))
    return "\n".join([
        "#!/bin/bash",
        'hpsearch_subset=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | tail -n 2 '
        "| paste -sd, -)",
        'export SLURM_JOB_NODELIST="$hpsearch_subset" SLURM_NODELIST="$hpsearch_subset"',
        f"export SLURM_NNODES={NODES} SLURM_JOB_NUM_NODES={NODES} "
        f"SLURM_TASKS_PER_NODE='{TASKS_PER_NODE}(x{NODES})'",
        f"export HPSEARCH_EXPERIMENT=mpi-subset-{RUN} HPSEARCH_TRIAL_ID=0 HPSEARCH_ATTEMPT=1 "
        f"HPSEARCH_TRIAL_DIR={out} HPSEARCH_CHECKPOINT_DIR={out}/checkpoints "
        "HPSEARCH_PARAMS='{}' OMP_NUM_THREADS=1",
        body, ""])


def test_mpi_ranks_land_on_the_node_subset_a_pilot_names(slurm_cluster, tmp_path):
    script = tmp_path / "subset.sh"
    script.write_text(_subset_script(tmp_path, port_for(f"mpi-subset-{RUN}", 0)))
    job_id = slurm_cluster.sbatch(f"--job-name=hps-test.mpi-subset-{RUN}", "--nodes=4",
                                  f"--ntasks-per-node={TASKS_PER_NODE}", "--time=00:03:00",
                                  f"--output={tmp_path}/job.log", str(script), cwd=tmp_path)
    (record,) = slurm_cluster.wait_for_accounting(job_id, "State,NodeList", timeout=180)
    log = (tmp_path / "job.log").read_text()
    assert record[0] == "COMPLETED", log
    allocation = expand(record[1])
    assert len(allocation) == 4
    subset = allocation[2:]
    _assert_two_per_node_on(_ranks(tmp_path), subset)
    # Slurm agrees: the one srun step (Open MPI's daemons) ran on the subset only, holding
    # the CPUs of its ranks (TASKS_PER_NODE x 1 CPU on each node), not one per node.
    steps = slurm_cluster.run("sacct", "--parsable2", "--noheader", "-j", job_id,
                              "-o", "JobID,NodeList,AllocCPUS").stdout.splitlines()
    (step,) = [s.split("|") for s in steps if s.startswith(f"{job_id}.0|")]
    assert expand(step[1]) == subset and step[2] == str(WORLD), steps


def test_mpi_trial_runs_on_the_local_executor(cli):
    """The same trial on the local executor: mpirun starts tasks_per_node ranks on this
    machine (`--host localhost:T`), as root too."""
    name = f"mpi-local-{RUN}"
    text = SPEC.format(name=name).replace("type: slurm", "type: local").replace(
        f"nodes: {NODES}", "nodes: 1")
    proc = cli("submit", cli.write_spec(text, "mpi-local.yaml"), timeout=120)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    _, (trial,) = read_store(cli.runs, name)
    records = _ranks(cli.runs / name / "trials" / f"{trial.id:05d}")
    assert trial.state == "completed" and trial.objective_values == [SCALE * 3], records
    assert [(r["rank"], r["local_rank"], r["ompi_rank"], r["sum"]) for r in records] == [
        (0, 0, 0, SCALE * 3), (1, 1, 1, SCALE * 3)]


def test_mpi_trial_runs_inside_a_four_node_pilot_on_its_two_nodes(cli, slurm_cluster):
    """The same trial in a 4-node pilot: mpirun's ranks land on exactly the two nodes the
    pilot gave the trial (2 per node), a subset of the pilot's job, under one leaf."""
    name = f"mpi-pilot-{RUN}"
    text = SPEC.format(name=name).replace(
        "executor: {type: slurm, poll_interval: 1s}",
        'executor: {type: slurm, poll_interval: 1s, pilots: {nodes: 4, time: "00:04:00", '
        "max: 1, idle_timeout: 10, heartbeat: 1}}")
    proc = cli("submit", cli.write_spec(text, "mpi-pilot.yaml"), env=slurm_cluster.env,
               timeout=240)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    _, (trial,) = read_store(cli.runs, name)
    trial_dir = cli.runs / name / "trials" / f"{trial.id:05d}"
    assert trial.state == "completed", (trial.error, (trial_dir / "stderr.log").read_text())
    assert trial.objective_values == [ALL_REDUCED]
    (record,) = slurm_cluster.wait_for_accounting(trial.job_id, "State,NodeList,JobName")
    assert ".pilot." in record[2] and len(expand(record[1])) == 4  # the pilot's job
    nodes = expand(trial.nodes)
    assert len(nodes) == NODES and set(nodes) <= set(expand(record[1]))
    assert trial.leaves and "," not in trial.leaves  # one leaf
    _assert_two_per_node_on(_ranks(trial_dir), nodes)

"""Several partitions and a second cluster of the test cluster (scripts/slurm-cluster.sh),
through hpsearch.slurm.commands.Slurm with and without `cluster=`: a tiny job in each
partition lands on that partition's nodes; on the second cluster (one slurmdbd, reached
with --clusters from the first one's SLURM_CONF) a job runs, squeue and sacct follow it
there and not on the first, and scancel cancels it. Names come from the fixture
(tests/slurm/conftest.py), never typed here."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from hpsearch.slurm.commands import Slurm
from hpsearch.slurm.parse import JobRecord

from .conftest import SlurmCluster, _not_available

DEADLINE_S = 30


def script(*lines: str) -> str:
    return "\n".join(["#!/bin/bash", *lines]) + "\n"


def finished(slurm: Slurm, job_ids: list[str]) -> dict[str, JobRecord]:
    """Each job's sacct record once final and under its own name (for a moment after a
    short job ends sacct may call it "allocation")."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        records = {r.job_id: r for r in slurm.sacct(job_ids) or []}
        if all(j in records and records[j].finished and records[j].name != "allocation"
               for j in job_ids):
            return records
        assert time.monotonic() < deadline, f"sacct: not all of {job_ids} finished: {records}"
        time.sleep(0.3)


@pytest.fixture
def second(slurm_cluster: SlurmCluster) -> str:
    if slurm_cluster.second_cluster is None:
        _not_available("the test cluster runs no second cluster (HPSEARCH_SLURM_SECOND_CLUSTER"
                       "=none, or it was started before there was one: stop, then start)")
    return slurm_cluster.second_cluster


def test_a_job_in_each_partition_runs_on_that_partitions_nodes(slurm_cluster: SlurmCluster,
                                                                 tmp_path: Path):
    """With and without naming the local cluster: the same jobs, the same nodes."""
    parts = slurm_cluster.partitions
    if len(parts) < 3:
        _not_available(f"the test cluster has partitions {sorted(parts)}, not three (started "
                       f"before there were more: stop, then start)")
    left, right = (set(nodes) for name, nodes in list(parts.items())[1:3])
    assert left and right and not left & right
    assert left | right == set(next(iter(parts.values()))) == set(slurm_cluster.nodes)
    submitted = {}
    for cluster in (None, slurm_cluster.name):
        slurm = Slurm(env=slurm_cluster.env, timeout=30, cluster=cluster)
        for partition in parts:
            job = slurm.sbatch(script("true"), ["-p", partition, "-J", f"hps-{partition}",
                                                "-o", "/dev/null"], cwd=tmp_path)
            submitted[job] = (slurm, partition)
    for job, (slurm, partition) in submitted.items():
        (rec,) = finished(slurm, [job]).values()
        assert (rec.name, rec.state) == (f"hps-{partition}", "COMPLETED")
        assert rec.nodes and set(rec.nodes) <= set(parts[partition]), (partition, rec)


def test_the_second_cluster_through_its_wrapper(slurm_cluster: SlurmCluster, second: str,
                                                tmp_path: Path):
    local = Slurm(env=slurm_cluster.env, timeout=30)
    there = Slurm(env=slurm_cluster.env, timeout=30, cluster=second)
    assert {slurm_cluster.name, second} <= set(local.clusters())
    assert there.config_value("ClusterName") == second
    assert {n.name for n in there.sinfo_nodes()} == set(slurm_cluster.second_cluster_nodes)

    done = there.sbatch(script("echo $SLURMD_NODENAME"),
                        ["-J", "hps-there", "-o", f"{tmp_path}/out"])
    sleeping = there.sbatch(script("sleep 300"), ["-J", "hps-sleep", "-o", "/dev/null"],
                            cwd=tmp_path)
    deadline = time.monotonic() + DEADLINE_S
    while (rec := {r.job_id: r for r in there.squeue([sleeping])}.get(sleeping)) is None \
            or rec.state != "RUNNING":
        assert time.monotonic() < deadline, f"squeue on {second}: {rec}"
        time.sleep(0.3)
    assert set(rec.nodes) <= set(slurm_cluster.second_cluster_nodes)
    # The first cluster does not have it (an id of its own may be the same number).
    assert not [r for r in local.squeue([sleeping])
                if set(r.nodes) & set(slurm_cluster.second_cluster_nodes)]

    there.scancel([sleeping])
    records = finished(there, [done, sleeping])
    assert (records[sleeping].state, records[done].state) == ("CANCELLED", "COMPLETED")
    assert records[done].nodes == ((tmp_path / "out").read_text().strip(),)
    assert set(records[done].nodes) <= set(slurm_cluster.second_cluster_nodes)
    assert there.squeue([sleeping]) == []
    assert not [r for r in local.sacct([done]) or []
                if r.name == "hps-there" and r.submit == records[done].submit]
    assert set(there.calls) == {"scontrol", "sinfo", "sbatch", "squeue", "scancel", "sacct"}


def test_partition_load_counts_idle_nodes_and_every_pending_job(slurm_cluster: SlurmCluster,
                                                                tmp_path: Path):
    """What the broker weighs a site by (Slurm.partition_load): a partition's idle nodes
    (none while a job holds them all, none while it is DOWN) and every job pending there,
    whoever's; the cluster's default partition where none is named."""
    slurm = Slurm(env=slurm_cluster.env, timeout=30)
    left, right = list(slurm_cluster.partitions)[1:3]
    width = len(slurm_cluster.partitions[left])
    holder = slurm.sbatch(script("sleep 60"), ["-p", left, "-N", str(width), "--exclusive",
                                               "-o", "/dev/null"], cwd=tmp_path)
    waiting = slurm.sbatch(script("true"), ["-p", left, "-o", "/dev/null"], cwd=tmp_path)
    try:
        for _ in range(50):  # until slurmctld has placed the holder
            idle, pending = slurm.partition_load(left)
            if idle == 0:
                break
            time.sleep(0.2)
        assert (idle, pending) == (0, {waiting}), (idle, pending)
        slurm_cluster.run("scontrol", "update", f"PartitionName={right}", "State=DOWN")
        try:
            assert slurm.partition_load(right)[0] == 0
        finally:
            slurm_cluster.run("scontrol", "update", f"PartitionName={right}", "State=UP")
        default_idle, default_pending = slurm.partition_load(None)  # debug: every node
        assert default_pending == set(), default_pending  # the waiting job is left's only
        assert default_idle <= len(slurm_cluster.nodes) - width
    finally:
        slurm.scancel([holder, waiting])

"""`submit --driver-job` outlives its own time limit and preemption: near the limit Slurm
signals it (SIGUSR1), it leaves its trials running, requeues itself, and the next run adopts
them. A SIGTERM that is not `hpsearch cancel`'s (preemption, the limit itself) does the same.
Only `hpsearch cancel` makes it cancel trials."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from tests.helpers import event_kinds, job_prefix, read_store

# Waits on Slurm's clocks and stops or limits its daemons: scripts/test.sh runs these beside
# the tests without a cluster, never beside other cluster tests (docs/testing.md#tiers).
pytestmark = pytest.mark.slurm_clock

RUN = uuid.uuid4().hex[:6]
ROOT = Path(__file__).resolve().parents[2]
SPEC = """
name: {name}
command: 'sleep {sleep}; echo "@hpsearch step=0 loss={{x}}"'
search: {{strategy: random, trials: {trials}, parallel: {trials}, seed: 2,
          space: {{x: {{low: 0.0, high: 1.0}}}}}}
objective: {{metric: loss}}
resources: {{time: "00:05:00"}}
executor: {{type: slurm, poll_interval: 0.5, array: false}}
"""


def _submit(cli, slurm_cluster, label: str, trials: int, sleep: int, args=()):
    name = f"drvjob-{label}-{RUN}"
    spec = cli.write_spec(SPEC.format(name=name, trials=trials, sleep=sleep), f"{name}.yaml")
    env = {**slurm_cluster.env, "PYTHONPATH": str(ROOT)}
    out = cli("submit", spec, "--driver-job", *args, env=env, check=0).stdout
    return name, out.split("Slurm job ")[1].split()[0], env


def _wait_until(what: str, test, timeout: float):
    deadline = time.monotonic() + timeout
    while not (value := test()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(1)
    return value


def _trial_jobs_once(cli, slurm_cluster, name: str, trials: int) -> None:
    """Each trial completed in its first attempt, one job each in accounting: nothing was
    cancelled or submitted again when the driver moved."""
    exp, rows = read_store(cli.runs, name)
    assert exp.status == "completed", exp
    assert [(t.state, t.attempt) for t in rows] == [("completed", 1)] * trials, \
        [(t.id, t.state, t.attempt, t.error) for t in rows]
    prefix = job_prefix(cli.runs, name)
    out = slurm_cluster.run("sacct", "--parsable2", "--noheader", "-X", "-S", "now-1hour",
                            "-o", "JobName,State", "--name",
                            ",".join(f"{prefix}.{t.id}.1" for t in rows)).stdout
    records = [line.split("|") for line in out.splitlines() if line]
    assert sorted(n for n, _ in records) == sorted(f"{prefix}.{t.id}.1" for t in rows)
    assert {state for _, state in records} == {"COMPLETED"}


@pytest.mark.timeout(420)
def test_driver_job_near_its_time_limit_requeues_itself_and_trials_go_on(cli, slurm_cluster):
    """A 2-minute driver job (SIGUSR1 30 s before its end, which Slurm may send up to a
    minute early) over trials of 100 s: the driver must leave and come back (Slurm requeues
    the same job id) at least once; every trial runs once, to completion."""
    name, job_id, _ = _submit(cli, slurm_cluster, "limit", trials=2, sleep=100,
                              args=("--driver-time", "2"))
    _wait_until("the search to complete", lambda: read_store(cli.runs, name)[0].status
                in ("completed", "incomplete", "cancelled"), timeout=360)
    _trial_jobs_once(cli, slurm_cluster, name, 2)
    kinds = event_kinds(cli.runs, name)
    assert "driver_left" in kinds and "cancelled" not in kinds
    runs = slurm_cluster.run("sacct", "--parsable2", "--noheader", "-X", "-D", "-j", job_id,
                             "-o", "State").stdout.split()
    assert runs.count("REQUEUED") >= 1, runs  # the same driver job, run again
    assert (cli.runs / name / "driver.job").read_text().strip() == job_id


@pytest.mark.timeout(300)
def test_a_sigterm_that_is_not_cancel_leaves_trials_running(cli, slurm_cluster):
    """Preemption and an admin's scancel reach the driver job as SIGTERM: it leaves its
    trials running and requeues itself; then `hpsearch cancel` really cancels them."""
    name, job_id, env = _submit(cli, slurm_cluster, "term", trials=2, sleep=120)
    _wait_until("both trials' jobs", lambda: (rows := read_store(cli.runs, name)[1])
                and len(rows) == 2 and all(r.job_id for r in rows), timeout=120)
    slurm_cluster.run("scancel", "--full", "--signal=TERM", job_id)  # as preemption does
    _wait_until("the driver to leave", lambda: "driver_left" in event_kinds(cli.runs, name),
                timeout=60)
    rows = read_store(cli.runs, name)[1]
    states = slurm_cluster.run("squeue", "-h", "-o", "%T", "-j",
                               ",".join(r.job_id for r in rows)).stdout.split()
    assert states == ["RUNNING", "RUNNING"]  # not cancelled
    _wait_until("the driver job to run again", lambda: slurm_cluster.run(
        "squeue", "-h", "-o", "%T", "-j", job_id).stdout.split() in (["RUNNING"], ["PENDING"]),
        timeout=60)
    stopped = cli("cancel", name, env=env, check=0, timeout=180).stdout
    assert "cancel" in stopped
    _wait_until("the trials to be cancelled", lambda: [r.state for r in read_store(
        cli.runs, name)[1]] == ["cancelled"] * 2, timeout=120)
    # none left in squeue (a job Slurm is still completing, CG, stays listed a moment)
    _wait_until("no job of the search in squeue", lambda: slurm_cluster.run(
        "squeue", "-h", "-o", "%i", "-j", ",".join([job_id] + [r.job_id for r in rows]),
        check=False).stdout.split() == [], timeout=60)


def test_a_driver_time_slurm_cannot_read_is_bad_input_and_writes_nothing(cli, slurm_cluster):
    name = f"drvjob-badtime-{RUN}"
    spec = cli.write_spec(SPEC.format(name=name, trials=1, sleep=0), f"{name}.yaml")
    proc = cli("submit", spec, "--driver-job", "--driver-time", "1\n#SBATCH --partition=x",
               env=slurm_cluster.env)
    assert proc.returncode == 2 and "--driver-time" in proc.stderr, proc.stderr
    assert not (cli.runs / name).exists()

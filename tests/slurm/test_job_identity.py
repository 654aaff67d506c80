"""A driver that finds a job by name (its id was never stored) takes only its own: never a job
of an earlier experiment of the same name, nor another user's job of the same name."""

from __future__ import annotations

import pwd
import shutil
import signal
import subprocess
import uuid

import pytest

from tests.helpers import ensure_system_entry, job_prefix, read_store

RUN = uuid.uuid4().hex[:6]
OTHER_USER = "hpsearch-other"
SPEC = """
name: {name}
command: 'sleep {sleep}; echo "@hpsearch step=0 loss={{x}}"'
search: {{strategy: random, trials: 1, parallel: 1, seed: 1, space: {{x: {{low: 0.0, high: 1.0}}}}}}
objective: {{metric: loss}}
resources: {{time: "00:05:00"}}
executor: {{type: slurm, poll_interval: 0.5, array: false}}
"""


def _spec(cli, name: str, sleep: int):
    return cli.write_spec(SPEC.format(name=name, sleep=sleep), f"{name}.yaml")


def _killed_at(cli, slurm_cluster, spec, fault: str) -> None:
    proc = cli("submit", spec, env={**slurm_cluster.env, "HPSEARCH_FAULT": fault})
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stdout, proc.stderr)


def _job_ids_named(slurm_cluster, name: str) -> list[str]:
    out = slurm_cluster.run("squeue", "-h", "-t", "all", "--name", name, "-o", "%i").stdout
    return out.split()


def test_a_recreated_experiment_never_adopts_the_jobs_of_the_old_one(cli, slurm_cluster):
    """The old experiment dies between sbatch and storing the job id; its folder is deleted
    and the experiment made again under the same name, then killed before its own sbatch.
    Its resume must submit its own job, not adopt the old one (same trial, same attempt)."""
    name = f"ident-again-{RUN}"
    spec = _spec(cli, name, sleep=20)
    _killed_at(cli, slurm_cluster, spec, "after_launch:1")  # its job runs, id unknown
    old = _job_ids_named(slurm_cluster, f"{job_prefix(cli.runs, name)}.0.1")
    assert len(old) == 1
    shutil.rmtree(cli.runs / name)
    spec = _spec(cli, name, sleep=1)
    _killed_at(cli, slurm_cluster, spec, "after_insert:1")  # stored, never submitted
    cli("resume", name, env=slurm_cluster.env, check=0, timeout=300)
    _, (trial,) = read_store(cli.runs, name)
    assert trial.state == "completed" and trial.attempt == 1
    assert trial.job_id not in old
    assert _job_ids_named(slurm_cluster, f"{job_prefix(cli.runs, name)}.0.1") == [trial.job_id]
    slurm_cluster.run("scancel", *old)


@pytest.fixture(scope="module")
def other_user(slurm_cluster):
    """A second Unix user with a Slurm association (the cluster enforces associations)."""
    ensure_system_entry(["useradd", "--no-create-home", "--shell", "/bin/sh"], pwd.getpwnam,
                        OTHER_USER)
    slurm_cluster.run("sacctmgr", "-i", "add", "user", OTHER_USER, "account=root",
                      check=False)
    return OTHER_USER


def test_another_users_job_of_the_same_name_is_never_adopted(cli, slurm_cluster, other_user):
    """Another user submits a job under the exact name this experiment's trial 0 would
    have, while that trial is stored but not submitted (driver killed): resume submits its
    own job and leaves the other user's alone."""
    name = f"ident-user-{RUN}"
    _killed_at(cli, slurm_cluster, _spec(cli, name, sleep=1), "after_insert:1")
    job_name = f"{job_prefix(cli.runs, name)}.0.1"
    foreign = subprocess.run(
        ["runuser", "-u", other_user, "--", "sbatch", "--parsable", f"--job-name={job_name}",
         "--output=/dev/null", "--chdir=/tmp", "--wrap", "sleep 30"],
        env=slurm_cluster.env, capture_output=True, text=True, timeout=60)
    assert foreign.returncode == 0, foreign.stderr
    foreign_id = foreign.stdout.strip().split(";")[0]
    try:
        cli("resume", name, env=slurm_cluster.env, check=0, timeout=300)
        _, (trial,) = read_store(cli.runs, name)
        assert trial.state == "completed" and trial.job_id != foreign_id
        owner = slurm_cluster.run("squeue", "-h", "-j", foreign_id, "-o", "%u|%T").stdout
        assert owner.strip().split("|")[0] == other_user  # left alone, still its own
    finally:
        slurm_cluster.run("scancel", foreign_id, check=False)


def test_cancel_with_no_driver_finds_and_cancels_a_job_whose_id_was_never_stored(
        cli, slurm_cluster):
    """The driver dies between sbatch and storing the job id: `hpsearch cancel` (no driver
    running) finds the job by its name and cancels it, instead of leaving it to run."""
    name = f"ident-cancel-{RUN}"
    _killed_at(cli, slurm_cluster, _spec(cli, name, sleep=120), "after_launch:1")
    (trial,) = read_store(cli.runs, name)[1]
    assert trial.state == "submitting" and not trial.job_id
    job_name = f"{job_prefix(cli.runs, name)}.0.1"
    (job_id,) = _job_ids_named(slurm_cluster, job_name)
    out = cli("cancel", name, env=slurm_cluster.env, check=0).stdout
    assert "stopped 1 " in out, out
    assert read_store(cli.runs, name)[1][0].state == "cancelled"
    state = slurm_cluster.run("squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T",
                              check=False).stdout.split()
    assert state in ([], ["CANCELLED"], ["COMPLETING"]), state

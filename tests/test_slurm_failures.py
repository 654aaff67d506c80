"""Slurm command failures are classified once (hpsearch.slurm.failures), from what Slurm
really printed on the test cluster (tests/slurm/captured/failures/), and back-off is capped."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from hpsearch.executors.slurm_health import SlurmHealth
from hpsearch.slurm.failures import (
    LIMIT,
    PERMANENT,
    TRANSIENT,
    Backoff,
    SlurmError,
    classify,
    retrying,
)

CAPTURED = Path(__file__).parent / "slurm" / "captured" / "failures"
KINDS = {"transient": TRANSIENT, "limit": LIMIT, "permanent": PERMANENT}


def _captured():
    for path in sorted(CAPTURED.glob("*.txt")):
        first, _, stderr = path.read_text().partition("\n")
        yield pytest.param(KINDS[path.name.split("-")[0]], int(first.split("=")[1]), stderr,
                           id=path.stem)


@pytest.mark.parametrize("kind, returncode, stderr", list(_captured()))
def test_each_captured_failure_gets_its_kind(kind, returncode, stderr):
    assert returncode != 0
    assert classify(returncode, stderr) == kind
    assert SlurmError(["sbatch"], returncode, stderr).kind == kind


def test_captures_cover_every_kind_and_the_faults_of_the_issue():
    names = {p.stem for p in CAPTURED.glob("*.txt")}
    assert {"transient-sacct-slurmdbd-down", "transient-squeue-slurmctld-down",
            "transient-sbatch-slurmctld-down", "transient-squeue-slurmctld-stopped",
            "limit-sbatch-maxsubmitjobs", "permanent-sbatch-partition"} <= names


@pytest.mark.parametrize("text, kind", [
    ("sbatch: error: QOSMaxSubmitJobPerUserLimit\nsbatch: error: Batch job submission "
     "failed: Job violates accounting/QOS policy (job submit limit, user's size and/or time "
     "limits)", LIMIT),
    ("squeue: error: Rate limit exceeded, please retry later", TRANSIENT),
    ("sbatch: error: Slurm temporarily unable to accept job, sleeping and retrying", TRANSIENT),
    ("sacct: error: slurmdbd: Zero Bytes were transmitted or received", TRANSIENT),
    ("sbatch: error: Batch job submission failed: Invalid qos specification", PERMANENT),
    ("sbatch: error: QOSMaxWallDurationPerJobLimit\nsbatch: error: Batch job submission "
     "failed: Job violates accounting/QOS policy (job submit limit, user's size and/or time "
     "limits)", PERMANENT),  # asks for more time than the QOS ever allows: never accepted
    ("sbatch: error: Batch job submission failed: Job violates accounting/QOS policy (job "
     "submit limit, user's size and/or time limits)", LIMIT),  # no reason given: wait
    ("sbatch: error: Batch job submission failed: Node count specification invalid",
     PERMANENT),
])
def test_messages_of_other_sites_and_versions(text, kind):
    assert classify(1, text) == kind


def test_a_timeout_is_transient_and_a_missing_command_permanent():
    assert SlurmError(["squeue"], None, "", "did not finish in 60 s").kind == TRANSIENT
    assert SlurmError(["squeue"], None, "", "could not run", kind=PERMANENT).kind == PERMANENT


def test_backoff_grows_capped_with_jitter_and_remembers_since():
    backoff = Backoff(base=2.0, cap=60.0, jitter=0.5, rng=random.Random(1))
    delays = [backoff.failed() for _ in range(10)]
    assert backoff.since is not None
    for n, delay in enumerate(delays):
        full = min(60.0, 2.0 * 2 ** n)
        assert full * 0.5 <= delay <= full
    assert max(delays) <= 60.0 and len(set(delays)) == len(delays)  # jittered
    assert backoff.ok() is not None and backoff.since is None and backoff.ok() is None


def test_retrying_retries_transient_only():
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise SlurmError(["squeue"], 1, "Unable to contact slurm controller")
        return "ok"

    fast = Backoff(base=0.001, cap=0.001)
    assert retrying(flaky, attempts=5, backoff=fast) == "ok" and len(calls) == 3
    with pytest.raises(SlurmError):
        retrying(lambda: (_ for _ in ()).throw(
            SlurmError(["sbatch"], 1, "Invalid partition name specified")), backoff=fast)


def test_the_outage_note_keeps_slurms_reason_however_many_job_ids_were_asked_for():
    """`hpsearch status` shows the note's one line: the reason Slurm printed last must be in
    it even when the failed sacct named hundreds of jobs (its command line alone is longer
    than the line)."""
    _, _, stderr = (CAPTURED / "transient-sacct-slurmdbd-down.txt").read_text().partition("\n")
    for count in (2, 500):
        argv = ["sacct", "--parsable2", "--noheader", "-X", "--format=JobID,JobName,State",
                "-j", ",".join(str(19863 + i) for i in range(count))]
        exc = SlurmError(argv, 1, stderr)
        assert exc.summary.startswith("`sacct` exited 1: slurm_persist_conn_open_without_init")
        assert exc.summary.endswith("; Problem talking to the database: Connection refused")
        health = SlurmHealth(interval=1.0)
        health.query_failed(exc)
        (note,) = health.take_notes()
        assert note.kind == "slurm_unreachable" and "\n" not in note.message
        assert note.message.startswith("Slurm unreachable since ")
        assert "Problem talking to the database: Connection refused" in note.message
        assert len(note.message) < 450
        assert "19863" in str(exc)  # the full message still names the jobs


def test_a_timeout_note_says_which_command_and_how_long():
    health = SlurmHealth(interval=1.0)
    health.query_failed(SlurmError(["squeue", "-h", "-j", "1,2,3"], None, "",
                                   "did not finish in 60 s"))
    (note,) = health.take_notes()
    assert "`squeue` did not finish in 60 s;" in note.message


def test_a_limit_note_keeps_the_limits_name_that_sbatch_prints_first():
    _, _, stderr = (CAPTURED / "limit-sbatch-maxsubmitjobs.txt").read_text().partition("\n")
    health = SlurmHealth(interval=1.0)
    health.submit_failed(SlurmError(["sbatch", "--parsable", "job.sh"], 1, stderr), LIMIT)
    (note,) = health.take_notes()
    assert note.message.startswith("sbatch refused by a limit since ")
    assert ("`sbatch` exited 1: AssocMaxSubmitJobLimit; Batch job submission failed: Job "
            "violates accounting/QOS policy") in note.message

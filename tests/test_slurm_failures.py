"""Slurm command failures are classified once (hpsearch.slurm.failures), from what Slurm
really printed on the test cluster (tests/slurm/captured/failures/), and back-off is capped."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from hpsearch.slurm.commands import SlurmError
from hpsearch.slurm.failures import LIMIT, PERMANENT, TRANSIENT, Backoff, classify, retrying

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

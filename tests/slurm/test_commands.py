"""hpsearch.slurm.commands.Slurm against the real test cluster (the `slurm_cluster` fixture):
submit, watch through sacct and squeue, cancel, look at nodes and topology, and fail
clearly. sacct lags slurmctld by a second or more, so every wait polls with a deadline."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpsearch.errors import HpsearchError
from hpsearch.slurm.commands import Slurm
from hpsearch.slurm.failures import SlurmError
from hpsearch.slurm.parse import JobRecord, QueueRecord

from .conftest import SlurmCluster

DEADLINE_S = 30


@pytest.fixture
def slurm(slurm_cluster: SlurmCluster) -> Slurm:
    return Slurm(env=slurm_cluster.env, timeout=30)


def script(*lines: str) -> str:
    return "\n".join(["#!/bin/bash", *lines]) + "\n"


def wait_finished(slurm: Slurm, job_id: str) -> JobRecord:
    """The job's sacct record once final, and under its own name (for a moment after a
    short job ends sacct may call it "allocation")."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        records = {r.job_id: r for r in slurm.sacct([job_id]) or []}
        rec = records.get(job_id)
        if rec is not None and rec.finished and rec.name != "allocation":
            return rec
        assert time.monotonic() < deadline, f"sacct: job {job_id} not finished: {rec}"
        time.sleep(0.3)


def wait_queued(slurm: Slurm, job_id: str, state: str | None) -> QueueRecord | None:
    """Until squeue shows the job in `state`, or (state None) no longer shows it."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        rec = {r.job_id: r for r in slurm.squeue([job_id])}.get(job_id)
        if (rec is None and state is None) or (rec is not None and rec.state == state):
            return rec
        assert time.monotonic() < deadline, f"squeue: job {job_id} is {rec}, not {state}"
        time.sleep(0.3)


def test_submitted_script_completes_on_a_node_sacct_names(slurm: Slurm, tmp_path: Path):
    job = slurm.sbatch(script(f"#SBATCH --output={tmp_path}/out", "#SBATCH -J hps-ok",
                              "echo $SLURMD_NODENAME"))
    assert job.isdigit()
    rec = wait_finished(slurm, job)
    assert (rec.job_id, rec.name, rec.state, rec.exit_code, rec.signal) == (
        job, "hps-ok", "COMPLETED", 0, 0)
    assert rec.nodes == ((tmp_path / "out").read_text().strip(),)
    assert rec.submit and rec.start and rec.end and rec.elapsed is not None
    assert slurm.calls["sbatch"] == 1 and slurm.calls["sacct"] >= 1
    assert set(slurm.calls) == {"sbatch", "sacct"}


def test_failing_job_is_failed_with_its_exit_code(slurm: Slurm, tmp_path: Path):
    job = slurm.sbatch(script("exit 3"), ["-o", "/dev/null", "-J", "hps-fail"], cwd=tmp_path)
    rec = wait_finished(slurm, job)
    assert (rec.state, rec.exit_code, rec.signal, rec.finished) == ("FAILED", 3, 0, True)


def test_squeue_sees_a_running_job_on_its_node_and_scancel_cancels_it(
        slurm: Slurm, slurm_cluster: SlurmCluster):
    job = slurm.sbatch(script("sleep 300"), ["-o", "/dev/null", "-J", "hps-sleep"])
    running = wait_queued(slurm, job, "RUNNING")
    assert running.reason is None and len(running.nodes) == 1
    assert running.nodes[0] in slurm_cluster.nodes
    # scontrol agrees, also in sacct's shape (the stand-in without accounting).
    fields = slurm.scontrol_show_job(job)
    assert (fields["JobId"], fields["JobState"], fields["NodeList"]) == (
        job, "RUNNING", running.nodes[0])
    rec = slurm.job_record(job)
    assert (rec.job_id, rec.state, rec.nodes, rec.exit_code) == (
        job, "RUNNING", running.nodes, None)
    slurm.scancel([job])
    wait_queued(slurm, job, None)
    rec = wait_finished(slurm, job)
    assert rec.state == "CANCELLED" and rec.raw_state.startswith("CANCELLED by ")
    assert rec.nodes == running.nodes
    slurm.scancel([job])  # already gone: not an error
    assert slurm.calls["scancel"] == 2 and slurm.calls["scontrol"] == 2


def test_scancel_with_a_signal_reaches_the_batch_shell(slurm: Slurm, tmp_path: Path):
    mark = tmp_path / "got_usr1"
    job = slurm.sbatch(script(f"trap 'echo usr1 > {mark}; exit 0' USR1",
                              "sleep 300 & wait"), ["-o", "/dev/null"])
    wait_queued(slurm, job, "RUNNING")
    time.sleep(0.5)  # the shell has set its trap
    slurm.scancel([job], signal="USR1")
    rec = wait_finished(slurm, job)
    assert rec.state == "COMPLETED" and mark.read_text() == "usr1\n"


def test_an_array_cancelled_while_pending_as_a_whole_has_one_bare_record(slurm: Slurm):
    """The Slurm behaviour the executor relies on (SlurmExecutor._cancelled_before_it_split):
    every task cancelled before any split off, the array has one record, CANCELLED and on no
    node, under its bare id ("A") or its range ("A_[0-1]", read as one record per task;
    which one varies from run to run), while `sacct -j A_0,A_1` and squeue print nothing."""
    array = slurm.sbatch(script("sleep 300"), ["--hold", "-a", "0-1", "-o", "/dev/null"])
    tasks = [f"{array}_0", f"{array}_1"]
    slurm.scancel(tasks)
    deadline = time.monotonic() + DEADLINE_S
    while not any(r.finished for r in slurm.sacct([array])):
        assert time.monotonic() < deadline, slurm.sacct([array])
        time.sleep(0.3)
    records = slurm.sacct([array])
    assert {r.job_id for r in records} in ({array}, set(tasks)), records
    assert all((r.state, r.nodes) == ("CANCELLED", ()) for r in records)
    assert slurm.sacct(tasks) == [] and slurm.squeue(tasks) == []


def test_ctrl_c_at_the_terminal_reaches_the_driver_not_its_slurm_command(
        slurm_cluster: SlurmCluster, tmp_path: Path):
    """A terminal's Ctrl-C is SIGINT to the whole foreground process group. The driver
    handles it (it cancels its trials); the sbatch or squeue it runs at that moment must not
    die of it: an sbatch killed halfway may or may not have submitted its job. A slow
    `squeue` (a wrapper that sleeps first) runs while the group gets SIGINT."""
    started = tmp_path / "squeue-started"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "squeue").write_text(f"#!/bin/sh\ntouch '{started}'\nsleep 2\n"
                                    f"exec '{shutil.which('squeue')}' \"$@\"\n")
    (bin_dir / "squeue").chmod(0o755)
    driver = subprocess.Popen(
        [sys.executable, "-c", "import signal\n"
         "signal.signal(signal.SIGINT, lambda *a: print('driver: SIGINT', flush=True))\n"
         "from hpsearch.slurm.commands import Slurm\n"
         "slurm = Slurm()\n"
         "print('jobs', len(slurm.squeue()), 'runs', slurm.calls['squeue'])\n"],
        env={**slurm_cluster.env, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + DEADLINE_S
    while not started.exists():
        assert driver.poll() is None and time.monotonic() < deadline, driver.communicate()
        time.sleep(0.05)
    os.killpg(driver.pid, signal.SIGINT)
    out, err = driver.communicate(timeout=DEADLINE_S)
    assert driver.returncode == 0, err
    assert "driver: SIGINT" in out and "runs 1" in out, out  # not killed, so not run again


def test_jobs_slurm_does_not_know(slurm: Slurm):
    assert slurm.squeue(["999999"]) == []  # exit 1, "Invalid job id specified"
    assert slurm.squeue(["999999", "999998"]) == []  # exit 0
    assert slurm.sacct(["999999"]) == []
    assert slurm.scontrol_show_job("999999") == {}
    assert slurm.job_record("999999") is None
    assert slurm.sacct([]) == [] and slurm.squeue([]) == []
    slurm.scancel(["999999"])


def test_job_ids_are_batched_and_chunked(slurm_cluster: SlurmCluster, tmp_path: Path):
    slurm = Slurm(env=slurm_cluster.env, max_ids_per_call=2)
    jobs = [slurm.sbatch(script("true"), ["-o", "/dev/null"]) for _ in range(3)]
    for job in jobs:
        wait_finished(slurm, job)
    slurm.calls.clear()
    records = slurm.sacct(jobs + jobs[:1])  # a repeated id is asked for once
    assert sorted(r.job_id for r in records) == sorted(jobs)
    assert slurm.calls["sacct"] == 2  # 3 ids, 2 per call
    slurm.squeue(jobs)
    assert slurm.calls["squeue"] == 2


def test_job_id_by_name_finds_the_newest(slurm: Slurm):
    name = f"hps-find-{time.time_ns()}"
    first = slurm.sbatch(script("true"), ["-o", "/dev/null", "-J", name])
    second = slurm.sbatch(script("sleep 300"), ["-o", "/dev/null", "-J", name])
    try:
        assert slurm.job_id_by_name(name) == second
        assert slurm.job_id_by_name(name + "-none") is None
    finally:
        slurm.scancel([first, second])


def test_sinfo_nodes_lists_the_eight_nodes(slurm: Slurm, slurm_cluster: SlurmCluster):
    nodes = slurm.sinfo_nodes()
    assert tuple(n.name for n in nodes) == slurm_cluster.nodes
    # each node's partitions, in any order (sinfo's order of them varies)
    assert {frozenset(n.partitions) for n in nodes} == {
        frozenset({"debug", "left"}), frozenset({"debug", "right", "scavenger", "urgent"})}
    assert {n.state for n in nodes} <= {"IDLE", "MIXED", "ALLOCATED", "COMPLETING"}
    assert slurm.calls["sinfo"] == 1


def test_topology_is_four_leaves_and_a_spine(slurm: Slurm, slurm_cluster: SlurmCluster):
    switches = {s.name: s for s in slurm.topology()}
    assert {name: (s.level, s.nodes) for name, s in switches.items() if s.level == 0} == {
        f"leaf{i}": (0, (f"node{2 * i - 1}", f"node{2 * i}")) for i in range(1, 5)}
    assert (switches["spine"].level, switches["spine"].nodes, switches["spine"].switches) == (
        1, slurm_cluster.nodes, ("leaf1", "leaf2", "leaf3", "leaf4"))


def test_node_addr(slurm: Slurm):
    assert slurm.node_addr("node3") == "127.0.0.1"
    with pytest.raises(SlurmError, match=r"`scontrol show node -o nodeX` exited 1: "
                                         r"Node nodeX not found"):
        slurm.node_addr("nodeX")


def test_node_addrs_of_a_pilots_nodes_in_one_call(slurm: Slurm):
    """What a pilot tells its trials (their MASTER_ADDR), asked once for all its nodes."""
    assert slurm.node_addrs(["node1", "node3", "node4"]) == {
        "node1": "127.0.0.1", "node3": "127.0.0.1", "node4": "127.0.0.1"}


def test_sacct_without_accounting_returns_none(slurm_cluster: SlurmCluster, tmp_path: Path):
    conf = tmp_path / "slurm.conf"
    conf.write_text("".join(line for line in slurm_cluster.conf.read_text().splitlines(True)
                            if not line.startswith("AccountingStorage")))
    slurm = Slurm(env={**slurm_cluster.env, "SLURM_CONF": str(conf)})
    assert slurm.sacct(["1"]) is None
    assert slurm.calls["sacct"] == 1


def test_failing_command_raises_slurm_error_naming_it(slurm: Slurm):
    with pytest.raises(SlurmError) as caught:
        slurm.sbatch(script("true"), ["--partition=nonexistent", "-o", "/dev/null"])
    err = caught.value
    assert isinstance(err, HpsearchError) and err.exit_code == 1
    assert err.returncode == 1 and err.argv[:2] == ["sbatch", "--parsable"]
    assert str(err) == (
        "Slurm command `sbatch --parsable --partition=nonexistent -o /dev/null` exited 1: "
        "sbatch: error: invalid partition specified: nonexistent\n"
        "sbatch: error: Batch job submission failed: Invalid partition name specified")
    assert slurm.calls["sbatch"] == 1


def test_missing_command_and_timeout_are_slurm_errors(slurm_cluster: SlurmCluster):
    slurm = Slurm(env={**slurm_cluster.env, "PATH": "/nonexistent"})
    with pytest.raises(SlurmError, match=r"`sinfo -h -N .*` could not run .*on PATH"):
        slurm.sinfo_nodes()
    slow = Slurm(env={**slurm_cluster.env}, timeout=0.001)
    with pytest.raises(SlurmError, match=r"`sinfo .*` did not finish in 0.001 s"):
        slow.sinfo_nodes()


def test_output_that_is_not_utf8_is_read_not_fatal(slurm: Slurm, slurm_cluster: SlurmCluster):
    """An admin's drain reason in Latin-1 (bytes that are not UTF-8) reaches every sinfo the
    driver runs: it is read with a replacement character, never a UnicodeDecodeError."""
    subprocess.run([b"scontrol", b"update", b"NodeName=node8", b"State=DRAIN",
                    b"Reason=d\xe9faut m\xe9moire \xff"], env=slurm_cluster.env, check=True,
                   capture_output=True, timeout=30)
    try:
        (node8,) = [n for n in slurm.sinfo_nodes() if n.name == "node8"]
        assert node8.reason is not None and "\ufffd" in node8.reason
        assert node8.reason.startswith("d\ufffdfaut")
    finally:
        slurm_cluster.run("scontrol", "update", "NodeName=node8", "State=RESUME")

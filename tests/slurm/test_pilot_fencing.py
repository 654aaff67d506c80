"""No trial runs twice at once (issue 22, item 6): a pilot whose heartbeat goes silent may
only be slow (a stopped process, a hung file system) with its trials still running, and the
scancel the driver sends may fail. Its trials run again only once Slurm confirms its job gone,
so two attempts never write one trial dir side by side."""

from __future__ import annotations

import os
import signal
import time
import uuid

import pytest

from hpsearch.pilot import protocol
from tests.helpers import read_store
from tests.slurm.test_pilots import _attempts

RUN = uuid.uuid4().hex[:6]

SPEC = """
name: {name}
command: >-
  {on_term}
  echo "start $HPSEARCH_ATTEMPT $(date +%s.%N)" >> {mark};
  sleep $([ "$HPSEARCH_ATTEMPT" = 1 ] && echo 40 || echo 1);
  echo "end $HPSEARCH_ATTEMPT $(date +%s.%N)" >> {mark}; echo "@hpsearch step=0 loss={{x}}"
search:
  strategy: grid
  parallel: 1
  space:
    x: {{choices: [1]}}
objective: {{metric: loss}}
resources: {{nodes: 1, time: "00:02:00"}}
executor:
  type: slurm
  poll_interval: 1s
  lost_after: 3s
  pilots: {{nodes: 1, time: "00:10:00", max: 2, idle_timeout: 10, heartbeat: 0.5}}
"""

# scancel as it answers while slurmctld is unreachable
FAILING_SCANCEL = """#!/bin/sh
echo "scancel: error: Kill job error on job id $1: Unable to contact slurm controller" >&2
exit 1
"""


def _marks(path) -> list[tuple[str, float]]:
    """("start 1", when), ("end 1", when)... as the trial's shell wrote them."""
    lines = path.read_text().splitlines() if path.exists() else []
    return [(" ".join(line.split()[:2]), float(line.split()[2])) for line in lines]


def _lines(path) -> list[str]:
    return [what for what, _ in _marks(path)]


def _wait_for(what, timeout: float):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = what()
        if found:
            return found
        time.sleep(0.3)
    return None


# How the trial takes Slurm's SIGTERM when the job is cancelled: it dies of it; or it exits
# 0 without its objective, as a script that saves and exits on SIGTERM does (fresh-clone CI
# saw that end once as well: the shell, its sleep killed, ran one more command before its
# own SIGTERM, and exited 0). Before the fix the exit 0 failed the trial (no_objective, not
# retried) although the driver had given its pilot up.
ON_TERM = {"dies": "", "exits-0": "trap 'exit 0' TERM;"}


@pytest.mark.parametrize("on_term", sorted(ON_TERM))
def test_a_silent_pilot_whose_scancel_fails_has_its_trial_retried_only_once_slurm_confirms(
        cli, slurm_cluster, tmp_path, on_term):
    """The pilot process is stopped (SIGSTOP, as one hung on a dead file system) while its
    trial sleeps, and every scancel fails. The driver gives the pilot up after 5 s of silence
    but starts no second attempt while the first still runs; once Slurm really ends the job
    (and the first attempt with it), the trial runs again and completes. Before the fix,
    attempt 2 started in a new pilot ~4 s after the driver gave up, beside attempt 1."""
    name, mark = f"pl-fence-{on_term}-{RUN}", tmp_path / "attempts.log"
    spec = cli.write_spec(SPEC.format(name=name, mark=mark, on_term=ON_TERM[on_term]))
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "scancel").write_text(FAILING_SCANCEL)
    (fake / "scancel").chmod(0o755)
    env = {**slurm_cluster.env, "PATH": f"{fake}:{slurm_cluster.env['PATH']}"}
    driver = cli.popen("submit", spec, env=env)
    pilot_pid = job_id = None
    try:
        assert _wait_for(lambda: "start 1" in _lines(mark), 120), "the trial never started"
        beat = protocol.read_json(
            protocol.PilotPaths(protocol.pilots_dir(cli.runs / name) / "1").heartbeat)
        pilot_pid, job_id = beat["pid"], beat["job_id"]
        os.kill(pilot_pid, signal.SIGSTOP)
        given_up = _wait_for(lambda: [e for e in _events(cli.runs, name)
                                      if "heartbeat was silent" in e["message"]], 30)
        assert given_up, _events(cli.runs, name)
        time.sleep(8)  # a new pilot would have started attempt 2 by now (before the fix)
        assert _lines(mark) == ["start 1"]
        trials = read_store(cli.runs, name)[1]
        assert trials[0].state == "running" and trials[0].attempt == 1
        cancelled = time.time()
        slurm_cluster.run("scancel", job_id)  # Slurm ends the job after all
        out, err = driver.communicate(timeout=180)
    finally:
        if driver.poll() is None:
            driver.kill()
        if pilot_pid:
            try:
                os.kill(pilot_pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        queue = slurm_cluster.run("squeue", "-h", "-o", "%i %j").stdout.split("\n")
        left = [line.split()[0] for line in queue if f" hps.{name}." in line]
        if left:
            slurm_cluster.run("scancel", *left, check=False)
    assert driver.returncode == 0, out + err
    marks = dict(_marks(mark))
    # Slurm killed attempt 1. It signals the job's processes one by one (proctrack walks
    # them), so its sleep may die before its shell gets SIGTERM, and the shell may write
    # one more line first (fresh-clone CI saw "end 1" so, 13 s into a 40 s sleep). What
    # hpsearch owes: attempt 1 ended no sooner than Slurm's cancel, before attempt 2 began.
    assert [what for what in marks if what != "end 1"] == ["start 1", "start 2", "end 2"], marks
    assert cancelled <= marks.get("end 1", cancelled) < marks["start 2"], marks
    first, second = _attempts(cli.runs, name)[0]
    assert first["job_id"] == job_id and first["state"] != "completed"
    assert second["state"] == "completed" and second["job_id"] != job_id


def _events(runs, name) -> list[dict]:
    from hpsearch.store.reader import Reader
    from hpsearch.store.runs import STORE_FILE
    if not (runs / name / STORE_FILE).exists():
        return []
    reader = Reader(runs / name / STORE_FILE)
    try:
        return reader.events(limit=200)
    finally:
        reader.close()


def test_an_end_file_the_pilot_did_not_write_ends_nothing(cli, slurm_cluster, tmp_path):
    """A FIFO where the pilot's `ended/` file of a running attempt would go (put there by a
    process of the trial, or by anyone who could write the folder): the driver must not read
    it as the attempt's end, a lost attempt to run again beside the first; it names it once
    and the trial completes in its one attempt. Before, it ended the attempt `lost`."""
    name, mark = f"pl-fifo-{RUN}", tmp_path / "attempts.log"
    spec = cli.write_spec(
        SPEC.format(name=name, mark=mark, on_term="").replace("echo 40", "echo 10"))
    driver = cli.popen("submit", spec, env=slurm_cluster.env)
    try:
        assert _wait_for(lambda: "start 1" in _lines(mark), 120), "the trial never started"
        os.mkfifo(protocol.PilotPaths(protocol.pilots_dir(cli.runs / name) / "1").file(
            "ended", protocol.name_of(0, 1)))
        out, err = driver.communicate(timeout=120)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 0, out + err
    assert _lines(mark) == ["start 1", "end 1"]
    (only,) = _attempts(cli.runs, name)[0]
    assert only["state"] == "completed"
    refused = [e["message"] for e in _events(cli.runs, name) if "refused" in e["message"]]
    assert len(refused) == 1 and "ended" in refused[0] and "not a regular file" in refused[0]

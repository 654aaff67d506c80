"""Real Slurm faults during a running search of 2-node trials: the driver rides them out.

slurmdbd stopped for 60 s (sacct fails), slurmctld stopped and started again while accounting
lists the jobs running (sacct still answers; squeue, sbatch and the jobs' own srun fail, then
jobs are recovered from its state), and sbatch refused by an association limit
(MaxSubmitJobs set with sacctmgr; the cluster enforces limits). Each time: the driver never
exits, `hpsearch status` says what is wrong while it lasts, every trial completes, none runs
twice (one job per trial in accounting), and the trouble is in the events.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from tests.helpers import event_kinds, job_prefix, read_store

# Waits on Slurm's clocks and stops or limits its daemons: scripts/test.sh runs these beside
# the tests without a cluster, never beside other cluster tests (docs/testing.md#tiers).
pytestmark = pytest.mark.slurm_clock

RUN = uuid.uuid4().hex[:6]
SPEC = """
name: {name}
command: 'srun -N2 -n2 true && echo srun-done && sleep {sleep} && echo "@hpsearch step=0 loss={{x}}"'
search:
  strategy: random
  trials: {trials}
  parallel: 2
  seed: 3
  space:
    x: {{low: 0.0, high: 1.0}}
objective: {{metric: loss}}
resources: {{nodes: 2, time: "00:05:00"}}
executor: {{type: slurm, poll_interval: 0.5, array: false}}
"""


@contextlib.contextmanager
def _search(cli, slurm_cluster, label: str, trials: int, sleep: int):
    """(name, driver process) of a search submitted attached; stopped if the test fails."""
    name = f"fault-{label}-{RUN}"
    spec = cli.write_spec(SPEC.format(name=name, trials=trials, sleep=sleep), f"{name}.yaml")
    proc = cli.popen("submit", spec, env=slurm_cluster.env)
    try:
        yield name, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.wait(60)


def _pid(slurm_cluster, daemon: str) -> int:
    return int((slurm_cluster.state_dir / "run" / f"{daemon}.pid").read_text().strip())


def _stop_daemon(slurm_cluster, daemon: str) -> None:
    pid = _pid(slurm_cluster, daemon)
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while Path(f"/proc/{pid}").exists() and _alive(pid):
        assert time.monotonic() < deadline, f"{daemon} did not stop"
        time.sleep(0.2)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _start_daemon(slurm_cluster, daemon: str, ready: list[str]) -> None:
    """Start the daemon as the cluster script does (it daemonizes), wait until `ready`
    (a Slurm command) succeeds."""
    subprocess.run([daemon], env=slurm_cluster.env, check=True, timeout=60,
                   stdin=subprocess.DEVNULL, capture_output=True)
    deadline = time.monotonic() + 60
    while slurm_cluster.run(*ready, check=False).returncode != 0:
        assert time.monotonic() < deadline, f"{daemon} did not come back"
        time.sleep(0.5)


@contextlib.contextmanager
def _daemon_down(slurm_cluster, daemon: str, ready: list[str]):
    """The daemon stopped for the body of the `with`, started again after it (also when
    the body fails), once `ready` answers."""
    _stop_daemon(slurm_cluster, daemon)
    try:
        yield
    finally:
        _start_daemon(slurm_cluster, daemon, ready)


def _wait_for(what: str, test, timeout: float = 120, proc=None):
    deadline = time.monotonic() + timeout
    while True:
        value = test()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the driver exited {proc.returncode} while waiting for {what}\n"
                        f"{out[-3000:]}\n{err[-3000:]}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def _jobs_started(cli, name: str, count: int):
    def test():
        try:
            trials = read_store(cli.runs, name)[1]
        except Exception:  # noqa: BLE001 - not created yet
            return None
        return len([t for t in trials if t.job_id]) >= count
    return test


def _sruns_done(cli, name: str, count: int):
    """`count` trials are past their srun step: a job step needs slurmctld to start, so a
    trial whose srun meets slurmctld down fails on its own (as it would anywhere)."""
    def test():
        logs = (cli.runs / name / "trials").glob("*/stdout.log")
        return sum("srun-done" in log.read_text() for log in logs) >= count
    return test


def _running_in_accounting(cli, slurm_cluster, name: str, count: int):
    """sacct (slurmdbd) lists `count` of the search's jobs as running: from then on only
    squeue tells that slurmctld is down."""
    def test():
        out = slurm_cluster.run("sacct", "--parsable2", "--noheader", "-X", "-S", "now-1hour",
                                "-o", "JobName,State", check=False).stdout
        prefix = job_prefix(cli.runs, name)
        return sum(line.startswith(prefix) and line.endswith("|RUNNING")
                   for line in out.split()) >= count
    return test


def _finish(proc, timeout: float = 300) -> str:
    """Wait for the driver's own end: exit 0 (every trial completed). On another exit code
    the assertion shows what it printed, its trials' errors included."""
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, (proc.returncode, out[-6000:], err[-3000:])
    return out


def _each_trial_once(cli, slurm_cluster, name: str, trials: int) -> list:
    """Every trial completed with one attempt, and accounting holds one job per trial."""
    exp, rows = read_store(cli.runs, name)
    assert exp.status == "completed"
    assert [(t.state, t.attempt) for t in rows] == [("completed", 1)] * trials, \
        [(t.id, t.state, t.attempt, t.error) for t in rows]
    prefix, deadline = job_prefix(cli.runs, name), time.monotonic() + 60
    while True:
        out = slurm_cluster.run("sacct", "--parsable2", "--noheader", "-X", "-S", "now-1hour",
                                "-o", "JobName", "--name",
                                ",".join(f"{prefix}.{t.id}.1" for t in rows)).stdout
        names = Counter(out.split())
        if len(names) >= trials or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert names == Counter({f"{prefix}.{t.id}.1": 1 for t in rows}), names
    return rows


@pytest.mark.timeout(420)
def test_slurmdbd_down_for_60_s_stops_nothing(cli, slurm_cluster):
    with _search(cli, slurm_cluster, "dbd", trials=4, sleep=2) as (name, proc):
        _wait_for("two jobs", _jobs_started(cli, name, 2), proc=proc)
        with _daemon_down(slurm_cluster, "slurmdbd", ["sacct", "-n", "-X", "-j", "1"]):
            shown = _wait_for("status to say Slurm is unreachable", lambda: (
                out := cli("status", name).stdout) and "Slurm unreachable since" in out and out,
                timeout=60, proc=proc)
            assert "Problem talking to the database" in shown or "Connection refused" in shown
            time.sleep(max(0.0, 60 - 10))  # 60 s down in all, give or take the wait above
            assert proc.poll() is None, "the driver exited while slurmdbd was down"
        _finish(proc)
    _each_trial_once(cli, slurm_cluster, name, 4)
    kinds = event_kinds(cli.runs, name)
    assert "slurm_unreachable" in kinds and "slurm_reachable" in kinds
    assert "Slurm unreachable" not in cli("status", name).stdout


@pytest.mark.timeout(300)
def test_slurmctld_restarted_mid_search_loses_and_repeats_nothing(cli, slurm_cluster):
    with _search(cli, slurm_cluster, "ctld", trials=4, sleep=6) as (name, proc):
        _wait_for("two trials past srun", _sruns_done(cli, name, 2), proc=proc)
        _wait_for("accounting to list them running",
                  _running_in_accounting(cli, slurm_cluster, name, 2), proc=proc)
        with _daemon_down(slurm_cluster, "slurmctld", ["scontrol", "ping"]):
            _wait_for("status to say Slurm is unreachable", lambda: "Slurm unreachable since"
                      in cli("status", name).stdout, timeout=60, proc=proc)
            time.sleep(5)
            assert proc.poll() is None, "the driver exited while slurmctld was down"
        _finish(proc)
    _each_trial_once(cli, slurm_cluster, name, 4)
    assert {"slurm_unreachable", "slurm_reachable"} <= set(event_kinds(cli.runs, name))


@pytest.mark.timeout(300)
def test_sbatch_refused_by_a_job_limit_holds_trials_until_room(cli, slurm_cluster):
    """MaxSubmitJobs=1 for the user while a search with 2 trials in flight runs: sbatch
    refuses every second job (AssocMaxSubmitJobLimit); those trials wait and go in as
    others end, and once the limit is lifted both slots fill again."""
    user = "root" if os.getuid() == 0 else os.environ.get("USER", "")
    limit = ["sacctmgr", "-i", "modify", "user", user, "set"]
    slurm_cluster.run(*limit, "MaxSubmitJobs=1")
    try:
        with _search(cli, slurm_cluster, "limit", trials=5, sleep=3) as (name, proc):
            shown = _wait_for("status to show the limit", lambda: (
                out := cli("status", name).stdout) and "refused by a limit" in out and out,
                timeout=90, proc=proc)
            assert "AssocMaxSubmitJobLimit" in shown
            _wait_for("two trials to complete under the limit", lambda: sum(
                t.state == "completed" for t in read_store(cli.runs, name)[1]) >= 2,
                timeout=120, proc=proc)
            slurm_cluster.run(*limit, "MaxSubmitJobs=-1")
            _finish(proc)
    finally:
        slurm_cluster.run(*limit, "MaxSubmitJobs=-1", check=False)
    _each_trial_once(cli, slurm_cluster, name, 5)
    assert {"slurm_limit", "slurm_accepts"} <= set(event_kinds(cli.runs, name))


def test_a_partition_slurm_refuses_is_bad_input_at_submit_and_writes_nothing(
        cli, slurm_cluster):
    """Slurm's permanent refusals (here an invalid partition) are found by `sbatch
    --test-only` before anything is written: exit 2, Slurm's reason, no experiment dir."""
    name = f"fault-part-{RUN}"
    spec = cli.write_spec(SPEC.format(name=name, trials=1, sleep=0).replace(
        'nodes: 2, time: "00:05:00"', 'nodes: 2, time: "00:05:00", partition: nosuch'),
        f"{name}.yaml")
    proc = cli("submit", spec, env=slurm_cluster.env)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Invalid partition name specified" in proc.stderr and "resources" in proc.stderr
    assert not (cli.runs / name).exists()


def test_a_job_slurm_refuses_for_good_ends_its_attempt_as_a_launch_error(
        tmp_path, slurm_cluster):
    """A permanent refusal at sbatch time (the partition went away after submit) ends the
    attempt with Slurm's message, through the executor's poll, instead of raising."""
    from hpsearch.executors.base import Ended
    from hpsearch.executors.slurm import SlurmExecutor
    from hpsearch.launch.attempt import build_launch
    from hpsearch.preflight import parse_spec
    from hpsearch.slurm.commands import Slurm
    text = SPEC.format(name=f"fault-perm-{RUN}", trials=1, sleep=0).replace(
        'nodes: 2, time: "00:05:00"', 'nodes: 1, time: "00:05:00", partition: gone')
    spec = parse_spec(text, "spec.yaml", tmp_path, tmp_path / "runs")
    executor = SlurmExecutor(spec.slurm_job(), Slurm(env=slurm_cluster.env))
    assert executor.submit(build_launch(spec.trial_recipe(True), 0, 1, {"x": 0.5})) is None
    events = executor.poll(timeout=1.0)
    (ended,) = [e for e in events if isinstance(e, Ended)]
    assert ended.reason == "launch_error" and "Invalid partition name" in ended.detail
    assert executor.free_slots() == spec.search.parallel  # nothing held, nothing tracked


@pytest.mark.timeout(300)
def test_a_driver_resumed_while_slurmctld_is_down_waits_for_it(cli, slurm_cluster):
    """The driver is SIGKILLed while its trials run, and `resume` starts while slurmctld is
    down: it keeps asking (back-off) instead of failing, adopts the trials once slurmctld
    is back, and nothing runs twice."""
    with _search(cli, slurm_cluster, "resume", trials=2, sleep=8) as (name, proc):
        _wait_for("two trials past srun", _sruns_done(cli, name, 2), proc=proc)
        proc.kill()
        proc.wait(30)
    with _daemon_down(slurm_cluster, "slurmctld", ["scontrol", "ping"]):
        resumed = cli.popen("resume", name, env=slurm_cluster.env)
        time.sleep(8)
        assert resumed.poll() is None, resumed.communicate()
    _finish(resumed)
    _each_trial_once(cli, slurm_cluster, name, 2)

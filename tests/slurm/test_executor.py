"""The Slurm executor on the real emulated cluster: searches, failures, cancel, crash safety."""

from __future__ import annotations

import signal
import time
import uuid
from collections import Counter

from hpsearch.slurm.hostlist import expand
from tests.helpers import job_prefix, read_store

SPEC = """
name: {name}
command: '{command}'
search:
  strategy: random
  trials: {trials}
  parallel: {parallel}
  seed: 4
  space:
    x: {{low: 0.0, high: 1.0}}
objective: {{metric: loss}}
resources: {{nodes: {nodes}, time: "00:05:00"}}
executor: {{type: slurm, poll_interval: 0.5, array: {array}}}
"""

# Experiment names are unique per test session: job names (hps.<name>.<tag>.<trial>.<attempt>) must
# not meet those of an earlier session in the cluster's accounting.
RUN = uuid.uuid4().hex[:6]

REPORT = 'echo \"node=$SLURMD_NODENAME\"; echo \"@hpsearch step=0 loss={x}\"'


def _spec(cli, name, command=REPORT, trials=4, parallel=4, nodes=1, array=False):
    """Writes the spec of experiment `name`-RUN; returns (path, experiment name)."""
    name = f"{name}-{RUN}"
    text = SPEC.format(name=name, command=command, trials=trials, parallel=parallel,
                       nodes=nodes, array="true" if array else "false")
    return cli.write_spec(text, f"{name}.yaml"), name


def _jobs_named(slurm_cluster, prefix: str, expect: int) -> Counter:
    """Job names in accounting that start with prefix, once sacct lists `expect` of them
    (it lags the cluster by seconds) or after 30 s."""
    deadline = time.monotonic() + 30
    while True:
        out = slurm_cluster.run("sacct", "--parsable2", "--noheader", "-X", "-S", "now-1hour",
                                "-o", "JobName").stdout
        names = Counter(n for n in out.split() if n.startswith(prefix))
        if sum(names.values()) >= expect or time.monotonic() > deadline:
            return names
        time.sleep(0.5)


def _wait_for_job_ids(cli, name: str, count: int, timeout: float = 60) -> list:
    """The store's trials once `count` of them have a job id (or after the timeout)."""
    deadline, rows = time.monotonic() + timeout, []
    while time.monotonic() < deadline:
        try:
            rows = read_store(cli.runs, name)[1]
            if len(rows) == count and all(r.job_id for r in rows):
                break
        except Exception:  # noqa: BLE001 - store not there yet
            pass
        time.sleep(0.2)
    return rows


def test_slurm_search_runs_each_trial_as_a_job(cli, slurm_cluster):
    spec, name = _spec(cli, "sl-basic")
    cli("submit", spec, env=slurm_cluster.env, check=0, timeout=300)
    _, trials = read_store(cli.runs, name)
    assert [t.state for t in trials] == ["completed"] * 4
    for t in trials:
        assert t.job_id and t.objective_values == [t.params["x"]]
        node = (cli.runs / name / "trials" / f"{t.id:05d}" / "stdout.log").read_text()
        assert f"node={t.nodes}" in node  # the node Slurm reports is where it ran
        (state,) = slurm_cluster.wait_for_accounting(t.job_id, "State,NodeList")
        assert state == ["COMPLETED", t.nodes]
    prefix = job_prefix(cli.runs, name)
    assert _jobs_named(slurm_cluster, f"{prefix}.", 4) == Counter(
        {f"{prefix}.{i}.1": 1 for i in range(4)})


def test_two_node_trials_get_two_distinct_nodes(cli, slurm_cluster):
    command = 'srun -N2 -n2 sh -c \"echo rank=\\$SLURM_PROCID node=\\$SLURMD_NODENAME\"; echo \"@hpsearch step=0 loss={x}\"'
    spec, name = _spec(cli, "sl-two", command=command, trials=2, parallel=2, nodes=2)
    cli("submit", spec, env=slurm_cluster.env, check=0, timeout=300)
    _, trials = read_store(cli.runs, name)
    for t in trials:
        out = (cli.runs / name / "trials" / f"{t.id:05d}" / "stdout.log").read_text()
        nodes = {line.split("node=")[1] for line in out.splitlines() if "rank=" in line}
        assert len(nodes) == 2, out
        (state,) = slurm_cluster.wait_for_accounting(t.job_id, "State,NodeList,AllocNodes")
        assert state[0] == "COMPLETED" and state[2] == "2"


def test_failing_trial_is_recorded_with_exit_code_and_stderr(cli, slurm_cluster):
    command = 'echo \"broken input {x}\" >&2; exit 3'
    spec, name = _spec(cli, "sl-fail", command=command, trials=1, parallel=1)
    cli("submit", spec, env=slurm_cluster.env, check=1, timeout=300)
    _, (t,) = read_store(cli.runs, name)
    assert t.state == "failed" and t.exit_code == 3
    assert t.error.startswith("exit code 3") and "broken input" in t.error


def test_cancelling_a_search_leaves_no_job_in_squeue(cli, slurm_cluster):
    spec, name = _spec(cli, "sl-cancel", command="sleep 300; echo {x}", trials=3, parallel=3)
    proc = cli.popen("submit", spec, env=slurm_cluster.env)
    _wait_for_job_ids(cli, name, 3)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=120) == 1
    _, rows = read_store(cli.runs, name)
    assert [r.state for r in rows] == ["cancelled"] * 3
    queue = slurm_cluster.run("squeue", "-h", "-o", "%i", "-j", ",".join(r.job_id for r in rows),
                              check=False).stdout.split()
    assert queue == []


def test_stopping_a_search_of_array_tasks_cancels_the_array_with_one_rpc(cli, slurm_cluster):
    """Ctrl-C cancels every trial: one scancel for all of them, naming the array, not each
    task (slurmctld answers `scancel 5_0 5_1 ...` with one REQUEST_KILL_JOB per task, 40 ms
    each when busy). Counted by slurmctld itself (sdiag)."""
    spec, name = _spec(cli, "sl-onekill", command="sleep 300; echo {x}", trials=6,
                       parallel=6, array=True)
    proc = cli.popen("submit", spec, env=slurm_cluster.env)
    rows = _wait_for_job_ids(cli, name, 6)
    assert len({r.job_id.split("_")[0] for r in rows}) == 1  # one array
    slurm_cluster.run("sdiag", "-r")
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=120) == 1
    _, rows = read_store(cli.runs, name)
    assert [r.state for r in rows] == ["cancelled"] * 6
    stats = slurm_cluster.run("sdiag").stdout
    kills = [line for line in stats.splitlines() if "REQUEST_KILL_JOB" in line]
    assert kills and int(kills[0].split("count:")[1].split()[0]) == 1, kills


def test_ctrl_c_while_the_trials_array_pends_as_a_whole_cancels_it_and_exits(
        cli, slurm_cluster):
    """A job holding all 8 nodes keeps the trials' array pending as a whole (no task split
    off). Ctrl-C then cancels every task before any ran: Slurm keeps one bare record for the
    array and none per task, and the driver must still see each task end (it used to wait
    for them forever: a stopped Snakemake rule hung on this)."""
    blocker = slurm_cluster.run("sbatch", "--parsable", "-N", "8", "--exclusive", "-o",
                                "/dev/null", "--wrap", "sleep 300").stdout.strip()
    spec, name = _spec(cli, "sl-arrstop", command="sleep 300; echo {x}", trials=3,
                       parallel=3, array=True)
    proc = cli.popen("submit", spec, env=slurm_cluster.env)
    try:
        rows = _wait_for_job_ids(cli, name, 3)
        array = rows[0].job_id.split("_")[0]
        pending = slurm_cluster.run("squeue", "-h", "-j", array, "-o", "%i|%T").stdout.split()
        assert pending == [f"{array}_[0-2%3]|PENDING"]  # one line: not split into tasks
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 1, proc.communicate()
        _, rows = read_store(cli.runs, name)
        assert [r.state for r in rows] == ["cancelled"] * 3
        assert slurm_cluster.run("squeue", "-h", "-j", array, check=False).stdout.strip() == ""
    finally:
        if proc.poll() is None:
            proc.kill()
        slurm_cluster.run("scancel", blocker, check=False)


def test_resume_after_kill_between_sbatch_and_store_submits_nothing_twice(cli, slurm_cluster):
    spec, name = _spec(cli, "sl-crash", trials=4, parallel=2)
    crashed = cli("submit", spec, env={**slurm_cluster.env, "HPSEARCH_FAULT": "after_launch:3"})
    assert crashed.returncode == -signal.SIGKILL
    cli("resume", name, env=slurm_cluster.env, check=0, timeout=300)
    _, trials = read_store(cli.runs, name)
    assert [t.state for t in trials] == ["completed"] * 4
    assert all(t.attempt == 1 for t in trials)  # the unrecorded job was found, not resubmitted
    prefix = job_prefix(cli.runs, name)
    assert _jobs_named(slurm_cluster, f"{prefix}.", 4) == Counter(
        {f"{prefix}.{i}.1": 1 for i in range(4)})


def test_ready_single_node_trials_go_as_job_arrays(cli, slurm_cluster):
    spec, name = _spec(cli, "sl-array", trials=10, parallel=4, array=True)
    cli("submit", spec, env=slurm_cluster.env, check=0, timeout=300)
    _, trials = read_store(cli.runs, name)
    assert [t.state for t in trials] == ["completed"] * 10
    arrays = Counter(t.job_id.split("_")[0] for t in trials)
    assert all("_" in t.job_id for t in trials[:4])  # the first 4 were ready together
    assert len(arrays) < 10  # fewer sbatch calls than trials
    for t in trials:
        out = (cli.runs / name / "trials" / f"{t.id:05d}" / "stdout.log").read_text()
        assert f"node={t.nodes}" in out  # each task wrote to its own trial dir
        assert t.objective_values == [t.params["x"]]
    first = trials[0].job_id.split("_")[0]
    records = slurm_cluster.wait_for_accounting(first, "State,JobName", rows=arrays[first])
    assert all(r == ["COMPLETED", f"{job_prefix(cli.runs, name)}.array.0.1"] for r in records)


def test_resume_finds_array_tasks_whose_ids_were_never_stored(cli, slurm_cluster):
    spec, name = _spec(cli, "sl-arrcrash", command="sleep 2; " + REPORT, trials=4, parallel=4,
                       array=True)
    crashed = cli("submit", spec, env={**slurm_cluster.env, "HPSEARCH_FAULT": "after_launch:1"})
    assert crashed.returncode == -signal.SIGKILL
    cli("resume", name, env=slurm_cluster.env, check=0, timeout=300)
    _, trials = read_store(cli.runs, name)
    assert [t.state for t in trials] == ["completed"] * 4
    assert all(t.attempt == 1 for t in trials)
    assert len({t.job_id.split("_")[0] for t in trials}) == 1  # the one array, adopted


def test_ddp_search_of_two_node_trials_runs_every_rank_on_distinct_nodes(cli, slurm_cluster):
    """The digits DDP example with one two-node trial (the example has 6), torchrun (gloo on
    CPU) over srun: its 2 ranks on 2 distinct nodes, as sacct says. (4 trials, 2 at a time,
    took 89 s of the suite for the same check; 2 at once, 40 s of CI's run 3.)"""
    import shutil
    import sys
    from pathlib import Path
    try:
        import sklearn  # noqa: F401
        import torch  # noqa: F401
    except ImportError as exc:  # pragma: no cover - scripts/test.sh installs both
        import pytest
        pytest.skip(f"the DDP example needs torch and scikit-learn: {exc}")
    example = Path(__file__).resolve().parents[2] / "examples" / "digits_ddp"
    shutil.copy(example / "train.py", cli.cwd / "train.py")
    name = f"sl-ddp-{RUN}"
    text = (example / "slurm.yaml").read_text().replace("name: digits-slurm", f"name: {name}")
    text = text.replace("epochs: 5 ", "epochs: 2 ").replace("poll_interval: 2s", "poll_interval: 1s")
    text = text.replace("trials: 6", "trials: 1").replace("parallel: 3", "parallel: 1")
    spec = cli.write_spec(text, "ddp.yaml")
    # torchrun runs inside the jobs: put the interpreter's bin dir (the venv) on their PATH.
    env = {**slurm_cluster.env,
           "PATH": f"{Path(sys.executable).parent}:{slurm_cluster.env.get('PATH', '')}"}
    cli("submit", spec, env=env, check=0, timeout=600)
    _, trials = read_store(cli.runs, name)
    assert len(trials) == 1 and all(t.state == "completed" for t in trials)
    for t in trials:
        out = (cli.runs / name / "trials" / f"{t.id:05d}" / "stdout.log").read_text()
        starts = [line for line in out.splitlines() if line.startswith("rank ")]
        assert sorted(line.split()[1] for line in starts) == ["0/2", "1/2"], out
        ran_on = {line.split(" on ")[1].split()[0] for line in starts}
        (record,) = slurm_cluster.wait_for_accounting(t.job_id, "State,NodeList,AllocNodes")
        assert record[0] == "COMPLETED" and record[2] == "2"
        assert len(ran_on) == 2 and ran_on == set(expand(record[1]))  # as sacct says
        assert 0 < t.objective_values[0] <= 1


CH_TRIAL = r'''
import json, os
from hpsearch import trial
p = trial.params()
trial.report(0, loss=p["x"])
print("inside", "CH_RUNNING" in os.environ, os.path.exists("/etc/debian_version"),
      os.environ.get("SLURMD_NODENAME"))
'''


def ch_image(tmp_path):
    """(image dir, binds) of a skeleton charliecloud image binding the host's /usr, Python
    and repository (tests/test_charliecloud.py says why); skips where ch-run is missing."""
    import os
    import shutil

    import pytest

    from tests.test_charliecloud import _host_paths, _skeleton
    if shutil.which("ch-run") is None:
        if os.environ.get("CI"):
            pytest.fail("ch-run is missing under CI (scripts/test.sh installs it)")
        pytest.skip("ch-run not found: apt-get install -y charliecloud-runtime")
    image = tmp_path / "image"
    binds = _host_paths()
    _skeleton(image, binds)
    return image, binds


def test_trial_runs_inside_a_charliecloud_image_on_the_cluster(cli, slurm_cluster, tmp_path):
    """A Slurm job whose trial runs in a ch-run container (a skeleton image binding the
    host's /usr, Python and repository: see tests/test_charliecloud.py for why)."""
    import sys
    from pathlib import Path

    image, binds = ch_image(tmp_path)
    (cli.cwd / "trial.py").write_text(CH_TRIAL)
    name = f"sl-ch-{RUN}"
    spec = cli.write_spec(f"""
        name: {name}
        command: "python trial.py # {{x}}"
        search: {{strategy: random, trials: 2, parallel: 2, seed: 1,
                 space: {{x: {{low: 0.0, high: 1.0}}}}}}
        objective: {{metric: loss}}
        resources: {{nodes: 1, time: "00:05:00"}}
        executor: {{type: slurm, poll_interval: 0.5}}
        container: {{runtime: charliecloud, image: "{image}", binds: {list(binds)}}}
        """, "ch.yaml")
    env = {**slurm_cluster.env,
           "PATH": f"{Path(sys.executable).parent}:{slurm_cluster.env.get('PATH', '')}"}
    cli("submit", spec, env=env, check=0, timeout=300)
    _, trials = read_store(cli.runs, name)
    for t in trials:
        assert t.state == "completed" and t.objective_values == [t.params["x"]]
        out = (cli.runs / name / "trials" / f"{t.id:05d}" / "stdout.log").read_text()
        # in the container (ch-run sets CH_RUNNING; the host's /etc is not there), on a node
        assert f"inside True False {t.nodes}" in out, out


def test_driver_runs_as_its_own_slurm_job_and_cancel_stops_it(cli, slurm_cluster):
    """--driver-job: the driver is a small Slurm job running `hpsearch resume`; the login
    node only records the experiment and submits it. `cancel` SIGTERMs that job, which
    cancels the trials' jobs before it exits."""
    from pathlib import Path
    spec, name = _spec(cli, "sl-driver", trials=3, parallel=3)
    env = {**slurm_cluster.env, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    out = cli("submit", spec, "--driver-job", env=env, check=0).stdout
    driver_job = out.split("Slurm job ")[1].split()[0]
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        exp, trials = read_store(cli.runs, name)
        if exp.status == "completed":
            break
        time.sleep(0.5)
    assert exp.status == "completed" and [t.state for t in trials] == ["completed"] * 3
    (record,) = slurm_cluster.wait_for_accounting(driver_job, "State,AllocNodes")
    assert record == ["COMPLETED", "1"]  # (sacct may call it `allocation` for a moment)
    assert (cli.runs / name / "driver.job").read_text().strip() == driver_job

    spec2, name2 = _spec(cli, "sl-drvcancel", command="sleep 300; echo {x}", trials=2, parallel=2)
    out = cli("submit", spec2, "--driver-job", env=env, check=0).stdout
    driver_job = out.split("Slurm job ")[1].split()[0]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        rows = read_store(cli.runs, name2)[1]
        if len(rows) == 2 and all(r.job_id for r in rows):
            break
        time.sleep(0.5)
    stopped = cli("cancel", name2, env=env, check=0, timeout=180).stdout
    assert f"stopped the driver job {driver_job}" in stopped
    exp, rows = read_store(cli.runs, name2)
    assert exp.status == "cancelled" and [r.state for r in rows] == ["cancelled"] * 2
    queue = slurm_cluster.run("squeue", "-h", "-o", "%i", "-j",
                              ",".join([driver_job] + [r.job_id for r in rows]),
                              check=False).stdout.split()
    assert queue == []


def test_a_job_slurm_forgot_with_a_quiet_trial_dir_is_lost_and_retried(cli, slurm_cluster):
    """A stale trial: the store says it runs as a job that neither sacct nor squeue knows
    (as after an accounting purge, or a job id from another cluster), and its trial dir
    gives no heartbeat. After executor.lost_after the attempt is `lost` and the trial is
    retried as a new job."""
    import sqlite3
    spec, name = _spec(cli, "sl-lost", trials=1, parallel=1)
    spec.write_text(spec.read_text().replace("array: false}", "array: false, "
                                             "lost_after: 3s}"))
    crashed = cli("submit", spec, env={**slurm_cluster.env,
                                       "HPSEARCH_FAULT": "after_insert:1"})
    assert crashed.returncode == -signal.SIGKILL  # the trial is in the store, not submitted
    con = sqlite3.connect(cli.runs / name / "store.sqlite")
    with con:  # what a store looks like whose job Slurm has forgotten
        con.execute("update trials set state = 'running', job_id = '99999999'")
        con.execute("update attempts set state = 'running', job_id = '99999999'")
    con.close()
    began = time.monotonic()
    cli("resume", name, env=slurm_cluster.env, check=0, timeout=300)
    exp, trials = read_store(cli.runs, name)
    assert trials[0].state == "completed" and trials[0].attempt == 2
    assert trials[0].job_id != "99999999"
    from hpsearch.store.reader import Reader
    from hpsearch.store.runs import STORE_FILE
    reader = Reader(cli.runs / name / STORE_FILE)
    try:
        first = reader.attempts(0)[0]
    finally:
        reader.close()
    assert first["job_id"] == "99999999" and first["state"] == "lost"
    assert "Slurm no longer knows job 99999999" in first["reason"]
    assert time.monotonic() - began >= 3  # not before lost_after

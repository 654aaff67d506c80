"""Pilots on the real emulated cluster (issue 13, item 8): trials run inside pilot jobs, bound
late to free slots; multi-node DDP trials stay under one leaf of the pilot; a pilot cancelled
mid-trial, or reaching its own time limit, costs the trial one attempt and nothing else.

The cluster's topology: leaf1 node[1-2], leaf2 node[3-4], leaf3 node[5-6], leaf4 node[7-8];
a 4-node pilot spans two leaves, and each 2-node trial inside it must sit under one.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from hpsearch.pilot import protocol
from hpsearch.slurm.hostlist import expand
from hpsearch.store.reader import Reader
from hpsearch.store.runs import STORE_FILE
from tests.helpers import job_prefix, read_store
from tests.slurm.test_preemption import _slurmd_pid, _wait_node_up

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "examples" / "digits_ddp" / "train.py"
RUN = uuid.uuid4().hex[:6]

DDP = """
name: {name}
command: >-
  {{python}} train.py --lr {{lr}} --width 32 --batch-size 64 --optimizer adam --seed 3
  --device cpu --epochs {epochs} --epoch-sleep {sleep}
search:
  strategy: grid
  parallel: {parallel}
  space:
    lr: {{choices: {lrs}}}
objective: {{metric: val_acc, direction: maximize}}
resources: {{nodes: 2, tasks_per_node: 1, cpus_per_task: 1{time}}}
executor:
  type: slurm
  poll_interval: 1s
  pilots: {{nodes: 4, time: "{pilot_time}", max: {max}, idle_timeout: 15, heartbeat: 1}}
launcher: torchrun
env:
  OMP_NUM_THREADS: 1
"""

SLEEPER = """
name: {name}
command: 'echo "node=$SLURMD_NODENAME"; sleep {sleep}; echo "@hpsearch step=0 loss={{x}}"'
search:
  strategy: grid
  parallel: {parallel}
  space:
    x: {{choices: {xs}}}
objective: {{metric: loss}}
resources: {{nodes: 1, time: "00:02:00"}}
executor:
  type: slurm
  poll_interval: 1s
  pilots: {{nodes: {pilot_nodes}, time: "00:10:00", max: {max}, slots_per_node: 2,
            idle_timeout: 10, heartbeat: 1}}
"""


def _env(slurm_cluster) -> dict:
    # torchrun runs inside the pilots: put the interpreter's bin dir (the venv) on their PATH.
    return {**slurm_cluster.env,
            "PATH": f"{Path(sys.executable).parent}:{slurm_cluster.env.get('PATH', '')}"}


def _leaves(slurm_cluster) -> dict[str, str]:
    """node -> its leaf switch, from Slurm's own topology."""
    out = slurm_cluster.run("scontrol", "show", "topology").stdout
    leaf_of = {}
    for line in out.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if fields.get("Level") == "0":
            leaf_of.update((node, fields["SwitchName"]) for node in expand(fields["Nodes"]))
    return leaf_of


def _attempts(runs: Path, name: str) -> dict[int, list[dict]]:
    reader = Reader(runs / name / STORE_FILE)
    try:
        return {t.id: reader.attempts(t.id) for t in reader.trials()}
    finally:
        reader.close()


def _pilot_jobs(slurm_cluster, prefix: str, expect: set[str]) -> dict[str, str]:
    """job id -> node list of this experiment's jobs in accounting (all must be pilots), once
    sacct lists every job in `expect` under its name (for a few seconds after a pilot ends,
    sacct may show it named `allocation`, on one node)."""
    deadline = time.monotonic() + 30
    while True:
        out = slurm_cluster.run("sacct", "--parsable2", "--noheader", "-X", "-S", "now-1hour",
                                "-o", "JobID,JobName,NodeList").stdout
        jobs = [line.split("|") for line in out.splitlines() if f"|{prefix}." in line]
        found = {job_id: nodes for job_id, _, nodes in jobs}
        if expect <= set(found) or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert all(".pilot." in name for _, name, _ in jobs), jobs  # no trial paid its own job
    return found


def test_two_node_ddp_trials_in_four_node_pilots_stay_under_one_leaf(cli, slurm_cluster):
    """2 two-node DDP trials at once in 4-node pilots (at most 2; a 4-node pilot spans two
    leaves): every trial's two ranks run on two distinct nodes of its pilot, under one leaf
    switch, as the pilot job's own srun steps in sacct show; no trial is a Slurm job of its
    own. (4 trials, 4 at once, took 68 s in CI's run 3: 8 ranks starting torch on 2 cores.)"""
    shutil.copy(TRAIN, cli.cwd / "train.py")
    name = f"pl-ddp-{RUN}"
    spec = cli.write_spec(DDP.format(name=name, epochs=2, sleep=0, parallel=2, max=2,
                                     lrs="[0.01, 0.02]", time=', time: "00:03:00"',
                                     pilot_time="00:06:00"), "ddp.yaml")
    proc = cli("submit", spec, env=_env(slurm_cluster), timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _, trials = read_store(cli.runs, name)
    assert len(trials) == 2 and all(t.state == "completed" for t in trials), proc.stdout
    leaf_of = _leaves(slurm_cluster)
    pilots = _pilot_jobs(slurm_cluster, job_prefix(cli.runs, name), {t.job_id for t in trials})
    assert 1 <= len(pilots) <= 2
    for t in trials:
        out = (cli.runs / name / "trials" / f"{t.id:05d}" / "stdout.log").read_text()
        ranks = [line for line in out.splitlines() if line.startswith("rank ")]
        assert sorted(line.split()[1] for line in ranks) == ["0/2", "1/2"], out
        ran_on = {line.split(" on ")[1].split()[0] for line in ranks}
        assert ran_on == set(expand(t.nodes)) and len(ran_on) == 2, (ran_on, t.nodes)
        assert len({leaf_of[node] for node in ran_on}) == 1, (ran_on, leaf_of)
        assert t.job_id in pilots and ran_on <= set(expand(pilots[t.job_id]))
        steps = slurm_cluster.run("sacct", "--parsable2", "--noheader", "-j", t.job_id,
                                  "-o", "JobID,NodeList").stdout
        step_nodes = [set(expand(line.split("|")[1])) for line in steps.splitlines()
                      if "." in line.split("|")[0]]
        assert ran_on in step_nodes, steps  # the trial's torchrun step, on its nodes


def test_single_node_trials_run_side_by_side_in_one_pilot(cli, slurm_cluster):
    """16 trials of 3 s in one 4-node pilot with 2 slots a node: 8 at once, two on each node
    (three of the nodes reached through srun), every trial in the same pilot job, one sbatch
    for all of them."""
    name = f"pl-side-{RUN}"
    spec = cli.write_spec(SLEEPER.format(name=name, sleep=3, parallel=8, max=1, pilot_nodes=4,
                                         xs=list(range(1, 17))))
    proc = cli("submit", spec, env=slurm_cluster.env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _, trials = read_store(cli.runs, name)
    assert len(trials) == 16 and all(t.state == "completed" for t in trials)
    pilots = _pilot_jobs(slurm_cluster, job_prefix(cli.runs, name), {t.job_id for t in trials})
    assert list(pilots) == [trials[0].job_id] and {t.job_id for t in trials} == set(pilots)
    spans = {}
    for t in trials:
        node = (cli.runs / name / "trials" / f"{t.id:05d}" / "stdout.log").read_text() \
            .split("node=")[1].split()[0]
        assert node == t.nodes  # the pilot's word on where it ran is where it ran
        spans.setdefault(node, []).append((t.started, t.finished))
    assert len(spans) == 4
    for node, intervals in spans.items():
        intervals.sort()
        overlapping = any(b[0] < a[1] for a, b in zip(intervals, intervals[1:]))
        assert overlapping, (node, intervals)  # two slots on the node were used at once
    # Every end stored: the files left the dirs the driver lists every tick, kept in done/.
    (pilot_dir,) = protocol.pilots_dir(cli.runs / name).glob("[0-9]*")
    assert protocol.names(pilot_dir / "started") == protocol.names(pilot_dir / "ended") == []
    done = {protocol.name_of(t.id, 1) for t in trials}
    assert set(protocol.names(pilot_dir / "done" / "started")) == done
    assert set(protocol.names(pilot_dir / "done" / "ended")) == done


def test_a_pilot_cancelled_mid_trial_costs_the_trial_one_attempt(cli, slurm_cluster):
    """scancel of the pilot while its trial runs: the driver learns it from sacct, counts the
    attempt as lost, and the retry runs in a new pilot to completion."""
    name = f"pl-scancel-{RUN}"
    # `|| exit`: Slurm (proctrack/linuxproc) signals the job's processes one at a time; a
    # `sleep` killed a moment before its shell let the shell run the next line, report and
    # exit 0 (a fresh-clone run saw the attempt completed). A real trial killed fails. The
    # retry does not sleep: only the first attempt must still run when the scancel comes.
    spec = cli.write_spec(SLEEPER.format(name=name, sleep=15, parallel=1, max=1, xs=[1],
                                         pilot_nodes=2).replace(
        "sleep 15;", 'if [ "$HPSEARCH_ATTEMPT" = 1 ]; then sleep 15 || exit $?; fi;'))
    driver = cli.popen("submit", spec, env=slurm_cluster.env)
    try:
        first = None
        deadline = time.monotonic() + 120
        while first is None and time.monotonic() < deadline:
            trials = read_store(cli.runs, name)[1] if (cli.runs / name / STORE_FILE).exists() \
                else []
            if trials and trials[0].state == "running" and trials[0].job_id:
                first = trials[0].job_id
            time.sleep(0.5)
        assert first is not None, "the trial never ran"
        time.sleep(2)
        slurm_cluster.run("scancel", first)
        out, err = driver.communicate(timeout=240)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 0, out + err
    attempts = _attempts(cli.runs, name)[0]
    # The pilot saw Slurm's SIGTERM and told it (preempted); had it died first, the driver
    # would have learnt it from sacct (lost).
    assert len(attempts) == 2 and attempts[0]["failure"] in ("preempted", "lost"), attempts
    assert attempts[0]["job_id"] == first and attempts[1]["job_id"] != first
    assert attempts[1]["state"] == "completed"


def _baseline(tmp: Path, epochs: int) -> dict:
    """train.py's result uninterrupted: 2 ranks under torchrun on this machine."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HPSEARCH_EXPERIMENT": "baseline",
           "HPSEARCH_TRIAL_ID": "0", "HPSEARCH_ATTEMPT": "1", "HPSEARCH_TRIAL_DIR": str(tmp),
           "HPSEARCH_CHECKPOINT_DIR": str(tmp / "ck"), "HPSEARCH_PARAMS": "{}"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc-per-node=2", str(TRAIN), "--lr", "0.01", "--width", "32",
                           "--batch-size", "64", "--optimizer", "adam", "--seed", "3",
                           "--device", "cpu", "--epochs", str(epochs)],
                          cwd=tmp, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads((tmp / "result.json").read_text())


def _submit_beside(cli, spec: Path, env: dict, trial_dir: Path, baseline: Callable[[], dict],
                   timeout: float) -> tuple[subprocess.CompletedProcess, Future[dict]]:
    """`hpsearch submit spec`, and beside it `baseline()` (the uninterrupted run on this
    machine: 20-30 s that the test waited for after the search), started once the trial
    has reported: the trial then sleeps between its epochs, and its start-up, which the
    pilot's minute counts, is past. Returns the submit's outcome and the baseline's (done)."""
    driver = cli.popen("submit", spec, env=env)

    def after_its_first_report() -> dict:
        while driver.poll() is None and not (trial_dir / "metrics.jsonl").exists():
            time.sleep(0.5)
        return baseline()

    with ThreadPoolExecutor(1) as pool:
        expected = pool.submit(after_its_first_report)
        try:
            out, err = driver.communicate(timeout=timeout)
        finally:
            if driver.poll() is None:
                driver.kill()
                driver.communicate()
    return subprocess.CompletedProcess(driver.args, driver.returncode, out, err), expected


def test_a_trial_outlasting_its_pilot_resumes_in_the_next_from_its_checkpoint(
        cli, slurm_cluster, tmp_path):
    """A 2-node DDP trial of about 50 s in 1-minute pilots (no time limit of its own): near
    its end the pilot stops the trial (SIGTERM; train.py saves and exits), a new pilot runs
    it again from its checkpoint, and the result equals an uninterrupted run's."""
    shutil.copy(TRAIN, cli.cwd / "train.py")
    name = f"pl-end-{RUN}"
    # 15 epochs of 3.2 s: more than a pilot's 45 s whatever the start-up (12 fitted in one
    # pilot in a fresh-clone run of 2026-11-30, start-up quicker than 7 s), and the rest fits
    # in the next pilot. With 20, three pilots were needed as often as two (158 s against 126 s).
    spec = cli.write_spec(DDP.format(name=name, epochs=15, sleep=3, parallel=1, max=1,
                                     lrs="[0.01]", time="", pilot_time="00:01:00"), "end.yaml")
    tdir = cli.runs / name / "trials" / "00000"
    (tmp_path / "baseline").mkdir()
    proc, baseline = _submit_beside(cli, spec, _env(slurm_cluster), tdir,
                                    lambda: _baseline(tmp_path / "baseline", 15), timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    attempts = _attempts(cli.runs, name)[0]
    assert len(attempts) >= 2 and attempts[-1]["state"] == "completed", attempts
    assert all(a["failure"] in ("interrupted", "preempted") for a in attempts[:-1]), attempts
    assert len({a["job_id"] for a in attempts}) == len(attempts)  # one pilot each
    assert "resuming from epoch-" in (tdir / "stdout.log").read_text()
    assert json.loads((tdir / "result.json").read_text()) == baseline.result()
    pilots = [protocol.read_json(d / "exit.json")
              for d in protocol.pilots_dir(cli.runs / name).glob("[0-9]*")]
    assert any(e and e["reason"] == "its time limit is near" for e in pilots), pilots


@pytest.mark.slurm_clock  # it waits on SlurmdTimeout and kills a slurmd: on the clock cluster
def test_a_pilot_node_whose_slurmd_dies_fails_the_pilot_and_its_trials_run_again(
        cli, slurm_cluster):
    """kill -9 of the slurmd of a pilot's second node: after SlurmdTimeout the node is DOWN
    and the pilot's job ends NODE_FAIL; both of its trials end with it and run again in a new
    pilot, which Slurm places on other nodes, each after one failed attempt."""
    name = f"pl-nodefail-{RUN}"
    text = SLEEPER.format(name=name, sleep=0, parallel=2, max=1, xs=[1, 2],
                          pilot_nodes=2).replace(
        "sleep 0;", 'if [ "$HPSEARCH_ATTEMPT" = 1 ]; then sleep 150 || exit 3; fi;').replace(
        "slots_per_node: 2", "slots_per_node: 1")
    spec = cli.write_spec(text, "nodefail.yaml")
    driver = cli.popen("submit", spec, env=slurm_cluster.env)
    dead = None
    try:
        deadline = time.monotonic() + 120
        while dead is None and time.monotonic() < deadline:
            trials = read_store(cli.runs, name)[1] if (cli.runs / name / STORE_FILE).exists() \
                else []
            if len(trials) == 2 and all(t.state == "running" and t.nodes for t in trials):
                dead = sorted(t.nodes for t in trials)[-1]  # not the pilot's batch node
                os.kill(_slurmd_pid(slurm_cluster, dead), signal.SIGKILL)
            time.sleep(0.5)
        assert dead is not None, "the trials never ran"
        out, err = driver.communicate(timeout=400)
    finally:
        if driver.poll() is None:
            driver.kill()
        subprocess.run(["bash", str(ROOT / "scripts" / "slurm-cluster.sh"), "start"],
                       capture_output=True, timeout=300, env={**os.environ, **slurm_cluster.env})
        if dead is not None:
            _wait_node_up(slurm_cluster, dead)
    assert driver.returncode == 0, out + err
    attempts = _attempts(cli.runs, name)
    for got in attempts.values():
        # Slurm ends the whole job: a trial whose end the pilot wrote first (it got SIGTERM)
        # is preempted; one it could not tell ends as the job did, node_fail. The trial on
        # the dead node may end first, lost: its srun step ends about SlurmdTimeout after the
        # kill, a moment before Slurm marks the node DOWN; the pilot then sets that node
        # aside, so the retry does not run (and fail) there again (one retry, not three).
        assert len(got) == 2 and got[0]["failure"] in ("node_fail", "preempted", "lost"), got
        assert got[1]["state"] == "completed" and got[0]["job_id"] != got[1]["job_id"]
        assert dead not in expand(got[1]["nodes"])
    state = slurm_cluster.run("sacct", "-X", "-P", "-n", "-j", got[0]["job_id"],
                              "-o", "State").stdout.split()
    assert state == ["NODE_FAIL"], state


# How the trial on the pilot's second node is lost: through its node's agent (the default),
# the agent dies (kill -9 of the trial's parent, as when its node goes); as an srun step of
# its own (`agents: false`), its shell dies, so it writes no exit code.
LOST = {"agent": 'grep -q node_agent /proc/$PPID/cmdline && kill -9 $PPID && sleep 30',
        "step": '[ -n "$SLURM_STEP_ID" ] && kill -9 $$'}


@pytest.mark.parametrize("via", sorted(LOST))
def test_a_trial_lost_on_a_pilot_node_is_retried_on_another_node(cli, slurm_cluster, via):
    """The trial on a pilot's second node is lost: its node's agent dies under it, or (with
    `agents: false`) the shell of its srun step dies; no exit code either way. The pilot sets
    that node aside and the retry waits for a slot on the other node instead of running
    there again (where a dying node would fail it again, spending its attempts)."""
    name = f"pl-lost-{via}-{RUN}"
    text = SLEEPER.format(name=name, sleep=0, parallel=2, max=1, xs=[1, 2],
                          pilot_nodes=2).replace(
        "sleep 0;", f'if [ "$HPSEARCH_ATTEMPT" = 1 ]; then {{ {LOST[via]}; }} || sleep 8; '
        # the retry, which must wait for the other trial's slot, need not sleep itself
        'fi;').replace("slots_per_node: 2", "slots_per_node: 1")
    if via == "step":
        text = text.replace("heartbeat: 1}", "heartbeat: 1, agents: false}")
    proc = cli("submit", cli.write_spec(text, "lost.yaml"), env=slurm_cluster.env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    attempts = _attempts(cli.runs, name)
    lost = [got for got in attempts.values() if len(got) > 1]
    assert len(lost) == 1, attempts  # only the trial run through srun killed itself
    (first, retry), = lost
    assert first["failure"] == "lost" and retry["state"] == "completed", lost
    assert first["job_id"] == retry["job_id"], lost  # the same pilot
    assert retry["nodes"] != first["nodes"], lost  # not on the node where it was lost
    (other,) = [got for got in attempts.values() if len(got) == 1]
    assert other[0]["state"] == "completed" and other[0]["nodes"] == retry["nodes"]
    assert retry["started"] >= other[0]["finished"] - 1, attempts  # it waited for that slot


def _wait_running(cli, name: str, count: int, timeout: float = 120) -> list:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        trials = read_store(cli.runs, name)[1] if (cli.runs / name / STORE_FILE).exists() \
            else []
        if len(trials) == count and all(t.state == "running" and t.nodes for t in trials):
            return trials
        time.sleep(0.5)
    raise AssertionError(f"{count} trials of {name} never ran")


def _queued_jobs(slurm_cluster, prefix: str) -> list[str]:
    out = slurm_cluster.run("squeue", "-h", "-o", "%i %j").stdout
    return [line.split()[0] for line in out.splitlines() if f" {prefix}." in line]


def test_cancel_stops_pilots_and_trials_with_or_without_a_driver(cli, slurm_cluster):
    """`hpsearch cancel` of a running search: the driver cancels the trials and lets its
    pilots go; of a search whose driver was SIGKILLed: cancel scancels the pilots itself.
    Either way no job of the experiment is left in squeue and every trial is cancelled."""
    for how in ("driver", "no-driver"):
        name = f"pl-cancel-{how}-{RUN}"
        spec = cli.write_spec(SLEEPER.format(name=name, sleep=120, parallel=2, max=1,
                                             xs=[1, 2], pilot_nodes=2), f"{name}.yaml")
        driver = cli.popen("submit", spec, env=slurm_cluster.env)
        try:
            _wait_running(cli, name, 2)
            if how == "no-driver":
                driver.send_signal(signal.SIGKILL)
                driver.wait(timeout=30)
            out = cli("cancel", name, env=slurm_cluster.env, check=0, timeout=120).stdout
            driver.wait(timeout=60)
        finally:
            if driver.poll() is None:
                driver.kill()
        prefix = job_prefix(cli.runs, name)
        deadline = time.monotonic() + 60
        while _queued_jobs(slurm_cluster, prefix) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _queued_jobs(slurm_cluster, prefix) == [], (how, out)
        _, trials = read_store(cli.runs, name)
        assert [t.state for t in trials] == ["cancelled", "cancelled"], (how, out)
        reader = Reader(cli.runs / name / STORE_FILE)
        try:
            assert all(row.state == "ended" for row in reader.pilots()), how
        finally:
            reader.close()

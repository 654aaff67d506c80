"""The pilot's building blocks without Slurm: the file protocol, the slots, the supply policy,
and the pilot program itself as a real process on this machine (one node: this host)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpsearch.launch.attempt import Launch
from hpsearch.pilot import protocol
from hpsearch.pilot.slots import Slots
from hpsearch.pilot.supply import Supply

LEAVES = {"n1": "a", "n2": "a", "n3": "b", "n4": "b", "n5": "c", "n6": "c"}


# -- slots ------------------------------------------------------------------------------------

def test_a_multi_node_trial_gets_nodes_under_one_leaf_the_fullest_that_holds_it():
    slots = Slots(list(LEAVES), 1, leaf_of=LEAVES)
    assert slots.take(1).nodes == ("n1",)          # leaf a now has one free node
    assert slots.take(2).nodes == ("n3", "n4")     # not n2+n3: one leaf
    assert slots.take(1).nodes == ("n2",)          # best fit: the leaf with one free node
    assert slots.take(2).nodes == ("n5", "n6")
    assert slots.take(1) is None


def test_without_a_leaf_for_two_nodes_it_takes_the_fewest_leaves_in_allocation_order():
    slots = Slots(list(LEAVES), 1, leaf_of=LEAVES)
    for node in ("n1", "n3"):
        slots.hold(type(slots.take(1))((node,), 0))
    slots.busy = {("n1", 0), ("n3", 0), ("n5", 0)}
    grant = slots.take(3)
    assert grant.nodes == ("n2", "n4", "n6")  # the allocation's order: n2 runs the command


def test_gpu_slots_give_each_trial_its_own_gpus_with_the_same_ids_on_every_node():
    slots = Slots(["n1", "n2"], 2, gpus_per_slot=2, gpu_ids=["0", "1", "2", "3"])
    first, second = slots.take(2), slots.take(2)
    assert (first.nodes, first.gpus) == (("n1", "n2"), ("0", "1"))
    assert (second.nodes, second.gpus) == (("n1", "n2"), ("2", "3"))
    assert slots.take(1) is None and slots.free_for(1) == 0
    slots.give_back(first)
    assert slots.free_for(2) == 1 and slots.take(1).gpus == ("0", "1")


def test_a_node_set_aside_takes_no_new_trial_until_its_time_is_up():
    """A trial lost on n2 (its srun step ended, no exit code): the retry must not go to n2
    while Slurm may still be finding out that n2 is dead."""
    slots = Slots(["n1", "n2"], 1)
    first, second = slots.take(1), slots.take(1)
    assert (first.nodes, second.nodes) == (("n1",), ("n2",))
    slots.give_back(second)
    slots.set_aside("n2", 0.3)
    assert slots.take(1) is None and slots.free_for(1) == 0  # n1 busy, n2 set aside
    slots.give_back(first)
    assert slots.free_for(1) == 1 and slots.take(1).nodes == ("n1",)
    time.sleep(0.35)
    assert slots.free_for(1) == 1 and slots.take(1).nodes == ("n2",)


def test_slots_refuse_more_gpus_than_the_node_shows():
    with pytest.raises(ValueError, match="2 slot\\(s\\) of 1 GPU\\(s\\) need 2 GPUs per node; "
                                         "the node shows 1 \\(0\\)"):
        Slots(["n1"], 2, gpus_per_slot=1, gpu_ids=["0"])


# -- supply -----------------------------------------------------------------------------------

def test_supply_submits_pilots_for_the_ready_trials_the_free_slots_cannot_take():
    supply = Supply(max_pilots=3, trials_per_pilot=4)
    assert supply.to_submit(ready=1, free_slots=0, live=0) == 1
    assert supply.to_submit(ready=9, free_slots=0, live=0) == 3
    assert supply.to_submit(ready=9, free_slots=4, live=1) == 2
    assert supply.to_submit(ready=9, free_slots=0, live=3) == 0   # the cap
    assert supply.to_submit(ready=2, free_slots=3, live=1) == 0
    assert supply.capacity(accepting=4, live=2) == 4 + 4 * 1  # one of the two winds down
    # pilots of two sites, of 4 and 6 slots, both take work: theirs, and the smallest for
    # the one it may still submit
    assert supply.capacity(accepting=4 + 6, live=2) == 10 + 4


# -- the protocol -----------------------------------------------------------------------------

def _launch(tmp_path: Path, trial: int, attempt: int = 1, command: str = "true") -> Launch:
    tdir = tmp_path / "trials" / f"{trial:05d}"
    return Launch(trial, attempt, command, {"HPSEARCH_TRIAL_DIR": str(tdir),
                                            "HPSEARCH_ATTEMPT": str(attempt)},
                  tdir, tmp_path, {"x": trial}, time_factor=1.5)


def test_an_assignment_round_trips_and_temporary_files_are_not_assignments(tmp_path):
    paths = protocol.PilotPaths(tmp_path / "pilots" / "1")
    paths.make()
    launch = _launch(tmp_path, 7, 2)
    protocol.write_json(paths.file("inbox", protocol.name_of(7, 2)),
                        protocol.launch_to_dict(launch))
    (paths.dir("inbox") / ".7.2.json.ab12.tmp").write_text("{")
    assert protocol.names(paths.dir("inbox")) == ["7.2.json"]
    back = protocol.launch_from_dict(protocol.read_json(paths.file("inbox", "7.2.json")))
    assert back == launch and back.time_factor == 1.5 and back.params == {"x": 7}
    assert protocol.where(paths, "7.2.json") == "inbox"
    assert protocol.where(paths, "8.1.json") is None


def test_archive_moves_a_stored_attempts_files_to_done_even_in_a_pilot_dir_without_one(
        tmp_path):
    """Once the driver stored an end, the attempt's started/ and ended/ files move to done/
    (the dirs listed every tick hold only attempts in flight); moving again, or an attempt
    whose started/ file is missing, is passed over; its cancel/ file goes; a pilot dir made
    before done/ existed gets it."""
    paths = protocol.PilotPaths(tmp_path / "1")
    for state in protocol.STATES:  # as an older version made it: no done/
        paths.dir(state).mkdir(parents=True)
    for name in ("3.1.json", "4.1.json"):
        protocol.write_json(paths.file("ended", name), {"exit_code": 0})
    protocol.write_json(paths.file("started", "3.1.json"), {"nodes": "node1"})
    protocol.write_json(paths.file("cancel", "3.1.json"), {"time": 1.0})
    protocol.archive(paths, "3.1.json")
    protocol.archive(paths, "3.1.json")
    protocol.archive(paths, "4.1.json")
    assert protocol.names(paths.dir("started")) == protocol.names(paths.dir("ended")) == []
    assert protocol.names(paths.dir("cancel")) == []  # the pilot lists it every tick
    assert protocol.names(paths.dir("done/started")) == ["3.1.json"]
    assert protocol.names(paths.dir("done/ended")) == ["3.1.json", "4.1.json"]
    assert protocol.read_json(paths.file("done/ended", "4.1.json")) == {"exit_code": 0}


def test_silence_is_measured_on_the_readers_clock_from_the_last_change(tmp_path):
    path = tmp_path / "beat.json"
    beat, watch = protocol.Beat(path, 0.0), protocol.Watch(path)
    beat.write(state="running")
    assert watch.read()["state"] == "running" and watch.silent_for() < 0.5
    time.sleep(0.3)
    watch.read()  # the same sequence number: still silent since the first read
    assert watch.silent_for() >= 0.3
    beat.write(state="running")
    watch.read()
    assert watch.silent_for() < 0.1


# -- the pilot program on this machine --------------------------------------------------------

REPORT = ("echo \"pilot=$HPSEARCH_PILOT nodes=$SLURM_JOB_NODELIST gpus=$CUDA_VISIBLE_DEVICES\"; "
          "echo \"began=$(date +%s.%N)\"; sleep 1; echo \"ended=$(date +%s.%N)\"; "
          "echo \"@hpsearch step=0 loss=$HPSEARCH_TRIAL_ID\"")


def _seen(out: str) -> dict[str, str]:
    """key=value words a REPORT trial printed."""
    return dict(w.split("=", 1) for line in out.splitlines() for w in line.split() if "=" in w)


def _pilot(tmp_path: Path, stderr=None, **config) -> tuple[protocol.PilotPaths, subprocess.Popen]:
    """A pilot process for experiment dir tmp_path, as its job would start it, without Slurm
    (one node: this host); a driver heartbeat that the test keeps writing."""
    paths = protocol.PilotPaths(protocol.pilots_dir(tmp_path) / "1")
    paths.make()
    cfg = {"pilot": 1, "experiment": "t", "time_limit": 600, "nodes": 1, "slots_per_node": 2,
           "trial_nodes": 1, "trial_tasks_per_node": 1, "trial_cpus": 1, "trial_gpus": 1,
           "trial_time": None, "idle_timeout": 30, "grace": 60, "heartbeat": 0.2,
           "signal": None, "signal_before": 0, "kill_grace": 2, **config}
    protocol.write_json(paths.config, cfg)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env["CUDA_VISIBLE_DEVICES"] = "5,7"  # two GPU ids: one per slot
    proc = subprocess.Popen([sys.executable, "-c", "import sys; from hpsearch.pilot.program "
                             "import main; print(main(sys.argv[1]))", str(paths.root)],
                            env=env, stdout=subprocess.PIPE, stderr=stderr, text=True)
    return paths, proc


def _driver_beat(tmp_path: Path) -> protocol.Beat:
    protocol.pilots_dir(tmp_path).mkdir(parents=True, exist_ok=True)
    beat = protocol.Beat(protocol.pilots_dir(tmp_path) / protocol.DRIVER_HEARTBEAT, 0.1)
    beat.write(state="running")
    return beat


def _wait_for(predicate, beat: protocol.Beat | None, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        if beat is not None and beat.due():
            beat.write(state="running")
        time.sleep(0.05)


def test_a_pilot_runs_its_assignments_two_at_a_time_each_on_its_own_gpu_then_leaves(tmp_path):
    beat = _driver_beat(tmp_path)
    paths, proc = _pilot(tmp_path)
    for trial in range(4):
        protocol.write_json(paths.file("inbox", protocol.name_of(trial, 1)),
                            protocol.launch_to_dict(_launch(tmp_path, trial, command=REPORT)))
    _wait_for(lambda: len(protocol.names(paths.dir("ended"))) == 4, beat)
    ends = {n: protocol.read_json(paths.file("ended", n))
            for n in protocol.names(paths.dir("ended"))}
    assert all(e["exit_code"] == 0 and e["reason"] == "exited" for e in ends.values())
    starts = [protocol.read_json(paths.file("started", n)) for n in sorted(ends)]
    assert all(s["nodes"] == os.uname().nodename for s in starts)
    seen = [_seen((tmp_path / "trials" / f"{trial:05d}" / "stdout.log").read_text())
            for trial in range(4)]
    for trial, (start, saw) in enumerate(zip(starts, seen)):  # each saw its one GPU
        assert saw["pilot"] == "1" and saw["nodes"] == os.uname().nodename
        assert saw["gpus"] == start["gpus"] and saw["gpus"] in ("5", "7"), (trial, saw)
        assert (tmp_path / "trials" / f"{trial:05d}" / "exit_code").read_text() == "0 1\n"
    spans = [(float(saw["began"]), float(saw["ended"]), saw["gpus"]) for saw in seen]
    side_by_side = [(a, b) for i, a in enumerate(spans) for b in spans[i + 1:]
                    if a[0] < b[1] and b[0] < a[1]]
    assert side_by_side, spans  # two at a time ...
    assert all(a[2] != b[2] for a, b in side_by_side), spans  # ... never on one GPU
    paths.stop.touch()  # the driver is done with it
    assert proc.wait(timeout=30) == 0
    assert protocol.read_json(paths.exit)["reason"] == "the driver asked it to stop"
    assert protocol.read_json(paths.heartbeat)["state"] == "exited"


@pytest.mark.slow  # 4.3 s in the quick tier (2026-11-30): over its 3 s rule
def test_a_pilot_without_a_driver_takes_no_new_work_and_leaves_after_the_grace(tmp_path):
    """The driver's heartbeat stops: the running trial finishes and its end is kept; the
    assignment that came meanwhile is not claimed; after `grace` the pilot leaves."""
    beat = _driver_beat(tmp_path)
    paths, proc = _pilot(tmp_path, grace=4.0, heartbeat=0.2)
    protocol.write_json(paths.file("inbox", protocol.name_of(0, 1)), protocol.launch_to_dict(
        _launch(tmp_path, 0, command="sleep 3; echo @hpsearch step=0 loss=1")))
    _wait_for(lambda: protocol.names(paths.dir("started")), beat)
    time.sleep(2.5)  # the driver's heartbeat stops (3 beats and 1 s: absent)
    protocol.write_json(paths.file("inbox", protocol.name_of(1, 1)),
                        protocol.launch_to_dict(_launch(tmp_path, 1, command=REPORT)))
    assert proc.wait(timeout=30) == 0
    assert protocol.names(paths.dir("ended")) == ["0.1.json"]
    assert protocol.read_json(paths.file("ended", "0.1.json"))["exit_code"] == 0
    assert protocol.names(paths.dir("inbox")) == ["1.1.json"]  # left for the next driver
    assert protocol.read_json(paths.exit)["reason"] == "no driver for 4 s"


def test_an_idle_pilot_leaves_after_its_idle_timeout(tmp_path):
    beat = _driver_beat(tmp_path)
    paths, proc = _pilot(tmp_path, idle_timeout=1.0)
    _wait_for(lambda: proc.poll() is not None, beat, timeout=20)
    assert protocol.read_json(paths.exit)["reason"] == "idle for 1 s"


@pytest.mark.slow  # over 5 s in the quick tier on 2026-11-28 (docs/testing.md#tiers)
def test_a_pilot_near_its_end_stops_its_trial_which_ends_as_preempted(tmp_path):
    """Its time limit is near: no checkpoint signal in the spec, so SIGTERM; the trial ends
    preempted (the retry rules run it again elsewhere), and nothing more is claimed."""
    beat = _driver_beat(tmp_path)
    paths, proc = _pilot(tmp_path, time_limit=12, kill_grace=2)
    protocol.write_json(paths.file("inbox", protocol.name_of(0, 1)),
                        protocol.launch_to_dict(_launch(tmp_path, 0, command="sleep 60")))
    _wait_for(lambda: proc.poll() is not None, beat, timeout=40)
    end = protocol.read_json(paths.file("ended", "0.1.json"))
    assert end["reason"] == "preempted" and "stopped it before its own end" in end["detail"]
    assert protocol.read_json(paths.exit)["reason"] == "its time limit is near"


def test_a_trial_that_exits_0_on_the_wind_down_signal_is_told_as_stopped(tmp_path):
    """Near its end the pilot sends the checkpoint signal; a trial that exits 0 on it has
    not finished: its end says so (stopped), and the driver counts it preempted when its
    objective is missing, not as the trial's own failure (no_objective, never retried)."""
    beat = _driver_beat(tmp_path)
    paths, proc = _pilot(tmp_path, time_limit=12, kill_grace=2, signal="USR1",
                         signal_before=4)
    protocol.write_json(paths.file("inbox", protocol.name_of(0, 1)), protocol.launch_to_dict(
        _launch(tmp_path, 0, command="trap 'exit 0' USR1; sleep 60 & wait")))
    _wait_for(lambda: proc.poll() is not None, beat, timeout=40)
    end = protocol.read_json(paths.file("ended", "0.1.json"))
    assert (end["reason"], end["exit_code"], end["stopped"]) == ("exited", 0, "preempted"), end
    assert "stopped it before its own end" in end["detail"]


def test_a_cancel_file_stops_that_trial(tmp_path):
    beat = _driver_beat(tmp_path)
    paths, proc = _pilot(tmp_path)
    protocol.write_json(paths.file("inbox", protocol.name_of(3, 1)),
                        protocol.launch_to_dict(_launch(tmp_path, 3, command="sleep 60")))
    _wait_for(lambda: protocol.names(paths.dir("started")), beat)
    protocol.write_json(paths.file("cancel", protocol.name_of(3, 1)), {})
    _wait_for(lambda: protocol.names(paths.dir("ended")), beat)
    assert protocol.read_json(paths.file("ended", "3.1.json"))["reason"] == "cancelled"
    paths.stop.touch()
    assert proc.wait(timeout=30) == 0
    json.loads(paths.heartbeat.read_text())


@pytest.mark.slow  # over 7 s in the quick tier (docs/testing.md#tiers)
def test_a_pilot_too_short_for_another_trial_takes_no_more_and_leaves(tmp_path):
    """Its time left drops below one trial's time limit: it finishes what runs, claims
    nothing more and leaves, so the driver can have a new pilot instead of an idle one."""
    beat = _driver_beat(tmp_path)
    # it ends at 25 s; an attempt needs 14 x 1.5 = 21 s: it claims one only in its first 4 s,
    # and takes nothing more from 11 s on
    paths, proc = _pilot(tmp_path, time_limit=30, trial_time=14)
    protocol.write_json(paths.file("inbox", protocol.name_of(0, 1)), protocol.launch_to_dict(
        _launch(tmp_path, 0, command="sleep 14; echo @hpsearch step=0 loss=1")))
    _wait_for(lambda: protocol.names(paths.dir("started")), beat)
    _wait_for(lambda: (protocol.read_json(paths.heartbeat) or {}).get("state") == "draining", beat)
    protocol.write_json(paths.file("inbox", protocol.name_of(1, 1)),
                        protocol.launch_to_dict(_launch(tmp_path, 1, command=REPORT)))
    _wait_for(lambda: proc.poll() is not None, beat, timeout=40)
    assert protocol.names(paths.dir("ended")) == ["0.1.json"]
    assert protocol.names(paths.dir("inbox")) == ["1.1.json"]  # withdrawn by the driver, later
    assert protocol.read_json(paths.exit)["reason"] == "too little time left for another trial"


# What a trial does on SIGTERM: `save` takes 1 s to write checkpoints/saved, then exits 0;
# `ignore` ignores it. It writes `blocking` once its handler is in place.
GRACEFUL = (
    "import os, signal, sys, time\n"
    "from pathlib import Path\n"
    "tdir = Path(os.environ['HPSEARCH_TRIAL_DIR'])\n"
    "def save(signum, frame):\n"
    "    time.sleep(1.0)\n"
    "    (tdir / 'saved').write_text('1')\n"
    "    sys.exit(0)\n"
    "signal.signal(signal.SIGTERM, save if sys.argv[1] == 'save' else signal.SIG_IGN)\n"
    "(tdir / 'blocking').write_text('1')\n"
    "time.sleep(120)\n")


def _graceful(tmp_path: Path, paths: protocol.PilotPaths, beat: protocol.Beat, mode: str) -> Path:
    """Start a GRACEFUL trial in the pilot; its trial dir once its handler is in place."""
    script = tmp_path / "graceful.py"
    script.write_text(GRACEFUL)
    protocol.write_json(paths.file("inbox", protocol.name_of(0, 1)), protocol.launch_to_dict(
        _launch(tmp_path, 0, command=f"{sys.executable} {script} {mode}")))
    tdir = tmp_path / "trials" / "00000"
    _wait_for(lambda: (tdir / "blocking").exists(), beat)
    return tdir


def test_a_cancelled_trial_gets_the_kill_grace_to_save_and_exit(tmp_path):
    beat = _driver_beat(tmp_path)
    paths, proc = _pilot(tmp_path, kill_grace=20)
    tdir = _graceful(tmp_path, paths, beat, "save")
    asked = time.monotonic()
    protocol.write_json(paths.file("cancel", protocol.name_of(0, 1)), {})
    _wait_for(lambda: protocol.names(paths.dir("ended")), beat)
    assert (tdir / "saved").exists(), "killed before its SIGTERM handler was done"
    assert time.monotonic() - asked < 20  # it exited by itself, before the grace was up
    end = protocol.read_json(paths.file("ended", "0.1.json"))
    assert (end["reason"], end["exit_code"]) == ("cancelled", 0)
    paths.stop.touch()
    assert proc.wait(timeout=30) == 0


def test_a_scancelled_pilot_gives_its_trials_the_kill_grace_to_save_and_exit(tmp_path):
    """scancel: Slurm sends SIGTERM to every process of the job, the pilot and the trial's
    shell among them, and SIGKILL only KillWait (30 s by default) later."""
    beat = _driver_beat(tmp_path)
    paths, proc = _pilot(tmp_path, kill_grace=20)
    tdir = _graceful(tmp_path, paths, beat, "save")
    leader = protocol.read_json(paths.file("started", "0.1.json"))["pid"]
    os.killpg(leader, signal.SIGTERM)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    assert (tdir / "saved").exists(), "killed before its SIGTERM handler was done"
    end = protocol.read_json(paths.file("ended", "0.1.json"))
    assert end["exit_code"] == 0
    # its exit 0 is Slurm's stop, not a finished trial: preempted (the pilot's wind-down
    # stopped it), or an exit the driver counts preempted when the objective is missing
    assert "preempted" in (end["reason"], end["stopped"]), end
    assert protocol.read_json(paths.exit)["reason"] == "Slurm sent SIGTERM"


def test_a_trial_that_ignores_sigterm_is_killed_after_the_kill_grace(tmp_path):
    beat = _driver_beat(tmp_path)
    paths, proc = _pilot(tmp_path, kill_grace=1)
    _graceful(tmp_path, paths, beat, "ignore")
    asked = time.monotonic()
    protocol.write_json(paths.file("cancel", protocol.name_of(0, 1)), {})
    _wait_for(lambda: protocol.names(paths.dir("ended")), beat)
    assert 1.0 <= time.monotonic() - asked < 20
    end = protocol.read_json(paths.file("ended", "0.1.json"))
    assert (end["reason"], end["exit_code"]) == ("cancelled", 128 + signal.SIGKILL)
    paths.stop.touch()
    assert proc.wait(timeout=30) == 0

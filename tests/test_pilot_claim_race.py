"""A pilot claiming its assignments while a restarted driver takes them back, with crashes
(issue 22).

The real pilot program (hpsearch.pilot.program: `_claim` renames inbox/ -> claimed/, then
runs the attempt) and the real driver side (PilotExecutor.adopt after a restart: an
unclaimed assignment is renamed inbox/ -> withdrawn/, and the driver binds it again) run as
separate processes on the same assignments, round after round. In every round the pilot is
SIGKILLed at a random moment of its claims (its node failed), and in some rounds the driver
too. Then a driver restarted once more recovers as `hpsearch resume` does: it adopts every
attempt, binds the withdrawn ones to another, live pilot, and waits for every end (Slurm, a
stand-in here, says the killed pilot's job ended NODE_FAIL).

What a user needs from it: each attempt was either claimed by the pilot or withdrawn by the
driver, never both, none left behind; a withdrawn one never ran in the killed pilot and ran
exactly once in the live one; a claimed one ran at most once, only in its pilot, and the
driver ends it (its own end, or node_fail: the retry rules run it again); no driver's word
on an attempt contradicts where its assignment is."""

from __future__ import annotations

import multiprocessing
import os
import random
import shlex
import signal
import time
from pathlib import Path

import pytest

from hpsearch.executors.base import Adoptable, Ended
from hpsearch.launch.attempt import Launch
from hpsearch.pilot import program, protocol
from hpsearch.pilot.executor import PilotExecutor
from hpsearch.preflight import parse_spec
from hpsearch.procs import environ
from hpsearch.slurm.parse import JobRecord
from hpsearch.spec.model import SlurmJob
from hpsearch.store import runs
from hpsearch.store.runs import STORE_FILE
from hpsearch.store.store import Store

ROUNDS = 20
PER_ROUND = 12  # assignments in the killed pilot's inbox each round
# Each assignment carries this much more: reading it takes as long as on a slow shared file
# system, which widens the moments between the pilot reading an assignment and claiming it
PADDING = "x" * (256 << 10)
SPARE, SPARE_JOB = 1, "9001"  # the live pilot that runs what was withdrawn
FORK = multiprocessing.get_context("fork")  # no re-import: each side starts in milliseconds

SPEC = """\
name: race
command: "true {x}"
search: {strategy: random, trials: 1000, space: {x: {low: 0.0, high: 1.0}}}
objective: {metric: loss}
executor:
  type: slurm
  pilots: {max: 1, slots_per_node: 16, heartbeat: 0.2, grace: 60, idle_timeout: 60}
"""


class _Slurm:
    """Slurm as a restarted driver asks it: the jobs in `dead` ended NODE_FAIL, the others
    run; no topology. It has no sbatch: the driver must bind to the live pilot, never submit
    one."""

    def __init__(self, dead: set[str]) -> None:
        self.dead = dead

    def sacct(self, job_ids) -> list[JobRecord]:
        return [JobRecord(job, None, None, "pilot", "NODE_FAIL", "NODE_FAIL", None, None,
                          ("node1",), None, None, None, None, None)
                for job in job_ids if job in self.dead]

    def squeue(self, job_ids=None) -> list:
        return []

    def scancel(self, job_ids, signal=None) -> None:
        pass

    def config_value(self, key: str) -> None:
        return None  # no topology plugin


def _job(tmp_path: Path) -> SlurmJob:
    spec = parse_spec(SPEC, "race.yaml", tmp_path, tmp_path / "runs")
    job = spec.slurm_job()
    job.experiment_dir.mkdir(parents=True)
    Store.create(job.experiment_dir / STORE_FILE, name=spec.name, spec_yaml=SPEC,
                 spec_file=str(tmp_path / "race.yaml"), base_dir=str(tmp_path),
                 strategy="random", directions=["minimize"], trials_requested=1000).close()
    return job


def _add_pilot(job: SlurmJob, pilot_id: int, job_id: str, slots: int) -> protocol.PilotPaths:
    """A pilot the store has running as `job_id`, with its dir and configuration, as the
    driver left them (before anything of it runs)."""
    store = Store(job.experiment_dir / STORE_FILE)
    try:
        store.add_pilot(pilot_id, f"hps.race.t.pilot.{pilot_id}")
        store.update_pilot(pilot_id, job_id=job_id, state="running")
    finally:
        store.close()  # closed before any fork: a child never uses the parent's connection
    paths = protocol.PilotPaths(protocol.pilots_dir(job.experiment_dir) / str(pilot_id))
    paths.make()
    protocol.write_json(paths.config, {
        "pilot": pilot_id, "experiment": "race", "time_limit": 600, "nodes": 1,
        "slots_per_node": slots, "trial_nodes": 1, "trial_tasks_per_node": 1, "trial_cpus": 1,
        "trial_gpus": 0, "trial_time": None, "idle_timeout": 60, "grace": 60,
        "heartbeat": 0.2, "signal": None, "signal_before": 0, "kill_grace": 2})
    return paths


def _launch(job: SlurmJob, trial: int) -> Launch:
    """Attempt 1 of `trial`: it appends the id of the pilot that runs it to its `ran` file."""
    tdir = runs.trial_dir(job.experiment_dir, trial)
    command = f"echo \"$HPSEARCH_PILOT\" >> {shlex.quote(str(tdir / 'ran'))}"
    return Launch(trial, 1, command, {"HPSEARCH_TRIAL_DIR": str(tdir), "HPSEARCH_ATTEMPT": "1"},
                  tdir, job.experiment_dir, {"x": trial})


def _pilot_process(root: Path, job_id: str, ready) -> None:
    """The pilot job: its program, started as its job would start it, on this host."""
    for key in [k for k in os.environ if k.startswith("SLURM_")] + ["CUDA_VISIBLE_DEVICES"]:
        os.environ.pop(key, None)
    os.environ["SLURM_JOB_ID"] = job_id
    if ready is not None:
        ready.wait()
    program.main(str(root))


def _driver_process(job: SlurmJob, paths: protocol.PilotPaths, job_id: str, trials: list[int],
                    after_claims: int, said: Path, ready) -> None:
    """A driver restarted while the pilot runs: once the pilot has claimed `after_claims`
    assignments, it adopts each attempt the store has bound to the pilot, in trial order as
    the real one does, and notes what it concluded (the real one stores it)."""
    store = Store(job.experiment_dir / STORE_FILE)
    executor = PilotExecutor(job, store, _Slurm(set()))
    out = os.open(said, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    ready.wait()
    _until(lambda: len(protocol.names(paths.dir("claimed"))) >= after_claims)
    for trial in trials:
        outcome = executor.adopt(Adoptable(trial, 1, runs.trial_dir(job.experiment_dir, trial),
                                           job_id=job_id))
        os.write(out, f"{trial} {_kind(outcome)}\n".encode())


def _until(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.0002)


def _kind(outcome) -> str:
    return type(outcome).__name__  # Started, Ended, or NoneType: never claimed, bind again


def _wait_for_trials_of(job: SlurmJob, pilot_id: int, timeout: float = 20.0) -> None:
    """Until no attempt the killed pilot started still runs (they outlive it here). Found
    by their environment: this experiment's trial dirs (others' tests run pilots too)."""
    trials = str(job.experiment_dir / "trials") + os.sep

    def running() -> list[int]:
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            env = environ(int(pid))
            if env.get("HPSEARCH_PILOT") == str(pilot_id) \
                    and env.get("HPSEARCH_TRIAL_DIR", "").startswith(trials):
                found.append(int(pid))
        return found

    deadline = time.monotonic() + timeout
    while left := running():
        assert time.monotonic() < deadline, f"pilot {pilot_id}'s trials still run: {left}"
        time.sleep(0.01)


def _recover(job: SlurmJob, trials: list[int], job_id: str, dead: set[str]) -> tuple:
    """A driver restarted after the crash: adopt, bind again what was never claimed, poll
    until every attempt ended. Returns (what adopt said, each attempt's end)."""
    store = Store(job.experiment_dir / STORE_FILE)
    try:
        executor = PilotExecutor(job, store, _Slurm(dead))
        adopted, ends = {}, {}
        for trial in trials:
            outcome = executor.adopt(Adoptable(
                trial, 1, runs.trial_dir(job.experiment_dir, trial), job_id=job_id))
            adopted[trial] = _kind(outcome)
            if outcome is None:
                executor.submit(_launch(job, trial))
            elif isinstance(outcome, Ended):
                ends[trial] = outcome
        deadline = time.monotonic() + 20
        while True:  # at least one poll: Slurm's word that the pilot ended
            for event in executor.poll(0.05):
                if isinstance(event, Ended):
                    assert event.trial_id not in ends, ("two ends", event, ends)
                    ends[event.trial_id] = event
            if len(ends) == len(trials):
                return adopted, ends
            assert time.monotonic() < deadline, ("no end", sorted(set(trials) - set(ends)))
    finally:
        store.close()


@pytest.mark.slow  # over 5 s in the quick tier on 2026-11-28 (docs/testing.md#tiers)
def test_claims_and_withdrawals_racing_with_crashes_run_each_attempt_in_one_place(tmp_path):
    """ROUNDS rounds, each with a new pilot and PER_ROUND assignments (the module docstring
    says what each round does and what must hold); one spare pilot, live throughout, runs
    what the drivers take back."""
    rng = random.Random(20260522)
    job = _job(tmp_path)
    spare = _add_pilot(job, SPARE, SPARE_JOB, 16)
    spare_proc = FORK.Process(target=_pilot_process, args=(spare.root, SPARE_JOB, None))
    spare_proc.start()
    dead: set[str] = set()
    seen = {"claimed": 0, "withdrawn": 0, "rounds both won": 0, "claimed, never started": 0,
            "ended before the kill": 0, "drivers killed": 0}
    try:
        for rnd in range(ROUNDS):
            pilot_id, job_id = rnd + 2, str(5002 + rnd)
            trials = list(range(rnd * PER_ROUND, (rnd + 1) * PER_ROUND))
            paths = _add_pilot(job, pilot_id, job_id, PER_ROUND)
            for trial in trials:  # as the driver that was killed bound them
                protocol.write_json(paths.file("inbox", protocol.name_of(trial, 1)), {
                    **protocol.launch_to_dict(_launch(job, trial)), "slow": PADDING})
            said = tmp_path / f"said.{rnd}"
            assert spare_proc.is_alive(), "the live pilot left"
            killed = _race(job, paths, job_id, trials, said, rng, kill_driver=rnd % 2 == 1)
            seen["drivers killed"] += killed
            dead.add(job_id)
            _wait_for_trials_of(job, pilot_id)
            first_said = dict(line.split() for line in
                              (said.read_text() if said.exists() else "").splitlines())
            adopted, ends = _recover(job, trials, job_id, dead)
            won = _check_round(job, paths, spare, trials, job_id, first_said, adopted, ends,
                               seen)
            seen["rounds both won"] += won["claimed"] > 0 and won["withdrawn"] > 0
    finally:
        spare.stop.touch()
        spare_proc.join(timeout=30)
        if spare_proc.exitcode is None:
            spare_proc.kill()
    print(f"\n{ROUNDS} rounds of {PER_ROUND}: {seen}")
    assert spare_proc.exitcode == 0
    assert protocol.read_json(spare.exit)["reason"] == "the driver asked it to stop"
    # the race and the crashes happened: not a test that passes by never racing
    assert seen["rounds both won"] >= ROUNDS // 3, seen
    assert seen["claimed, never started"] > 0 and seen["withdrawn"] > 0, seen


def _race(job: SlurmJob, paths: protocol.PilotPaths, job_id: str, trials: list[int], said: Path,
          rng: random.Random, kill_driver: bool) -> bool:
    """One round: the pilot claims; the restarted driver starts adopting once the pilot has
    claimed a random number of them; the pilot is SIGKILLed once it has claimed a random
    number (no fewer), or has nothing left to claim; with kill_driver, the driver is
    SIGKILLed after a random number of adoptions. Returns whether the driver was killed."""
    ready = FORK.Barrier(3)
    driver_after = rng.randrange(len(trials))
    pilot_kill_at = rng.randint(driver_after, len(trials))
    driver_kill_at = rng.randrange(len(trials)) if kill_driver else None
    pilot = FORK.Process(target=_pilot_process, args=(paths.root, job_id, ready))
    driver = FORK.Process(target=_driver_process, args=(job, paths, job_id, trials,
                                                        driver_after, said, ready))
    pilot.start()
    driver.start()
    try:
        ready.wait(timeout=30)  # both sides are set up: go
        deadline = time.monotonic() + 20
        while pilot.is_alive() or (driver_kill_at is not None and driver.is_alive()):
            assert time.monotonic() < deadline, "the round did not end"
            if pilot.is_alive() and (len(protocol.names(paths.dir("claimed"))) >= pilot_kill_at
                                     or not protocol.names(paths.dir("inbox"))):
                time.sleep(rng.uniform(0, 0.002))  # anywhere in what it does next
                pilot.kill()
                pilot.join()
            if driver_kill_at is not None and driver.is_alive() and said.exists() \
                    and said.read_bytes().count(b"\n") >= driver_kill_at:
                driver.kill()
                driver.join()
            time.sleep(0.0002)
        driver.join(timeout=30)
    finally:
        for proc in (pilot, driver):
            if proc.is_alive():
                proc.kill()
                proc.join()
    assert pilot.exitcode == -signal.SIGKILL, pilot.exitcode
    assert driver.exitcode in (0, -signal.SIGKILL), driver.exitcode
    return driver.exitcode == -signal.SIGKILL


def _check_round(job, paths, spare, trials, job_id, first_said, adopted, ends, seen) -> dict:
    """Where each assignment of the round is, what ran, and what the two drivers said
    (first_said: the driver killed or not during the race; adopted: the one that
    recovered) agree. Returns how many the pilot and the driver each won."""
    won = {"claimed": 0, "withdrawn": 0}
    for trial in trials:
        name = protocol.name_of(trial, 1)
        claimed = paths.file("claimed", name).exists()
        withdrawn = paths.file("withdrawn", name).exists()
        ran_file = runs.trial_dir(job.experiment_dir, trial) / "ran"
        ran = ran_file.read_text().split() if ran_file.exists() else []
        end = ends[trial]
        facts = (trial, claimed, withdrawn, ran, first_said.get(str(trial)), adopted[trial],
                 end)
        assert claimed != withdrawn, ("claimed and withdrawn" if claimed else "lost", facts)
        assert not paths.file("inbox", name).exists(), ("left in a dead pilot", facts)
        if withdrawn:
            won["withdrawn"] += 1
            assert ran == [str(SPARE)], ("a withdrawn attempt must run once, elsewhere", facts)
            assert first_said.get(str(trial), "NoneType") == adopted[trial] == "NoneType", \
                ("a driver took for claimed an attempt it withdrew", facts)
            assert (end.reason, end.exit_code, end.job_id) == ("exited", 0, SPARE_JOB), facts
        else:
            won["claimed"] += 1
            assert ran in ([], [paths.root.name]), ("a claimed attempt runs in its pilot, "
                                                    "at most once", facts)
            assert not spare.file("claimed", name).exists(), facts
            assert first_said.get(str(trial), "Started") in ("Started", "Ended"), \
                ("a driver would run again an attempt its pilot claimed", facts)
            assert adopted[trial] in ("Started", "Ended") and end.job_id == job_id, facts
            assert end.reason in ("exited", "node_fail"), facts
            assert ran or end.reason == "node_fail", ("an end for an attempt never run", facts)
            seen["claimed, never started"] += not paths.file("started", name).exists() \
                and not paths.file("done/started", name).exists()
            seen["ended before the kill"] += end.reason == "exited"
    seen["claimed"] += won["claimed"]
    seen["withdrawn"] += won["withdrawn"]
    return won

"""Prefetch in pilots (issue 42 item 2; hpsearch.pilot.executor): where the driver may ask
trials ahead, each running pilot also holds as many assignments as it has slots, waiting in
its inbox, so a freed slot starts the next without the round trip to the driver; with nothing
ready, a waiting one moves to a pilot with a free slot. Without a cluster: two pilots
said running, and their protocol folders. On the emulated cluster: every pilot test runs
with it (random and grid searches ask ahead), benchmarks/slurm_throughput.py measures it."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpsearch.launch.attempt import Launch
from hpsearch.pilot import protocol
from hpsearch.pilot.executor import PilotExecutor
from hpsearch.pilot.fleet import PilotJob
from hpsearch.preflight import parse_spec
from hpsearch.store import rows
from hpsearch.store.runs import STORE_FILE
from hpsearch.store.store import Store

SPEC = """\
name: ahead
command: "true {x}"
search: {strategy: random, trials: 20, parallel: 4, space: {x: {low: 0.0, high: 1.0}}}
objective: {metric: loss}
executor:
  type: slurm
  pilots: {max: 2, slots_per_node: 2}
"""


class _Slurm:  # no command runs: nothing is submitted in these tests
    def config_value(self, key: str) -> None:
        return None


def _job_and_store(tmp_path: Path, text: str):
    """The spec's Slurm job, and a new store for it (no trials: bind_attempt updates none)."""
    job = parse_spec(text, "ahead.yaml", tmp_path, tmp_path / "runs").slurm_job()
    job.experiment_dir.mkdir(parents=True)
    Store.create(job.experiment_dir / STORE_FILE, name="ahead", spec_yaml=text,
                 spec_file=str(tmp_path / "ahead.yaml"), base_dir=str(tmp_path),
                 strategy="random", directions=["minimize"], trials_requested=20).close()
    return job, Store(job.experiment_dir / STORE_FILE)


@pytest.fixture
def made(tmp_path):
    """(executor factory, tmp_path): two pilots said running in each executor it makes."""
    job, store = _job_and_store(tmp_path, SPEC)
    executors = []

    def make(ahead: bool) -> PilotExecutor:
        executor = PilotExecutor(job, store, _Slurm(), ahead=ahead)
        for pid in (1, 2):  # two pilots of 2 slots, running
            paths = protocol.PilotPaths(tmp_path / f"pilots-{ahead}" / str(pid))
            paths.make()
            executor.fleet.pilots[pid] = PilotJob(pid, f"p{pid}", paths, str(100 + pid),
                                                  rows.PILOT_RUNNING, f"node{pid}")
        executors.append(executor)
        return executor
    yield make, tmp_path
    store.close()


def _launches(tmp_path: Path, ids) -> list[Launch]:
    return [Launch(i, 1, "true", {}, tmp_path / "trials" / str(i), tmp_path, {"x": 0.1})
            for i in ids]


def _inbox(executor: PilotExecutor, pid: int) -> list[str]:
    return protocol.names(executor.fleet.pilots[pid].paths.dir("inbox"))


def test_without_prefetch_a_pilot_holds_as_many_assignments_as_it_has_slots(made):
    make, tmp_path = made
    executor = make(ahead=False)
    assert executor.free_slots() == 4
    executor.ready = _launches(tmp_path, range(6))
    executor._bind()
    assert (len(_inbox(executor, 1)), len(_inbox(executor, 2))) == (2, 2)
    assert [launch.trial_id for launch in executor.ready] == [4, 5]  # wait for a slot


def test_with_prefetch_each_running_pilot_also_holds_a_slot_s_worth_waiting(made):
    make, tmp_path = made
    executor = make(ahead=True)
    assert executor.free_slots() == 4 + 4  # the search may ask 4 ahead
    executor.ready = _launches(tmp_path, range(8))
    executor._bind()
    assert (len(_inbox(executor, 1)), len(_inbox(executor, 2))) == (4, 4)
    assert executor.ready == [] and executor.free_slots() == 0
    executor.ready = _launches(tmp_path, [8])
    executor._bind()
    assert executor.ready[0].trial_id == 8  # no more than that


def test_an_assignment_waiting_in_a_full_pilot_moves_to_one_with_a_free_slot(made):
    """The search's last trials: pilot 1 runs 2 and holds 2 more; pilot 2 has emptied.
    Both waiting ones move, unless pilot 1 claimed one meanwhile (then it stays, once)."""
    make, tmp_path = made
    executor = make(ahead=True)
    executor.ready = _launches(tmp_path, range(4))
    executor._bind()
    for tid, bound in executor.bound.items():  # all to pilot 1, as if pilot 2 were full
        if bound.pilot.id == 2:
            protocol.move(bound.pilot.paths, bound.name, "inbox", "withdrawn")
            protocol.discard(bound.pilot.paths, bound.name, "withdrawn")
            bound.pilot = executor.fleet.pilots[1]
            protocol.write_json(bound.pilot.paths.file("inbox", bound.name), {"trial_id": tid})
    running = sorted(executor.bound)[:2]
    for tid in running:
        executor.bound[tid].started = True
        protocol.move(executor.fleet.pilots[1].paths, executor.bound[tid].name, "inbox",
                      "claimed")
    waiting = sorted(set(executor.bound) - set(running))
    claimed_meanwhile = executor.bound[waiting[0]].name
    protocol.move(executor.fleet.pilots[1].paths, claimed_meanwhile, "inbox", "claimed")
    executor._rebalance()
    executor._bind()
    assert _inbox(executor, 2) == [protocol.name_of(waiting[1], 1)]
    assert executor.bound[waiting[1]].pilot.id == 2
    assert executor.bound[waiting[0]].pilot.id == 1  # its pilot has it: not taken back
    assert protocol.where(executor.fleet.pilots[1].paths, claimed_meanwhile) == "claimed"
    executor._rebalance()  # nothing more to move: pilot 1 has no waiting one left
    assert executor.ready == [] and _inbox(executor, 1) == []


def test_no_prefetch_where_the_scouts_size_the_trials(tmp_path):
    """A trial asked ahead would be bound at the ceiling the scouts have not cut yet."""
    text = SPEC.replace("objective:", 'resources: {time: "auto 00:30:00", scouts: 2}\nobjective:')
    job, store = _job_and_store(tmp_path, text)
    try:
        assert not PilotExecutor(job, store, _Slurm(), ahead=True).ahead
        assert PilotExecutor(parse_spec(SPEC, "ahead.yaml", tmp_path, tmp_path / "runs")
                             .slurm_job(), store, _Slurm(), ahead=True).ahead
    finally:
        store.close()


def test_prefetch_never_runs_more_than_search_parallel_trials_at_once(made):
    """search.parallel 4 over two running pilots of 2 slots fills them: prefetch. Three such
    pilots have more slots than the search may use at once: what was sent ahead would run
    beside the others, so none is, and nothing waiting moves to the third pilot's free
    slots while 4 trials hold slots."""
    make, tmp_path = made
    executor = make(ahead=True)
    executor.ready = _launches(tmp_path, range(8))
    executor._bind()
    assert executor.free_slots() == 0 and len(executor.bound) == 8
    paths = protocol.PilotPaths(tmp_path / "third" / "3")
    paths.make()
    executor.fleet.pilots[3] = PilotJob(3, "p3", paths, "103", rows.PILOT_RUNNING, "node3")
    assert executor.free_slots() == 0  # 4 running + 4 sent ahead: no more are asked
    for bound in executor.bound.values():
        bound.started = bound.started or protocol.move(bound.pilot.paths, bound.name,
                                                       "inbox", "claimed")
        if sum(b.started for b in executor.bound.values()) == 4:
            break
    executor._rebalance()
    executor._bind()
    assert _inbox(executor, 3) == [] and executor.ready == []
    assert executor._in_slots() == 4

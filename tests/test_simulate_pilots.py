"""The placement simulator's pilot rules of issue 42 (hpsearch.placement.sim.pilots,
hpsearch.placement.sim.idle, Engine.shrink): best fit of trials into pilots, pilots sized to
the ready trials, nodes given back one by one after their hold time (and the hold time
following the queue), room made for a queued pilot, and the idle ledger that says where a
pilot's idle node-hours went. Mechanics, not timings."""

from __future__ import annotations

from dataclasses import replace

import pytest

from hpsearch.placement.sim.cluster import SimConfig
from hpsearch.placement.sim.engine import Engine, Job
from hpsearch.placement.sim.idle import CAUSES, IdleLedger, cause_of
from hpsearch.placement.sim.pilots import PilotSearch, pilot_sizes
from hpsearch.placement.sim.simulate import simulate

SMALL = SimConfig(nodes=64, leaves=4, pilot_nodes=8, idle_timeout=100.0)   # 16 nodes a leaf


def _search(config: SimConfig = SMALL, sizes=(1, 2, 4, 8), duration: float = 1000.0):
    engine = Engine(config)
    search = PilotSearch(engine, list(sizes), [duration] * len(sizes))
    engine._search = search         # as Engine.run sets it: a pilot's end reaches the search
    return engine, search


def _start_pilot(engine: Engine, search: PilotSearch, nodes: list[int], t: float = 0.0,
                 submit: float = 0.0):
    job = Job("pilot", len(nodes), submit, engine.config.pilot_time, index=search.submitted)
    search.submitted += 1
    job.nodes, job.start = list(nodes), t
    job.per_leaf = engine.cluster.allocate(job.nodes)
    search.queued.append(job)
    search.started(t, job)
    return search.running[-1]


def test_best_fit_picks_the_pilot_with_fewest_free_nodes_and_first_fit_the_oldest():
    engine, search = _search()
    roomy = _start_pilot(engine, search, list(range(0, 8)))           # 8 free
    snug = _start_pilot(engine, search, list(range(16, 19)))          # 3 free
    assert search._pilot_for(0.0, 2, 100.0) is snug
    assert search._pilot_for(0.0, 4, 100.0) is roomy                  # snug cannot hold 4
    assert search._pilot_for(0.0, 9, 100.0) is None
    engine2, first = _search(replace(SMALL, pilot_fit="first"))
    oldest = _start_pilot(engine2, first, list(range(0, 8)))
    _start_pilot(engine2, first, list(range(16, 19)))
    assert first._pilot_for(0.0, 2, 100.0) is oldest


def test_pilots_are_sized_to_the_ready_trials_first_fit_decreasing():
    assert pilot_sizes([1, 8, 2, 16, 8, 4], 16) == [16, 16, 7]
    assert pilot_sizes([16, 16], 16) == [16, 16]
    assert pilot_sizes([], 16) == []
    engine, search = _search(sizes=(8, 1, 2, 8, 4))
    search.begin(0.0)
    search._supply(0.0)
    assert sorted(job.size for job in search.queued) == [7, 8, 8]        # bins of 8 nodes
    fixed_engine, fixed = _search(replace(SMALL, pilot_sizing="fixed"), sizes=(8, 1, 2, 8, 4))
    fixed.begin(0.0)
    fixed._supply(0.0)
    assert [job.size for job in fixed.queued] == [8] * 3               # ceil(23 / 8)


def test_a_queued_pilot_of_the_wrong_size_is_withdrawn_and_the_right_one_queued():
    engine, search = _search(sizes=(4, 2))
    search.begin(0.0)
    search._supply(0.0)
    assert [job.size for job in search.queued] == [6]
    search.ready = search.ready[:1]                                    # the 2-node trial went
    search._supply(1.0)
    assert [job.size for job in search.queued] == [4] and search.withdrawn == 1
    assert [job.size for job in engine.pending] == [4]


def test_engine_shrink_frees_nodes_and_the_job_keeps_the_rest():
    engine = Engine(SMALL)
    job = Job("pilot", 4, 0.0, 1000.0)
    job.nodes, job.start = [0, 1, 2, 3], 0.0
    job.per_leaf = engine.cluster.allocate(job.nodes)
    engine._busy_nodes += 4
    engine.shrink(job, [1, 3])
    assert job.nodes == [0, 2] and job.size == 2 and job.per_leaf == {0: 2}
    assert engine.cluster.free[1] and engine.cluster.free[3] and not engine.cluster.free[0]
    assert engine.cluster.free_in_leaf[0] == 14 and engine._busy_nodes == 2
    engine.end(5.0, job)
    assert engine.cluster.free_in_leaf[0] == 16 and engine._busy_nodes == 0


def test_a_pilot_gives_back_nodes_idle_for_its_hold_time_and_exits_with_none_left():
    engine, search = _search()
    pilot = _start_pilot(engine, search, list(range(0, 4)))
    pilot.free, pilot.running = [2, 3], 1                              # a trial on 0 and 1
    for n in (0, 1):
        del pilot.free_since[n]
    search._idle_check(100.0, (pilot, 0.0))
    assert pilot.job.nodes == [0, 1] and pilot.released == [(100.0, 2), (100.0, 3)]
    assert engine.cluster.free[2] and engine.cluster.free[3]
    pilot.free, pilot.running = [0, 1], 0
    pilot.free_since = {0: 150.0, 1: 150.0}
    search._idle_check(200.0, (pilot, 100.0))                         # free since 150: kept
    assert pilot.job.end is None
    search._idle_check(250.0, (pilot, 150.0))
    assert pilot.job.end == 250.0 and search.pilot_records[0].nodes == (0, 1, 2, 3)
    record = search.pilot_records[0]
    assert record.node_seconds == pytest.approx(2 * 100.0 + 2 * 250.0)


def test_the_hold_time_follows_the_queue_waits_of_pilots_that_large():
    engine, search = _search()
    pilot = _start_pilot(engine, search, list(range(0, 8)))
    assert search.queue_waits == [(8, 0.0)]                            # it started at once
    assert search._hold(pilot, 0.0) == 100.0                           # idle_timeout
    search.queue_waits = [(8, 900.0)] + [(8, 400.0), (2, 5000.0), (8, 200.0)] * 2
    assert search._hold(pilot, 0.0) == pytest.approx(300.0)            # last 4 of 8 or more
    queued = Job("pilot", 8, 50.0, 1000.0)
    search.queued.append(queued)
    assert search._hold(pilot, 1050.0) == 1000.0                      # queued 1000 s now
    fixed_engine, fixed = _search(replace(SMALL, pilot_hold="fixed"))
    fixed.queue_waits.append((8, 999.0))
    assert fixed._hold(_start_pilot(fixed_engine, fixed, [0, 1]), 0.0) == 100.0


def test_a_pilot_keeps_an_idle_node_until_the_hold_time_and_checks_again_then():
    engine, search = _search()
    pilot = _start_pilot(engine, search, list(range(0, 2)))
    search.queue_waits = [(2, 500.0)]
    search._idle_check(100.0, (pilot, 0.0))
    assert pilot.job.end is None and pilot.released == []
    assert any(t == pytest.approx(500.0) for t, _, _ in engine._events)


def test_room_is_made_for_a_queued_pilot_from_idle_nodes_on_one_leaf():
    engine, search = _search()
    cluster = engine.cluster
    cluster.allocate(list(range(4, 16)))                               # leaf 0: 0-3 free
    for leaf in (1, 2, 3):                                             # others: 2 free each
        cluster.allocate(list(range(leaf * 16 + 2, leaf * 16 + 16)))
    ours = _start_pilot(engine, search, [0, 1, 2])                     # leaf 0: node 3 free
    ours.free, ours.running = [1, 2], 1                                # a trial on node 0
    del ours.free_since[0]
    search.queued.append(Job("pilot", 3, 0.0, 1000.0, index=9))
    assert cluster.best_fit_leaf(3) is None
    search._make_room(10.0)
    assert ours.job.nodes == [0] and ours.released == [(10.0, 1), (10.0, 2)]
    assert cluster.best_fit_leaf(3) == 0
    search.queued[-1] = Job("pilot", 4, 0.0, 1000.0, index=10)         # needs node 0 too
    ours.free, ours.running, ours.free_since = [0], 0, {0: 5.0}
    search._make_room(11.0)
    assert ours.job.end == 11.0 and cluster.best_fit_leaf(4) == 0      # the pilot exited
    search.queued[-1] = Job("pilot", 5, 0.0, 1000.0, index=11)         # no leaf can get 5
    search._make_room(12.0)
    assert cluster.best_fit_leaf(5) is None


def test_cause_of_each_idle_node():
    class P:
        def __init__(self, idle_nodes, trials, running, limit=1e9):
            self.idle_nodes, self.trials, self.running, self.limit = (
                idle_nodes, trials, running, limit)

    assert cause_of(P(4, 0, 0), 0.0, [(8, 10.0)], False) == "opening"
    assert cause_of(P(4, 3, 0), 0.0, [(8, 10.0)], False) == "draining"
    assert cause_of(P(4, 3, 1), 0.0, [(8, 10.0)], False) == "fragments"
    assert cause_of(P(4, 3, 1, limit=5.0), 0.0, [(2, 10.0)], False) == "time_left"
    assert cause_of(P(4, 3, 1), 0.0, [], False) == "surplus"
    assert cause_of(P(4, 3, 1), 0.0, [], True) == "tail"
    ledger = IdleLedger()
    ledger.advance(10.0, [P(4, 3, 1)], [], False)
    ledger.advance(20.0, [P(4, 3, 1)], [], False)                     # 4 nodes x 10 s
    ledger.advance(20.0, [P(2, 0, 0)], [], False)                     # no time passed
    assert ledger.seconds["surplus"] == 40.0 and sum(ledger.seconds.values()) == 40.0


@pytest.mark.parametrize("fixed", [False, True])
def test_the_idle_ledger_adds_up_to_what_the_pilots_held_and_did_not_run(fixed):
    config = SimConfig(trials=150, seed=4)
    result = simulate("pilot", config.fixed_pilots() if fixed else config)
    idle = dict(result.idle_node_hours)
    assert list(idle) == list(CAUSES)
    held = sum(p.node_seconds for p in result.pilots) / 3600
    ran = sum(r.nodes * (r.end - r.start) for r in result.trials) / 3600
    assert sum(idle.values()) == pytest.approx(held - ran)
    assert simulate("hpsearch", config).idle_node_hours == ()


def test_shrinking_pilots_never_run_trials_on_nodes_they_gave_back():
    config = SimConfig(trials=200, seed=2)
    result = simulate("pilot", config)
    assert any(p.released for p in result.pilots), "some pilots should shrink in this run"
    for p in result.pilots:
        trials = [r for r in result.trials if r.pilot == p.index]
        changes = sorted([(r.start, r.nodes) for r in trials] + [(r.end, -r.nodes) for r in trials]
                         + [(when, 0) for when, _ in p.released])
        in_use = 0
        for t, step in changes:                                        # ends before starts
            in_use += step
            held = len(p.nodes) - sum(1 for when, _ in p.released if when <= t)
            assert in_use <= held
        for when, _ in p.released:
            assert when >= p.start + config.idle_timeout - 1e-6
        kept = len(p.nodes) - len(p.released)
        assert p.node_seconds == pytest.approx(
            sum(when - p.start for when, _ in p.released) + kept * (p.end - p.start))
    fixed = simulate("pilot", config.fixed_pilots())
    assert all(p.released == () and len(p.nodes) == 16 for p in fixed.pilots)


def test_fixed_pilots_are_the_rules_before_issue_42():
    old = SimConfig().fixed_pilots()
    assert (old.max_pilots, old.idle_timeout, old.pilot_fit, old.pilot_sizing,
            old.pilot_shrink, old.pilot_hold, old.pilot_make_room) == (
        10, 300.0, "first", "fixed", False, "fixed", False)
    with pytest.raises(ValueError, match="pilot_fit"):
        SimConfig(pilot_fit="worst")
    with pytest.raises(ValueError, match="pilot_hold"):
        SimConfig(pilot_hold="forever")

"""The placement simulator: its selection rules on a tiny cluster, its cost model, the pilot
policy's promises (never spans, never more than max_pilots, never a trial past its pilot's
end, idle pilots exit), and that a seed fixes its result."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from hpsearch.placement.sim.cluster import (
    Cluster,
    SimConfig,
    effective_bandwidth,
    ring_allreduce_time,
    trial_record,
)
from hpsearch.placement.sim.pilots import pilot_sizes
from hpsearch.placement.sim.simulate import POLICIES, simulate

TINY = SimConfig(nodes=16, leaves=4, oversubscription=4.0)   # 4 leaves of 4 nodes


def _cluster_with_free(free_per_leaf: list[int]) -> Cluster:
    """A tiny cluster whose leaf i has free_per_leaf[i] free nodes (its highest ones taken)."""
    cluster = Cluster(TINY)
    for leaf, free in enumerate(free_per_leaf):
        base = leaf * 4
        taken = list(range(base + free, base + 4))
        if taken:
            cluster.allocate(taken)
    return cluster


def test_same_seed_same_result_and_other_seed_differs():
    config = SimConfig(trials=60, seed=5)
    for policy in POLICIES:
        assert simulate(policy, config) == simulate(policy, config)
    other = SimConfig(trials=60, seed=6)
    for policy in ("hpsearch", "pilot"):
        assert simulate(policy, config).trials != simulate(policy, other).trials
    assert simulate("pilot", config).pilots != simulate("pilot", other).pilots


def test_best_fit_chooses_the_leaf_with_fewest_free_nodes_that_fits():
    cluster = _cluster_with_free([4, 2, 3, 1])
    assert cluster.select("hpsearch", 2, waited=0, max_wait=60) == [4, 5]        # leaf 1, not 0
    assert cluster.select("tree", 3, waited=0, max_wait=60) == [8, 9, 10]       # leaf 2
    assert cluster.select("hpsearch", 1, waited=0, max_wait=60) == [12]         # fullest leaf
    assert cluster.select("hpsearch", 4, waited=0, max_wait=60) == [0, 1, 2, 3]


def test_first_fit_takes_the_lowest_free_nodes_and_spans_leaves():
    cluster = _cluster_with_free([2, 4, 4, 4])
    assert cluster.select("first-fit", 4, waited=0, max_wait=60) == [0, 1, 4, 5]
    assert _cluster_with_free([0, 0, 0, 1]).select("first-fit", 2, 0, 60) is None


def test_hpsearch_waits_up_to_max_wait_then_takes_the_fewest_leaves():
    cluster = _cluster_with_free([1, 3, 2, 1])                      # no leaf holds 4
    assert cluster.select("hpsearch", 4, waited=59, max_wait=60) is None
    nodes = cluster.select("hpsearch", 4, waited=60, max_wait=60)
    assert nodes == [4, 5, 6, 8]                                    # leaf 1 (3 free), then leaf 2
    assert sorted({cluster.leaf_of(n) for n in nodes}) == [1, 2]
    assert cluster.select("tree", 4, waited=59, max_wait=60) is None
    assert cluster.select("hpsearch", 8, waited=600, max_wait=60) is None   # 7 free in all


def test_hpsearch_keeps_trials_in_one_leaf_where_first_fit_spans():
    config = SimConfig(trials=200, seed=3)
    ours, first_fit = simulate("hpsearch", config), simulate("first-fit", config)
    assert ours.spanning_fraction < first_fit.spanning_fraction


def test_step_time_formula_by_hand():
    # 4 nodes, 100 MB (0.8 Gb) at 100 Gb/s, alpha 5 us: 2*3/4 * 0.008 s + 6 * 5 us = 0.012 + 0.00003
    assert ring_allreduce_time(4, 100e6, 100e9, 5e-6) == pytest.approx(0.01203)
    assert ring_allreduce_time(1, 100e6, 100e9, 5e-6) == 0.0
    assert ring_allreduce_time(2, 100e6, 25e9, 0.0) == pytest.approx(0.032)


def test_trial_in_one_leaf_gets_full_bandwidth_and_spanning_with_other_traffic_gets_less():
    config = SimConfig(nodes=64, leaves=4, oversubscription=4.0)   # 16 per leaf, uplink 400 Gb/s
    assert config.uplink_bandwidth == pytest.approx(400e9)
    cluster = Cluster(config)
    inside = cluster.allocate(list(range(0, 8)))                    # leaf 0 only
    assert cluster.uplink_flows == [0, 0, 0, 0]
    assert effective_bandwidth(config, inside, cluster.uplink_flows) == 100e9
    alone = cluster.allocate(list(range(12, 20)))                   # 4 in leaf 0, 4 in leaf 1
    assert effective_bandwidth(config, alone, cluster.uplink_flows) == 100e9   # 400/4 each
    cluster.allocate(list(range(24, 36)))                           # other job: 8 in leaf 1, 4 in 2
    assert cluster.uplink_flows == [4, 12, 4, 0]
    shared = effective_bandwidth(config, alone, cluster.uplink_flows)
    assert shared == pytest.approx(400e9 / 12)
    assert ring_allreduce_time(8, 100e6, shared, 5e-6) > ring_allreduce_time(8, 100e6, 100e9, 5e-6)


def test_release_restores_free_nodes_and_uplinks():
    cluster = Cluster(TINY)
    nodes = [2, 3, 4, 5]
    per_leaf = cluster.allocate(nodes)
    assert per_leaf == {0: 2, 1: 2} and cluster.uplink_flows == [2, 2, 0, 0]
    cluster.release(nodes, per_leaf)
    assert cluster.uplink_flows == [0, 0, 0, 0] and cluster.total_free == 16
    assert cluster.free_in_leaf == [4, 4, 4, 4]


def test_bad_config_and_policy_are_refused():
    with pytest.raises(ValueError, match="multiple of leaves"):
        SimConfig(nodes=10, leaves=4)
    with pytest.raises(ValueError, match="policy must be one of"):
        simulate("random", TINY)


def test_run_time_is_stretched_by_the_all_reduce_lost_to_a_slower_link():
    config = SimConfig(compute_time=0.2)
    # 4 nodes under one leaf: full NIC bandwidth, run time = duration.
    local = trial_record(config, 0, [0, 1, 2, 3], {0: 4}, 10.0, 40.0, 1000.0, 100e9)
    assert local.run_time == 1000.0 and local.wait == 30.0 and local.turnaround == 1030.0
    # The same trial across two leaves at 25 Gb/s: a step's all-reduce takes 3/2 * 0.8 Gb / 25 Gb/s
    # + 6 alpha = 0.04803 s instead of 0.01203 s, on top of 0.2 s of compute.
    spread = trial_record(config, 0, [0, 1, 32, 33], {0: 2, 1: 2}, 10.0, 40.0, 1000.0, 25e9)
    assert spread.run_time == pytest.approx(1000.0 * (0.2 + 0.04803) / (0.2 + 0.01203))
    assert spread.turnaround == pytest.approx(30.0 + spread.run_time) and spread.end == 1040.0
    single = trial_record(config, 0, [5], {0: 1}, 0.0, 0.0, 500.0, 100e9)
    assert single.run_time == 500.0 and single.step_time == 0.0


def test_every_policy_reports_turnaround_and_only_trials_on_a_shared_uplink_run_longer():
    config = SimConfig(trials=120, seed=4)
    for policy in POLICIES:
        result = simulate(policy, config)
        for r in result.trials:
            assert r.turnaround == pytest.approx(r.wait + r.run_time)
            stretched = r.run_time > (r.end - r.start) * (1 + 1e-9)
            assert stretched == (r.bandwidth < config.link_bandwidth)
            assert r.spans or r.bandwidth == config.link_bandwidth
        turnarounds = sorted(r.turnaround for r in result.trials)
        assert result.mean_turnaround == pytest.approx(sum(turnarounds) / len(turnarounds))
        assert result.p95_turnaround == turnarounds[math.ceil(0.95 * len(turnarounds)) - 1]
        if policy != "pilot":
            assert result.busy_fraction == 1.0 and result.pilots == ()


def _pilot_run(**overrides) -> tuple[SimConfig, object]:
    config = SimConfig(**{"trials": 200, "seed": 2, **overrides})
    return config, simulate("pilot", config)


def test_pilots_never_span_leaves_and_their_trials_stay_inside_them():
    config, result = _pilot_run()
    pilots = {p.index: p for p in result.pilots}
    assert len(result.trials) == 200 and result.pilots
    per_leaf = config.nodes_per_leaf
    for p in result.pilots:
        assert 1 <= len(p.nodes) <= config.pilot_nodes
        assert len({n // per_leaf for n in p.nodes}) == 1 and len(p.leaves) == 1
    for r in result.trials:
        pilot = pilots[r.pilot]
        assert r.leaves == pilot.leaves and not r.spans
        assert r.bandwidth == config.link_bandwidth
        assert r.run_time == pytest.approx(r.end - r.start)
    assert result.spanning_fraction == 0.0
    # Late binding never puts more nodes in a pilot than it holds, at any instant.
    for p in result.pilots:
        changes = sorted([(r.start, r.nodes) for r in result.trials if r.pilot == p.index]
                         + [(r.end, -r.nodes) for r in result.trials if r.pilot == p.index])
        in_use = 0
        for _, step in changes:
            in_use += step
            assert in_use <= config.pilot_nodes


def _most_at_once(intervals: list[tuple[float, float]]) -> int:
    edges = sorted([(end, -1) for _, end in intervals] + [(start, 1) for start, _ in intervals])
    alive = most = 0
    for _, step in edges:
        alive += step
        most = max(most, alive)
    return most


@pytest.mark.parametrize("max_pilots", [2, 5])
def test_pilots_never_exceed_max_pilots(max_pilots):
    config, result = _pilot_run(max_pilots=max_pilots)
    most = _most_at_once([(p.start, p.end) for p in result.pilots])
    assert most == max_pilots          # the cap is reached (the search wants more), never passed
    assert len(result.trials) == 200


def test_supply_follows_the_ready_trials():
    config, result = _pilot_run(max_pilots=50)
    first_trials = [r.nodes for r in result.trials if r.index < config.parallel]
    at_start = [p for p in result.pilots if p.submit == config.warmup]
    assert sorted(len(p.nodes) for p in at_start) == sorted(pilot_sizes(first_trials, 16))
    fixed = simulate("pilot", replace(config, pilot_sizing="fixed"))
    wanted = math.ceil(sum(first_trials) / config.pilot_nodes)
    assert len([p for p in fixed.pilots if p.submit == config.warmup]) == wanted < 50


def test_no_trial_starts_that_would_run_past_its_pilots_end():
    config, result = _pilot_run(pilot_time=5 * 3600.0, trials=300)
    pilots = {p.index: p for p in result.pilots}
    for r in result.trials:
        pilot = pilots[r.pilot]
        assert pilot.start <= r.start and r.end <= pilot.limit and r.end <= pilot.end
    at_limit = [p for p in result.pilots if p.end == p.limit]
    assert at_limit, "the time limit should end some pilots in this run"


def test_idle_pilots_exit_after_idle_timeout_and_held_hours_add_up():
    # Without pilot_shrink (the rules before issue 42) a pilot holds all its nodes until it
    # has run no trial for idle_timeout; test_shrinking_pilots... covers the default.
    config, result = _pilot_run(idle_timeout=120.0, pilot_shrink=False, pilot_hold="fixed")
    assert any(p.end < p.limit for p in result.pilots), "some pilots should run out of work"
    for p in result.pilots:
        ends = [r.end for r in result.trials if r.pilot == p.index]
        if p.end < p.limit:
            assert p.end == pytest.approx(max(ends, default=p.start) + 120.0)
        assert p.trials == len(ends)
    held = sum(len(p.nodes) * (p.end - p.start) for p in result.pilots)
    ran = sum(r.nodes * (r.end - r.start) for r in result.trials)
    assert result.node_hours == pytest.approx(held / 3600)
    assert result.busy_fraction == pytest.approx(ran / held) and 0 < result.busy_fraction < 1


@pytest.mark.parametrize("overrides, message", [
    ({"pilot_nodes": 64}, "must fit one leaf"),
    ({"pilot_nodes": 8}, "must hold the largest trial"),
    ({"pilot_time": 3600.0}, "run longer than pilot_time"),
])
def test_pilots_that_cannot_run_the_search_are_refused(overrides, message):
    with pytest.raises(ValueError, match=message):
        simulate("pilot", SimConfig(trials=100, **overrides))

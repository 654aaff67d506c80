"""The placement simulator: its selection rules on a tiny cluster, its cost model, and that a
seed fixes its result."""

from __future__ import annotations

import pytest

from hpsearch.placement.simulate import (
    Cluster, SimConfig, effective_bandwidth, ring_allreduce_time, simulate,
)

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
    for policy in ("first-fit", "tree", "hpsearch"):
        assert simulate(policy, config) == simulate(policy, config)
    other = SimConfig(trials=60, seed=6)
    assert simulate("hpsearch", config).trials != simulate("hpsearch", other).trials


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

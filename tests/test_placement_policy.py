"""The leaf-switch placement rule, on small hand-made clusters."""

from __future__ import annotations

from hpsearch.placement.policy import best_fit_leaf, place, slurm_time
from hpsearch.placement.topology import LeafState


def _states(free: dict[str, list[str]]) -> dict[str, LeafState]:
    return {leaf: LeafState(leaf, tuple(nodes), (), (), (), ()) for leaf, nodes in free.items()}


CLUSTER = _states({"leaf1": ["n1"], "leaf2": ["n3", "n4"], "leaf3": ["n5", "n6", "n7", "n8"],
                   "leaf4": []})


def test_best_fit_takes_the_tightest_leaf_that_holds_the_trial():
    assert best_fit_leaf(CLUSTER, 2) == "leaf2"   # not leaf3: keep its 4 for a 4-node trial
    assert best_fit_leaf(CLUSTER, 3) == "leaf3"
    assert best_fit_leaf(CLUSTER, 1) == "leaf1"   # single nodes pack into the fullest leaf
    assert best_fit_leaf(CLUSTER, 5) is None


def test_a_trial_that_fits_one_leaf_is_pinned_to_its_nodes():
    p = place(2, CLUSTER)
    assert p.options == ("--nodelist=n[3-4]",) and p.leaves == ("leaf2",) and not p.wait


def test_no_leaf_fits_waits_until_max_wait_then_takes_fewest_leaves():
    assert place(5, CLUSTER, waited=10, max_wait=60).wait
    p = place(5, CLUSTER, waited=60, max_wait=60)
    assert p.leaves == ("leaf3", "leaf2")  # 4 + 1: two leaves, not three
    assert p.options == ("--nodelist=n[3,5-8]",)


def test_more_nodes_than_free_anywhere_leaves_it_to_slurm():
    assert place(9, CLUSTER, waited=100, max_wait=60).options == ()


def test_tree_plugin_lets_slurm_wait_for_one_switch():
    assert place(4, CLUSTER, tree_plugin=True, max_wait=900).options == (
        "--switches=1@00:15:00",)
    assert slurm_time(90061.2) == "1-01:01:02"


def test_policy_any_adds_nothing():
    assert place(2, CLUSTER, policy="any").options == ()

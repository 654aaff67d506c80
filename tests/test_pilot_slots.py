"""A pilot's slots shared by trials of several sizes, as Slurm's backfill shares a cluster:
a large trial that does not fit is promised the slots that free first; smaller trials use
them only if they end before the promise starts, so a stream of small trials never starves
the large one (issue 25, item 1). Pure bookkeeping, on a fake clock."""

from __future__ import annotations

import math

import pytest

from hpsearch.pilot import slots as slots_module
from hpsearch.pilot.slots import Slots


@pytest.fixture
def clock(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(slots_module.time, "monotonic", lambda: now[0])
    return now


def test_a_stream_of_small_trials_does_not_starve_a_large_one(clock):
    """Durations unknown: the promised nodes, once freed, are kept for the 4-node trial
    while 1-node trials keep arriving; without the promise one of them would take each
    freed node and the 4-node trial would never start."""
    slots = Slots(["n1", "n2", "n3", "n4"], 1)
    small = {node: slots.take(1) for node in ("n1", "n2", "n3", "n4")}
    assert [g.nodes for g in small.values()] == [("n1",), ("n2",), ("n3",), ("n4",)]
    big = slots.reservation(4)
    assert big.pairs == {("n1", 0), ("n2", 0), ("n3", 0), ("n4", 0)} and big.start == math.inf
    for node in ("n1", "n2", "n3"):
        slots.give_back(small[node])
        assert slots.take(1, avoid=slots.reservation(4)) is None  # a new small trial waits
        assert slots.take(4) is None  # n4 still runs
    slots.give_back(small["n4"])
    grant = slots.take(4)  # the trial it was kept for
    assert grant.nodes == ("n1", "n2", "n3", "n4")
    # with no promise, a small trial would have taken the first freed node
    plain = Slots(["n1", "n2"], 1)
    held = plain.take(1), plain.take(1)
    plain.give_back(held[0])
    assert plain.take(1).nodes == ("n1",)


def test_a_small_trial_backfills_promised_slots_only_if_it_ends_before_the_promise(clock):
    slots = Slots(["n1", "n2", "n3", "n4"], 1)
    first = slots.take(1, seconds=10)       # n1 until t+10
    for _ in range(3):
        slots.take(1, seconds=60)           # n2..n4 until t+60
    clock[0] += 10
    slots.give_back(first)
    promise = slots.reservation(4)
    assert promise.start == pytest.approx(1060.0)
    assert slots.take(1, seconds=100, avoid=promise) is None   # would delay the 4-node trial
    assert slots.take(1, avoid=promise) is None                # its length unknown: no
    grant = slots.take(1, seconds=30, avoid=promise)           # done at t+40 < t+60: backfills
    assert grant.nodes == ("n1",)


def test_the_promise_goes_to_the_slots_that_free_first_under_one_leaf(clock):
    leaves = {"n1": "a", "n2": "a", "n3": "b", "n4": "b"}
    slots = Slots(list(leaves), 1, leaf_of=leaves)
    ends = {"n1": 50, "n2": 40, "n3": 10, "n4": 30}
    for node, seconds in ends.items():
        grant = slots.take(1, seconds=seconds)
        assert grant.nodes == (node,)
    promise = slots.reservation(2)
    assert promise.pairs == {("n3", 0), ("n4", 0)} and promise.start == pytest.approx(1030.0)
    # a 2-node trial spanning leaves would start sooner (n3 + n2 at t+40 is later; n3 + n4
    # under leaf b at t+30 is both sooner and one leaf)
    assert slots.reservation(5) is None  # more nodes than the pilot has: never promised


def test_gpu_slots_promise_one_slot_index_with_its_gpus(clock):
    """2 GPU slots a node: the 2-node trial is promised the slot index that already has a
    free node (slot 1: n2's), so the first trial to end there completes the promise."""
    slots = Slots(["n1", "n2"], 2, gpus_per_slot=1, gpu_ids=["0", "1"])
    a, b, c = slots.take(1), slots.take(1), slots.take(1)
    assert [(g.nodes, g.slot) for g in (a, b, c)] == [(("n1",), 0), (("n2",), 0), (("n1",), 1)]
    promise = slots.reservation(2)
    assert promise.pairs == {("n1", 1), ("n2", 1)}
    assert slots.take(1, avoid=promise) is None     # (n2, 1) is free but promised
    slots.give_back(c)
    grant = slots.take(2)  # the promised slot index, now whole
    assert (grant.nodes, grant.slot, grant.gpus) == (("n1", "n2"), 1, ("1",))
    assert slots.take(1) is None                    # a and b still hold slot 0


def test_a_wider_trial_takes_adjacent_slots_with_all_their_gpus_and_is_promised_them(clock):
    """Slots of 1 GPU (the smallest trial's share); a 2-GPU trial takes 2 adjacent slot
    indices on each of its nodes, the same on every node, and their 2 GPUs; no GPU is held
    twice. When no 2 adjacent slots are free it is promised the pair that frees first."""
    slots = Slots(["n1", "n2"], 4, gpus_per_slot=1, gpu_ids=["0", "1", "2", "3"])
    one = slots.take(1, seconds=10)
    assert (one.nodes, one.gpus) == (("n1",), ("0",))
    two = slots.take(2, seconds=50, width=2)  # n1's slot 0 is held: slots 1-2 on both
    assert (two.nodes, tuple(two.indices), two.gpus) == (("n1", "n2"), (1, 2), ("1", "2"))
    held = [pair for grant in (one, two) for pair in grant.pairs()]
    assert len(held) == len(set(held)) == 5
    rest = [slots.take(1, seconds=60) for _ in range(3)]
    assert [(g.nodes, g.gpus) for g in rest] == [(("n2",), ("0",)), (("n1",), ("3",)),
                                                 (("n2",), ("3",))]
    assert slots.take(1, width=2) is None and slots.take(1, width=3) is None
    promise = slots.reservation(1, width=2)  # n1's slots 0-1 free at t+50, before n2's
    assert promise.pairs == {("n1", 0), ("n1", 1)} and promise.start == clock[0] + 50
    slots.give_back(one)
    assert slots.take(1, seconds=60, avoid=promise) is None  # it would end after t+50
    assert slots.take(1, seconds=20, avoid=promise).gpus == ("0",)  # it ends first
    assert slots.free_for(1) == 0

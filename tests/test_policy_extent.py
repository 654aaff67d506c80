"""hpsearch.driver.extent, alone: how far a search goes (its total of trials, grown or cut by
`resume --trials`), the points it asks first (`search.enqueue`, `hpsearch enqueue`) and its
time budget (`search.timeout`), on a real store (tests/policy_setup.py wires it as the
driver does). Requests arrive as the CLI writes them (hpsearch.driver.requests).
tests/test_grow.py and tests/test_enqueue*.py run whole searches this way."""

from __future__ import annotations

import time

import pytest

from hpsearch.driver import requests
from hpsearch.driver.extent import ENQUEUED
from tests.policy_setup import experiment

RANDOM = """
name: grow
command: "echo {{x}} {{y}}"
search:
  strategy: random
  trials: 3
  seed: 1
  space:
    x: {{low: 0.0, high: 1.0}}
    y: {{choices: [a, b]}}
{extra}
objective: {{metric: loss}}
executor: {{type: local}}
"""
GRID = """
name: grid
command: "echo {x}"
search:
  strategy: grid
  trials: 2
  space:
    x: {choices: [0, 1, 2, 3]}
objective: {metric: loss}
executor: {type: local}
"""


@pytest.fixture
def make(tmp_path):
    made = []

    def make(text: str):
        made.append(experiment(tmp_path, text))
        return made[-1]

    yield make
    for e in made:
        e.close()


def _new(e) -> int | None:
    """The driver's next trial (Driver._new): an enqueued point first, then a sampled one
    while the budget lasts; None when the search asks no more."""
    extent = e.policies.extent
    point = extent.next_point()
    if point is None and extent.out_of_time():
        return None
    if point is None:
        if e.search.asked >= e.search.total:
            return None
        return e.trial()
    tid = e.trial(point.params, {ENQUEUED: point.id})
    extent.asked(point)
    return tid


def _request(e, kind: str, data: dict) -> requests.Request:
    """What `resume --trials`, `hpsearch enqueue`, `hpsearch finish` leave for the driver."""
    return requests.write(e.spec.experiment_dir, kind, data)


def _events(e, kind: str) -> list[str]:
    return [ev["message"] for ev in e.store.events(limit=None) if ev["kind"] == kind]


def test_the_search_asks_its_trials_total_then_no_more(make):
    e = make(RANDOM.format(extra=""))
    assert [_new(e) for _ in range(4)] == [0, 1, 2, None]


def test_resume_trials_raises_the_total_and_the_store_keeps_it_for_the_next_driver(make):
    e = make(RANDOM.format(extra=""))
    [_new(e) for _ in range(3)]
    request = _request(e, "trials", {"total": 5})
    e.policies.extent.take()
    assert e.search.total == 5
    assert not request.path.exists()  # applied once
    assert e.store.experiment().trials_requested == 5
    assert _events(e, "extended") == ["resume --trials 5: 3 -> 5 trials in all"]
    assert "resume --trials 5: 5 trials in all" in e.events
    assert [_new(e) for _ in range(3)] == [3, 4, None]
    e.restart()  # a driver started later goes on with the stored total
    assert e.search.total == 5


def test_resume_trials_may_lower_the_total_but_not_below_the_trials_asked(make):
    e = make(RANDOM.format(extra=""))
    _new(e)
    _new(e)
    _request(e, "trials", {"total": 1})
    e.policies.extent.take()
    assert e.search.total == 3
    assert _events(e, "warning") == ["resume --trials 1 refused: expected at least the 2 "
                                     "trials already asked, at most 1000000000"]
    _request(e, "trials", {"total": 2})
    e.policies.extent.take()
    assert e.search.total == 2
    assert _new(e) is None


def test_a_grid_cannot_grow_past_its_points(make):
    e = make(GRID)
    assert e.search.total == 2
    _request(e, "trials", {"total": 10})
    e.policies.extent.take()
    assert e.search.total == 4
    assert "resume --trials 10: the grid has only 4 points; running them all: 4 trials in " \
           "all" in e.events


def test_spec_enqueued_points_are_asked_first_in_order_then_sampled_ones(make):
    e = make(RANDOM.format(extra="  enqueue: [{x: 0.25, y: b}, {x: 0.75}]"))
    first, second, third = (_new(e) for _ in range(3))
    params = {t.id: t.params for t in e.store.trials()}
    assert params[first] == {"x": 0.25, "y": "b"}
    assert params[second]["x"] == 0.75  # y, left out, is sampled
    assert params[third]["x"] not in (0.25, 0.75)
    assert e.store.trial(first).sampler_attrs[ENQUEUED] == "spec:0"


def test_an_enqueued_point_beyond_the_total_raises_it_by_one(make):
    e = make(RANDOM.format(extra=""))
    [_new(e) for _ in range(3)]
    request = _request(e, "enqueue", {"params": {"x": 0.5, "y": "a"}})
    e.policies.extent.take()
    assert "enqueued: {'x': 0.5, 'y': 'a'}" in e.events
    assert request.path.exists()  # until its trial is stored
    tid = _new(e)
    assert e.search.total == 4
    assert e.store.trial(tid).params == {"x": 0.5, "y": "a"}
    assert not request.path.exists()
    assert _events(e, "extended") == ["an enqueued point beyond the total: 3 -> 4 trials in all"]
    assert _new(e) is None


def test_a_point_asked_before_the_driver_died_is_not_asked_again(make):
    """The trial was stored (its point's id in its sampler attrs) but the driver was killed
    before it removed the request file."""
    e = make(RANDOM.format(extra=""))
    request = _request(e, "enqueue", {"params": {"x": 0.5, "y": "a"}})
    e.policies.extent.take()
    point = e.policies.extent.next_point()
    e.trial(point.params, {ENQUEUED: point.id})  # stored; extent.asked(point) never ran
    assert request.path.exists()
    e.restart()
    assert not request.path.exists()
    assert e.policies.extent.next_point() is None
    assert sum(t.params == {"x": 0.5, "y": "a"} for t in e.store.trials()) == 1


@pytest.mark.parametrize("params, why", [
    ({"x": 7.0, "y": "a"}, "expected a number in [0.0, 1.0]; got 7.0"),
    ({"x": 0.5, "z": 1}, "unknown parameter 'z'; expected one of: x, y"),
    ("x=0.5", "expected a mapping of parameters"),
])
def test_a_bad_enqueued_point_is_refused_with_a_warning_and_not_asked(make, params, why):
    e = make(RANDOM.format(extra=""))
    request = _request(e, "enqueue", {"params": params})
    e.policies.extent.take()
    assert _events(e, "warning") == [f"enqueued point {params!r} refused: {why}"]
    assert not request.path.exists()
    assert e.policies.extent.next_point() is None


def test_a_grid_refuses_enqueued_points(make):
    e = make(GRID)
    _request(e, "enqueue", {"params": {"x": 1}})
    e.policies.extent.take()
    assert _events(e, "warning") == ["enqueued point {'x': 1} refused: a grid runs its own "
                                     "points"]


def test_a_finish_request_is_refused_where_no_trial_is_paused(make):
    e = make(RANDOM.format(extra=""))
    request = _request(e, "finish", {"trials": [0]})
    e.policies.extent.take()
    assert _events(e, "warning") == [
        f"finish request {request.path.name} refused: this search pauses no trials "
        "(search.pruner.mode is not promotion)"]
    assert not request.path.exists()


def test_past_its_timeout_the_search_asks_no_new_sampled_trial_but_enqueued_ones_run(make):
    e = make(RANDOM.format(extra="  timeout: 60\n  trials: 100").replace("  trials: 3\n", ""))
    assert not e.policies.extent.out_of_time()
    assert _new(e) == 0
    # the budget runs from the experiment's creation: make that 61 s ago, as a driver
    # resumed a minute later finds it
    e.store.db.conn.execute("update experiment set created = ?", (time.time() - 61,))
    e.restart()
    _request(e, "enqueue", {"params": {"x": 0.5, "y": "a"}})
    e.policies.extent.take()
    assert _new(e) == 1  # the enqueued point still runs
    assert _new(e) is None
    assert e.policies.extent.timed_out
    assert _events(e, "timeout") == ["search.timeout (60 s) reached after 2 trials: no new "
                                     "trial is asked"]
    assert _new(e) is None  # said once
    assert len(_events(e, "timeout")) == 1


def test_without_a_timeout_the_search_is_never_out_of_time(make):
    e = make(RANDOM.format(extra=""))
    assert not e.policies.extent.out_of_time()
    assert not e.policies.extent.timed_out

"""hpsearch.driver.failfast, alone: when `search.max_failures` stops a search whose trials
keep failing, and the message that says why and how to go on, on a real store
(tests/policy_setup.py wires it as the driver does). tests/test_fail_fast.py runs whole
searches that stop this way."""

from __future__ import annotations

import pytest

from hpsearch.store import rows
from tests.policy_setup import experiment

SPEC = """
name: broken
command: "echo {{x}}"
search:
  strategy: grid
  space:
    x: {{choices: [{points}]}}
{max_failures}
objective: {{metric: loss}}
executor: {{type: local}}
"""
TORCHX = "exit code 1\nTraceback (most recent call last):\nModuleNotFoundError: No module " \
         "named 'torchx'"
RESUME = (". Fix the cause and continue with: hpsearch resume broken (add --spec FILE if the "
          "fix is in the spec)")


@pytest.fixture
def make(tmp_path):
    made = []

    def make(max_failures: str = ""):
        text = SPEC.format(points=", ".join(map(str, range(40))),
                           max_failures=f"  max_failures: {max_failures}" if max_failures
                           else "")
        made.append(experiment(tmp_path, text))
        return made[-1]

    yield make
    for e in made:
        e.close()


def _fail(e, error: str = TORCHX) -> str | None:
    """A trial runs and fails for good (its retries spent); the driver asks fail-fast."""
    tid = e.trial()
    e.store.finish_attempt(tid, 1, rows.FAILED, 1, error, failure="exit")
    return e.policies.failfast.after_failure(e.store, tid)


def _complete(e) -> None:
    tid = e.trial()
    e.store.finish_attempt(tid, 1, rows.COMPLETED, 0, None, values=[0.5])


def test_by_default_the_fifth_failure_with_none_completed_stops_the_search(make):
    e = make()
    assert [_fail(e) for _ in range(4)] == [None] * 4
    why = _fail(e)
    assert why == ("search stopped: 5 trials failed and none completed since the driver "
                   "started (search.max_failures.first: 5); most common cause (5 of 5): exit "
                   "code 1: ModuleNotFoundError: No module named 'torchx'" + RESUME)
    assert e.store.events(limit=1)[-1]["kind"] == "max_failures"
    assert e.store.events(limit=1)[-1]["message"] == why


def test_one_completed_trial_since_the_driver_started_keeps_it_going(make):
    e = make()
    _complete(e)
    assert [_fail(e) for _ in range(10)] == [None] * 10  # the command can run: not its fault


def test_failures_before_a_resume_do_not_count_against_the_resumed_driver(make):
    e = make("{first: 3}")
    assert [_fail(e) for _ in range(3)][-1] is not None  # stopped; the user fixes, resumes
    e.restart()
    assert [_fail(e) for _ in range(2)] == [None, None]
    assert _fail(e).startswith("search stopped: 3 trials failed and none completed since "
                               "the driver started (search.max_failures.first: 3)")


def test_a_fraction_stops_once_more_than_that_share_of_finished_trials_failed(make):
    e = make("{first: 0, fraction: 0.5}")
    _complete(e)
    _complete(e)
    assert [_fail(e) for _ in range(2)] == [None, None]  # 4 finished: too few to judge
    why = _fail(e)  # 3 of 5
    assert why is not None and why.startswith(
        "search stopped: 3 of 5 finished trials failed, more than "
        "search.max_failures.fraction 0.5; most common cause (3 of 3)")


def test_a_fraction_does_not_stop_a_search_at_exactly_that_share(make):
    e = make("{first: 0, fraction: 0.5}")
    for _ in range(3):
        _complete(e)
    assert [_fail(e) for _ in range(3)] == [None] * 3  # 3 of 6 is not more than half


def test_max_failures_false_never_stops_the_search(make):
    e = make("false")
    assert [_fail(e) for _ in range(30)] == [None] * 30


def test_the_message_names_the_most_common_cause_whatever_slurm_job_it_came_from(make):
    e = make("{first: 5}")
    for job in (101, 102, 103):
        assert _fail(e, f"exit code 1 (Slurm job {job} FAILED on node{job % 2})\n"
                        "RuntimeError: CUDA error: out of memory") is None
    _fail(e, TORCHX)
    why = _fail(e, TORCHX)
    assert "most common cause (3 of 5): exit code 1: RuntimeError: CUDA error: out of " \
           "memory" in why, why


def test_trials_whose_command_could_not_start_count_at_their_first_attempt(make):
    """A typo in the command: each trial's retry is left queued, and the search stops after
    `first` launches, not (retries + 1) x `first` (issue 38)."""
    e = make("{first: 3}")
    not_found = "exit code 127: trian.py: not found"
    for _ in range(2):
        tid = e.trial()
        e.store.finish_attempt(tid, 1, rows.FAILED, 127, not_found, requeue=True,
                               failure="launch_error")
        assert e.policies.failfast.after_failure(e.store, tid, launch_error=not_found) is None
    tid = e.trial()
    e.store.finish_attempt(tid, 1, rows.FAILED, 127, not_found, requeue=True,
                           failure="launch_error")
    why = e.policies.failfast.after_failure(e.store, tid, launch_error=not_found)
    assert why == ("search stopped: 3 trials failed (3 could not start; their retries are "
                   "left queued) and none completed since the driver started "
                   "(search.max_failures.first: 3); most common cause (3 of 3): exit code "
                   "127: trian.py: not found" + RESUME)
    assert e.store.state_counts() == {rows.QUEUED: 3}  # nothing failed for good


def test_a_trial_that_could_not_start_and_then_failed_for_good_counts_once(make):
    e = make("{first: 2}")
    tid = e.trial()
    e.store.finish_attempt(tid, 1, rows.FAILED, 127, "exit code 127", requeue=True,
                           failure="launch_error")
    assert e.policies.failfast.after_failure(e.store, tid, launch_error="exit code 127") is None
    e.store.finish_attempt(tid, 1, rows.FAILED, 127, "exit code 127", failure="launch_error")
    assert e.policies.failfast.after_failure(e.store, tid) is None  # still 1 failure, not 2
    assert _fail(e) is not None

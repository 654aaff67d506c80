"""hpsearch.driver.attempts, alone: how many attempts a trial gets, what each retry changes,
and what a Slurm requeue does, on a real store (tests/policy_setup.py wires it as the
driver does). The searches that run these rules end to end are tests/test_retry_rules.py
and tests/test_checkpoints.py."""

from __future__ import annotations

import pytest

from hpsearch.driver import retry
from hpsearch.executors.base import Ended, Requeued
from hpsearch.store import rows
from tests.policy_setup import experiment

SPEC = """
name: attempts
command: "echo {{x}}"
search:
  strategy: grid
  space:
    x: {{choices: [0, 1, 2]}}
objective: {{metric: loss}}
resources: {{mem: 1000M}}
executor: {{type: local}}
{retries}
"""


@pytest.fixture
def make(tmp_path):
    made = []

    def make(retries: str = ""):
        made.append(experiment(tmp_path, SPEC.format(retries=retries)))
        return made[-1]

    yield make
    for e in made:
        e.close()


def _end(e, tid: int, attempt: int, reason: str = "exited", exit_code: int | None = 1,
         error: str = "exit code 1\nValueError: x out of range", nodes: str | None = None):
    """Attempt `attempt` of trial `tid` ends as an executor reports it; the driver classifies
    it (retry.classify) and asks the policy. Returns the policy's verdict."""
    ended = Ended(tid, attempt, exit_code, reason, error, nodes)
    return e.policies.attempts.failed(ended, error, retry.classify(ended))


def _run_until_failed(e, tid: int, **end) -> list:
    """Fail every attempt of trial `tid` the same way until the policy gives up: the
    verdicts, one an attempt."""
    verdicts, attempt = [], 1
    while len(verdicts) < 20:  # a policy that never gives up fails the test, not hangs it
        verdicts.append(_end(e, tid, attempt, **end))
        if not verdicts[-1].retry:
            break
        attempt = e.policies.attempts.again(tid, unlaunched=False).attempt
        e.store.mark_running(tid, attempt, "localhost", None, None, None)
    return verdicts


def test_without_retries_a_trial_whose_command_fails_gets_one_attempt(make):
    e = make()
    tid = e.trial()
    verdicts = _run_until_failed(e, tid)
    assert [v.retry for v in verdicts] == [False]
    assert verdicts[0].message == ("trial 0 failed: exit code 1: ValueError: x out of range "
                                   "(exit; no retry left for exit (0 allowed))")
    trial = e.store.trial(tid)
    assert (trial.state, trial.attempt, trial.exit_code) == (rows.FAILED, 1, 1)


def test_retries_max_2_gives_a_failing_trial_3_attempts_then_it_fails(make):
    e = make("retries: {max: 2}")
    tid = e.trial()
    verdicts = _run_until_failed(e, tid)
    assert [v.message for v in verdicts] == [
        "trial 0 exit (exit code 1: ValueError: x out of range); retry 1 of 2 for exit",
        "trial 0 exit (exit code 1: ValueError: x out of range); retry 2 of 2 for exit",
        "trial 0 failed: exit code 1: ValueError: x out of range (exit; no retry left for "
        "exit (2 allowed))"]
    assert [(a["attempt"], a["state"], a["failure"]) for a in e.store.attempts(tid)] == [
        (1, rows.FAILED, "exit"), (2, rows.FAILED, "exit"), (3, rows.FAILED, "exit")]
    assert e.store.trial(tid).state == rows.FAILED


def test_a_retried_trial_waits_queued_and_its_next_attempt_is_stored_before_launch(make):
    e = make("retries: 1")
    tid = e.trial()
    assert _end(e, tid, 1).retry
    assert e.store.trial(tid).state == rows.QUEUED  # the driver's queue takes it
    launch = e.policies.attempts.again(tid, unlaunched=False)
    assert (launch.trial_id, launch.attempt, launch.env["HPSEARCH_ATTEMPT"]) == (tid, 2, "2")
    stored = e.store.attempts(tid)[-1]
    assert (stored["attempt"], stored["state"], stored["reason"]) == (2, rows.SUBMITTING,
                                                                      "retry after exit")


def test_an_exit_code_rule_wins_over_the_trials_own_max(make):
    e = make("retries: {max: 3, exit_3: {max: 0}}")
    tid = e.trial()
    verdicts = _run_until_failed(e, tid, exit_code=3, error="exit code 3")
    assert [v.retry for v in verdicts] == [False]
    assert "no retry left for exit_3 (0 allowed)" in verdicts[0].message


def test_out_of_memory_is_retried_twice_by_default_with_half_as_much_memory_again(make):
    e = make()  # no `retries`: infrastructure failures still get the default rules
    tid = e.trial()
    oom = {"reason": "out_of_memory", "exit_code": None, "error": "out of memory"}
    assert _end(e, tid, 1, **oom).retry
    second = e.policies.attempts.again(tid, unlaunched=False)
    assert second.sbatch_extra == ("--mem=1500M",)  # resources.mem 1000M x 1.5
    assert _end(e, tid, 2, **oom).retry
    third = e.policies.attempts.again(tid, unlaunched=False)
    assert third.sbatch_extra == ("--mem=2250M",)  # x 1.5 again
    assert e.store.attempts(tid)[-1]["overrides"] == "memory x2.25: 2250M"
    assert not _end(e, tid, 3, **oom).retry


def test_a_timeout_gets_one_retry_with_twice_the_time(make):
    e = make()
    tid = e.trial()
    verdicts = _run_until_failed(e, tid, reason="timeout", exit_code=None, error="timed out")
    assert [v.retry for v in verdicts] == [True, False]
    assert e.store.attempts(tid)[1]["overrides"] == "time limit x2"


def test_timeouts_that_each_saved_a_newer_checkpoint_do_not_use_up_the_retry(make):
    """A long training runs through as many time limits as it needs while it progresses;
    the one timeout that saved nothing new is the one that counts."""
    e = make()
    tid = e.trial()
    timeout = {"reason": "timeout", "exit_code": None, "error": "timed out"}
    tdir = e.spec.experiment_dir / "trials" / "00000"
    for attempt, step in ((1, 10), (2, 20), (3, 30)):
        e.store.add_checkpoints(tid, attempt, [{"step": step, "path": str(tdir / f"s{step}"),
                                                "bytes": 1, "time": float(step)}])
        verdict = _end(e, tid, attempt, **timeout)
        assert verdict.retry, verdict.message
        assert e.policies.attempts.again(tid, unlaunched=False).attempt == attempt + 1
    # attempt 4 saved nothing past step 30: counted, the 1 retry timeout allows
    assert _end(e, tid, 4, **timeout).retry
    e.policies.attempts.again(tid, unlaunched=False)
    assert not _end(e, tid, 5, **timeout).retry


def test_a_node_failure_keeps_the_next_attempts_off_the_nodes_that_failed(make):
    e = make()
    tid = e.trial()
    e.store.update_placement(tid, 1, "RUNNING", None, "node[1-2]")  # as sacct/squeue told it
    assert _end(e, tid, 1, reason="node_fail", exit_code=None, error="node died",
                nodes="node[1-2]").retry
    assert e.policies.attempts.again(tid, unlaunched=False).sbatch_extra == (
        "--exclude=node[1-2]",)


def test_a_retry_keeps_the_earlier_attempts_output_beside_the_new(make):
    e = make("retries: 1")
    tid = e.trial()
    tdir = e.spec.experiment_dir / "trials" / "00000"
    (tdir / "stdout.log").write_text("attempt 1 said this\n")
    (tdir / "exit_code").write_text("1 1\n")
    _end(e, tid, 1)
    e.policies.attempts.again(tid, unlaunched=False)
    assert (tdir / "stdout.attempt1.log").read_text() == "attempt 1 said this\n"
    assert not (tdir / "stdout.log").exists()
    assert not (tdir / "exit_code").exists()  # attempt 1's exit must not pass for attempt 2's


def test_an_attempt_stored_but_never_launched_is_launched_again_as_itself(make):
    """A driver stopped while a trial waited for a slot (Store.withdraw): the next driver
    launches that same attempt, not a retry."""
    e = make()
    asked = e.search.ask()
    tdir = e.spec.experiment_dir / "trials" / "00000"
    e.store.insert_trial(asked.trial_id, asked.params, str(tdir), {})
    e.store.withdraw([asked.trial_id])
    row = e.store.trial(asked.trial_id)
    assert e.policies.attempts.withdrawn(row)
    launch = e.policies.attempts.again(asked.trial_id, unlaunched=True)
    assert launch.attempt == 1
    assert e.store.attempts(asked.trial_id)[0]["reason"] == (
        "launched again: the driver stopped before it was")
    e.store.mark_running(asked.trial_id, 1, "localhost", None, None, None)
    assert not e.policies.attempts.withdrawn(e.store.trial(asked.trial_id))


def test_a_slurm_requeue_is_the_next_attempt_in_the_same_job(make):
    e = make()
    tid = e.trial()
    ingested = []
    verdict = e.policies.attempts.requeued(
        Requeued(tid, 1, "4242", "preempted", "preempted by a higher priority job", "node3"),
        lambda: ingested.append(tid))
    assert ingested == [tid]  # the ended attempt's files, read in the same commit
    assert verdict.retry
    assert verdict.message.endswith("retry 1 of 10 for preempted: attempt 2 runs in the same job")
    trial = e.store.trial(tid)
    assert (trial.state, trial.attempt, trial.job_id) == (rows.RUNNING, 2, "4242")
    assert [(a["attempt"], a["failure"], a["nodes"]) for a in e.store.attempts(tid)] == [
        (1, "preempted", "node3"), (2, None, None)]


def test_a_requeue_with_no_retry_left_fails_the_trial_and_says_the_job_is_cancelled(make):
    e = make("retries: {preempted: {max: 0}}")
    tid = e.trial()
    verdict = e.policies.attempts.requeued(
        Requeued(tid, 1, "4242", "requeued", "scontrol requeue"), lambda: None)
    assert not verdict.retry
    assert verdict.message == ("trial 0 failed: scontrol requeue (preempted; no retry left "
                               "for preempted (0 allowed)); job 4242 cancelled")
    assert e.store.trial(tid).state == rows.FAILED

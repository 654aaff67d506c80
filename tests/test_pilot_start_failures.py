"""The back-off and stop for pilots that fail at start (hpsearch.pilot.start_failures), with
a clock of the test's own: no cluster. On the emulated cluster:
tests/slurm/test_pilot_start_failures.py."""

from __future__ import annotations

from pathlib import Path

from hpsearch.pilot.start_failures import LIMIT, StartFailure, StartFailures, output_tail


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _failure(pilot_id: int, output: Path | None = None) -> StartFailure:
    return StartFailure(pilot_id, str(1000 + pilot_id), f"Slurm job {1000 + pilot_id} FAILED",
                        "0:53", None, output)


def test_start_failures_in_a_row_back_off_1_2_4_8_then_give_up_at_the_limit():
    clock = Clock()
    starts = StartFailures(clock=clock)
    assert LIMIT == 5 and starts.may_submit()
    waits = []
    for pilot_id in range(1, LIMIT):
        waits.append(starts.failed(_failure(pilot_id)))
        assert not starts.may_submit() and not starts.gave_up
        clock.now += waits[-1] - 0.01
        assert not starts.may_submit()  # not a moment before its wait is over
        clock.now += 0.01
        assert starts.may_submit()
    assert waits == [1.0, 2.0, 4.0, 8.0]
    starts.failed(_failure(LIMIT))
    clock.now += 3600
    assert starts.gave_up and not starts.may_submit()  # for good


def test_the_wait_is_capped_at_a_minute():
    starts = StartFailures(limit=100, clock=Clock())
    waits = [starts.failed(_failure(n)) for n in range(1, 10)]
    assert waits[-1] == 60.0 and max(waits) == 60.0


def test_a_pilot_that_ran_a_trial_ends_the_run_of_failures():
    clock = Clock()
    starts = StartFailures(clock=clock)
    for pilot_id in range(1, LIMIT):
        starts.failed(_failure(pilot_id))
    starts.ran()
    assert starts.in_a_row == 0 and starts.may_submit()
    assert starts.failed(_failure(9)) == 1.0  # the back-off starts over
    assert not starts.gave_up


def test_the_message_names_the_last_pilots_job_its_end_and_what_to_check(tmp_path):
    starts = StartFailures(limit=2, clock=Clock())
    missing = tmp_path / "submitit" / "1002_0_log.out"
    starts.failed(_failure(1))
    starts.failed(_failure(2, missing))
    message = starts.message("exp", tmp_path / "runs" / "exp")
    assert message.startswith("search stopped: 2 pilots in a row ended without running a "
                              "trial (at most 2); the last, pilot 2 (Slurm job 1002): Slurm "
                              "job 1002 FAILED, exit 0:53; its output ")
    assert f"{missing}: there is none (Slurm could not create it" in message
    assert f"runs dir ({tmp_path / 'runs' / 'exp'}) is reachable" in message
    assert "by the job's user and group" in message
    assert message.endswith("hpsearch resume exp")


def test_the_output_tail_is_its_last_lines_read_safely(tmp_path):
    out = tmp_path / "1_0_log.out"
    out.write_text("".join(f"line {n}\n" for n in range(100))
                   + "ModuleNotFoundError: No module named 'hpsearch'\n")
    assert output_tail(out) == ("line 96 | line 97 | line 98 | line 99 | "
                                "ModuleNotFoundError: No module named 'hpsearch'")
    link = tmp_path / "link.out"
    link.symlink_to(out)
    assert output_tail(link).startswith("not read (a symbolic link")
    (tmp_path / "empty.out").write_text("")
    assert output_tail(tmp_path / "empty.out") == "empty"


def test_after_a_failure_pilots_go_one_at_a_time_once_the_wait_is_over():
    clock = Clock()
    starts = StartFailures(clock=clock)
    assert starts.to_submit(3, unstarted=2) == 3  # no failure yet: what the supply wants
    starts.failed(_failure(1))
    assert starts.to_submit(3, unstarted=0) == 0  # its wait
    clock.now += 1.0
    assert starts.to_submit(3, unstarted=0) == 1  # a probe
    assert starts.to_submit(3, unstarted=1) == 0  # while it is on its way, no other
    assert starts.to_submit(0, unstarted=0) == 0

"""should_stop() after a report waits a moment for the driver's verdict on it, where the
driver sets HPSEARCH_VERDICT_WAIT (a pruner, reports read as written): STOP, or JUDGED
naming this attempt and that step. Without it a rejected trial ran its next step before it
saw STOP (benchmarks/peers.py, ASHA in stop mode). The end-to-end check is in
tests/test_pruning.py (a pruned trial reports no step after the one it was pruned at)."""

from __future__ import annotations

import os
import threading
import time

import pytest

from hpsearch import trial


@pytest.fixture
def attempt_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("HPSEARCH_TRIAL_DIR", str(tmp_path))
    monkeypatch.setenv("HPSEARCH_ATTEMPT", "2")
    monkeypatch.setenv("HPSEARCH_VERDICT_WAIT", "0.6")
    monkeypatch.setattr(trial, "_last_report", None)
    monkeypatch.setattr(trial, "_awaiting", None)
    monkeypatch.setattr(trial, "_stop_signal", None)
    monkeypatch.setattr(trial, "_missed", 0)
    monkeypatch.setattr(trial, "_quiet", (0, 0))
    return tmp_path


def _later(seconds: float, path, text: str) -> threading.Thread:
    def write():
        time.sleep(seconds)
        path.write_text(text)
    thread = threading.Thread(target=write)
    thread.start()
    return thread


def _timed_should_stop() -> tuple[bool, float]:
    began = time.monotonic()
    said = trial.should_stop()
    return said, time.monotonic() - began


def test_a_stop_written_just_after_the_report_is_seen_before_the_next_step(attempt_dir):
    trial.report(3, loss=1.0)
    _later(0.1, attempt_dir / "STOP", "pruned\n")
    said, took = _timed_should_stop()
    assert said and 0.08 <= took < 0.5, took


def test_judged_for_this_attempt_and_step_lets_it_go_on_at_once(attempt_dir):
    trial.report(3, loss=1.0)
    _later(0.1, attempt_dir / "JUDGED", "2 3\n")
    said, took = _timed_should_stop()
    assert not said and 0.08 <= took < 0.5, took
    assert trial.should_stop() is False  # no new report: no wait
    assert _timed_should_stop()[1] < 0.05


def test_judged_for_another_attempt_or_an_earlier_step_is_waited_out(attempt_dir):
    (attempt_dir / "JUDGED").write_text("1 9\n")  # the attempt before
    trial.report(3, loss=1.0)
    said, took = _timed_should_stop()
    assert not said and took >= 0.55, took
    (attempt_dir / "JUDGED").write_text("2 2\n")
    trial.report(4, loss=1.0)  # 0.6 s after the first: waits half of that at most
    said, took = _timed_should_stop()
    assert not said and 0.25 <= took < 0.45, took


def test_after_two_waits_in_vain_it_waits_no_more_until_a_verdict_is_back(attempt_dir):
    """A driver gone (killed, to be resumed) costs its trials two slow steps, not one each
    step."""
    for step in (1, 2):
        trial.report(step, loss=1.0)
        assert _timed_should_stop()[1] >= 0.2
    trial.report(3, loss=1.0)
    assert _timed_should_stop()[1] < 0.05  # no wait: the driver was silent twice
    (attempt_dir / "JUDGED").write_text("2 4\n")  # the driver is back
    trial.report(4, loss=1.0)
    assert _timed_should_stop() == (False, pytest.approx(0, abs=0.05))
    time.sleep(0.5)
    trial.report(5, loss=1.0)  # it waits again (half the 0.5 s since the last report)
    assert _timed_should_stop()[1] >= 0.2


def test_without_the_driver_s_word_there_is_no_wait(attempt_dir, monkeypatch):
    monkeypatch.delenv("HPSEARCH_VERDICT_WAIT")
    trial.report(3, loss=1.0)
    assert _timed_should_stop() == (False, pytest.approx(0, abs=0.05))


def test_a_fifo_or_another_users_judged_is_not_waited_on(attempt_dir):
    """A FIFO planted as JUDGED does not block the trial (opened non-blocking, never read):
    the wait ends at its bound."""
    os.mkfifo(attempt_dir / "JUDGED")
    trial.report(3, loss=1.0)
    said, took = _timed_should_stop()
    assert not said and 0.55 <= took < 1.0, took


def test_no_wait_on_the_steps_below_the_verdict_s_quiet_step(attempt_dir):
    """JUDGED "2 3 9": the pruner (successive halving, its next rung at step 9) cannot stop
    this attempt on steps 4 to 8; the trial waits again at step 9."""
    trial.report(3, loss=1.0)
    _later(0.05, attempt_dir / "JUDGED", "2 3 9\n")
    assert _timed_should_stop()[1] >= 0.04
    for step in range(4, 9):
        time.sleep(0.05)
        trial.report(step, loss=1.0)
        assert _timed_should_stop() == (False, pytest.approx(0, abs=0.02))
    time.sleep(0.1)
    trial.report(9, loss=1.0)
    assert _timed_should_stop()[1] >= 0.04  # half the 0.1 s between reports


def test_a_quiet_step_read_late_still_covers_the_step_waited_on(attempt_dir):
    """A verdict on step 3 that came after the trial's wait for it ran out still says that
    step 5 needs no verdict of its own."""
    trial.report(5, loss=1.0)
    (attempt_dir / "JUDGED").write_text("2 3 9\n")
    assert _timed_should_stop() == (False, pytest.approx(0, abs=0.02))


def test_another_attempt_s_quiet_step_is_not_taken(attempt_dir):
    (attempt_dir / "JUDGED").write_text("1 3 9\n")
    trial.report(4, loss=1.0)
    assert _timed_should_stop()[1] >= 0.55

"""An attempt stopped from outside that exits 0 (a pilot sent SIGTERM by Slurm's preemption,
its trial's shell stopped between two commands: `trap exit TERM` exits with the status of
the last one, 0): its last step report is where it was stopped, not its result. Seen in CI:
a preempted trial at step 3 of 12 was counted completed with step 3's loss
(tests/slurm/test_brokerage_preempt.py, under load)."""

from __future__ import annotations

import json

from hpsearch.driver.live import LiveTrial
from hpsearch.executors.base import Ended
from hpsearch.ingest.trial_files import TrialFiles

STOPPED = "pilot 1 (job 257) was sent SIGTERM by Slurm (scancel, node failure or preemption)"


def _live(tmp_path, result: dict | None = None) -> LiveTrial:
    if result is not None:
        (tmp_path / "result.json").write_text(json.dumps(result))
    return LiveTrial(0, 1, tmp_path, TrialFiles(tmp_path), {"loss": (3, 0.5)})


def _ended(stopped: bool) -> Ended:
    return Ended(0, 1, 0, "exited", STOPPED if stopped else "",
                 stopped_as="preempted" if stopped else None)


def test_a_stopped_exit_0_with_only_step_reports_runs_again_as_preempted(tmp_path):
    values, error, failure = _live(tmp_path).verdict(_ended(stopped=True), ["loss"])
    assert (values, failure) == (None, "preempted")
    assert "stopped before its result" in error and "sent SIGTERM by Slurm" in error


def test_a_stopped_exit_0_with_its_result_written_is_complete(tmp_path):
    """It finished as the stop came: its result stands (nothing run twice)."""
    verdict = _live(tmp_path, {"loss": 0.25}).verdict(_ended(stopped=True), ["loss"])
    assert verdict == ([0.25], None, None)


def test_an_exit_0_nobody_stopped_takes_its_last_report(tmp_path):
    assert _live(tmp_path).verdict(_ended(stopped=False), ["loss"]) == ([0.5], None, None)

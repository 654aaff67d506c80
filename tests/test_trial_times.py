"""A trial that ran in several segments (promotion): export and trials_dataframe give its
first start, its last end, the wall-clock time between them and the time it actually ran
(the sum over its segments), not its last segment's alone."""

from __future__ import annotations

import csv
import datetime as dt
import io

import pytest

import hpsearch
from hpsearch.interop.store_view import AttemptRow
from hpsearch.interop.trial_times import trial_times
from hpsearch.store.rows import FAILED, PAUSED, RUNNING, TrialRow
from tests.promotion_search import attempts, promotion_spec


def test_export_and_dataframe_times_span_every_segment(cli):
    cli("submit", promotion_spec(cli, "times"), check=0)
    exp = hpsearch.load("times", cli.runs)
    by_id = {t.id: t for t in exp.trials}
    segments = attempts(cli.runs, "times")
    multi = [tid for tid, rows in segments.items() if len(rows) >= 3]
    assert multi, segments  # x=0 runs rungs 0, 1 and 2: three segments
    rows = {int(row["trial"]): row for row in
            csv.DictReader(io.StringIO(cli("export", "times", check=0).stdout))}
    df = exp.trials_dataframe().set_index("number")
    for tid in multi:
        runs = segments[tid]
        first, last_end = runs[0]["started"], runs[-1]["finished"]
        ran = sum(a["finished"] - a["started"] for a in runs)
        assert last_end - first > ran  # it waited, paused, between its segments
        row = rows[tid]
        assert dt.datetime.fromisoformat(row["started"]).timestamp() == \
            pytest.approx(first, abs=1e-3)
        assert dt.datetime.fromisoformat(row["finished"]).timestamp() == \
            pytest.approx(last_end, abs=1e-3)
        assert float(row["duration"]) == pytest.approx(last_end - first)
        assert float(row["run_seconds"]) == pytest.approx(ran)
        assert dt.datetime.fromisoformat(row["last_started"]).timestamp() == \
            pytest.approx(runs[-1]["started"], abs=1e-3)
        assert by_id[tid].started == runs[-1]["started"]  # what the trial row holds

        frame = df.loc[tid]
        assert frame.datetime_start.to_pydatetime() == dt.datetime.fromtimestamp(first)
        assert frame.datetime_complete.to_pydatetime() == dt.datetime.fromtimestamp(last_end)
        assert frame.duration.total_seconds() == pytest.approx(last_end - first, abs=1e-5)
        assert frame.user_attrs_hpsearch_run_seconds == pytest.approx(ran)
        assert dt.datetime.fromisoformat(frame.user_attrs_hpsearch_started).timestamp() == \
            pytest.approx(first, abs=1e-3)
    paused = next(t for t in exp.trials if t.state == "paused" and len(segments[t.id]) == 1)
    assert float(rows[paused.id]["run_seconds"]) == pytest.approx(
        float(rows[paused.id]["duration"]))  # one segment: ran all along


def test_a_segment_in_flight_counts_until_now_and_the_trial_has_no_end_yet():
    trial = TrialRow(id=0, state=RUNNING, params={}, objective_values=None, attempt=3,
                       created=90.0, started=150.0, finished=None, host=None, pid=None,
                       pid_start=None, gpus=None, exit_code=None, error=None, trial_dir="t",
                       job_id=None, sampler_attrs={})
    rows = [AttemptRow(0, 1, PAUSED, 100.0, 110.0, None, None, 0, None, None, None),
            AttemptRow(0, 2, FAILED, 120.0, None, None, None, None, None, None, None),
            AttemptRow(0, 3, RUNNING, 150.0, None, None, None, None, None, None, None)]
    times = trial_times(trial, rows, now=160.0)
    # attempt 2's end was never seen: it counts nothing rather than a guess
    assert (times.started, times.finished, times.duration, times.run_seconds,
            times.last_started) == (100.0, None, 60.0, 20.0, 150.0)


def test_status_time_is_the_time_a_trial_ran_summed_over_its_segments(cli):
    """`hpsearch status`'s time column agrees with export's run_seconds: every segment's
    running time, not the last segment's alone (nor the pauses between them)."""
    cli("submit", promotion_spec(cli, "status-times"), check=0)
    segments = attempts(cli.runs, "status-times")
    lines = cli("status", "status-times", check=0).stdout.splitlines()
    header = next(line.split() for line in lines if line.startswith("id "))
    assert header[3] == "time", header
    shown = {int(words[0]): words[3] for words in map(str.split, lines)
             if words and words[0].isdigit()}
    assert set(shown) == set(segments)
    for tid, runs in segments.items():
        ran = sum(a["finished"] - a["started"] for a in runs)
        assert shown[tid].endswith("s") and float(shown[tid][:-1]) == pytest.approx(
            ran, abs=0.05 + 1e-9), (tid, shown[tid], runs)
    multi = [runs for runs in segments.values() if len(runs) >= 3]
    assert multi and all(  # the last segment alone would show less
        sum(a["finished"] - a["started"] for a in runs[:-1]) > 0.1 for runs in multi)


def test_the_live_views_time_is_the_time_a_trial_ran_summed_over_its_segments(cli):
    """The live view's `time` column is status's: every segment's running time."""
    from hpsearch.tui.model import SnapshotSource
    cli("submit", promotion_spec(cli, "view-times"), check=0)
    segments = attempts(cli.runs, "view-times")
    source = SnapshotSource(cli.runs / "view-times", rows=40)
    try:
        shown = {line.id: line.duration for line in source.snapshot().trials}
    finally:
        source.close()
    assert set(shown) == set(segments)
    for tid, runs in segments.items():
        assert shown[tid] == pytest.approx(sum(a["finished"] - a["started"] for a in runs))
    assert any(len(runs) >= 3 for runs in segments.values())

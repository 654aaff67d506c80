"""hpsearch.load: an experiment's data from Python, and trials_dataframe in Optuna's shape,
on a real local search with completed, failed and pruned trials."""

from __future__ import annotations

import math

import pytest

import hpsearch
from hpsearch.errors import NotFound
from tests.helpers import read_store
from tests.interop_search import run_search, write_spec


@pytest.fixture
def searched(cli):
    run_search(cli)
    return cli


def test_load_gives_spec_trials_attempts_metrics_and_best(searched):
    exp = hpsearch.load("interop", searched.runs)
    _, stored = read_store(searched.runs, "interop")
    assert exp.name == "interop" and exp.status == "completed"
    assert [o.metric for o in exp.spec.objectives] == ["loss"]
    assert [(t.id, t.state, t.params) for t in exp.trials] == \
        [(t.id, t.state, t.params) for t in stored]
    assert {t.params["x"]: t.state for t in exp.trials} == \
        {1: "completed", 2: "completed", 3: "failed", 9: "pruned"}
    assert [(a.trial, a.attempt) for a in exp.attempts] == [(t.id, 1) for t in stored]
    for t in exp.trials:  # every report: loss and acc at steps 0..2
        x = t.params["x"]
        got = {(m.step, m.name): m.value for m in exp.metrics if m.trial == t.id}
        assert got == {**{(s, "loss"): x * x + 2 - s for s in range(3)},
                       **{(s, "acc"): float(f"0.{9 - x % 9}") for s in range(3)}}
    assert exp.best.params["x"] == 1 and exp.best.objective_values == [1.0]
    assert exp.checkpoints == ()


def test_trials_dataframe_has_optunas_columns(searched):
    df = hpsearch.load("interop", searched.runs).trials_dataframe()
    assert list(df.columns) == [
        "number", "value", "datetime_start", "datetime_complete", "duration",
        "params_lr", "params_steps", "params_x", "user_attrs_acc",
        "user_attrs_hpsearch_attempts", "user_attrs_hpsearch_error",
        "user_attrs_hpsearch_finished", "user_attrs_hpsearch_job_id",
        "user_attrs_hpsearch_last_started", "user_attrs_hpsearch_run_seconds",
        "user_attrs_hpsearch_started", "user_attrs_hpsearch_state",
        "user_attrs_hpsearch_trial", "user_attrs_hpsearch_trial_dir", "state"]
    by_x = {row.params_x: row for row in df.itertuples()}
    assert by_x[1].state == "COMPLETE" and by_x[1].value == 1.0
    assert by_x[3].state == "FAIL" and math.isnan(by_x[3].value)
    assert by_x[3].user_attrs_hpsearch_error.startswith("exit code 1")
    assert by_x[9].state == "PRUNED" and by_x[9].user_attrs_acc == 0.9
    assert list(df.number) == list(range(8))
    assert str(df.datetime_start.dtype).startswith("datetime64")
    assert all(d.total_seconds() < 60 for d in df.duration)


def test_frozen_trials_carry_intermediate_values_and_distributions(searched):
    exp = hpsearch.load("interop", searched.runs)
    frozen = exp.optuna_trials()
    assert [f.number for f in frozen] == [t.id for t in exp.trials]
    for f, t in zip(frozen, exp.trials):
        x = t.params["x"]
        assert f.intermediate_values == {s: x * x + 2 - s for s in range(3)}
        assert f.params == t.params and f.user_attrs["hpsearch_trial"] == t.id
        assert f.distributions["x"].choices == (1, 2, 3, 9)
        assert f.distributions["lr"].low == 0.01 and f.distributions["lr"].step == 0.01
    assert exp.optuna_study().best_trial.number == exp.best.id


def _two_objectives(cli):
    """The interop search with a second objective (acc, maximized), run; its Experiment."""
    text = write_spec(cli).read_text().replace(
        "objective: {metric: loss, direction: minimize}",
        "objective: [{metric: loss, direction: minimize}, {metric: acc, direction: maximize}]"
    ).replace("  pruner: {type: threshold, upper: 50}\n", "")
    cli("submit", cli.write_spec(text, "multi.yaml"), check=1)
    return hpsearch.load("interop", cli.runs)


def test_multi_objective_dataframe_has_values_columns(cli):
    exp = _two_objectives(cli)
    df = exp.trials_dataframe()
    assert {"values_0", "values_1"} <= set(df.columns) and "value" not in df.columns
    assert "user_attrs_acc" not in df.columns  # acc is an objective here, not a user attr
    with pytest.raises(ValueError, match="best_trials"):
        exp.best  # noqa: B018
    assert {t.id for t in exp.best_trials} <= {t.id for t in exp.trials}


def test_a_missing_experiment_names_the_runs_dir_and_close_names(searched):
    with pytest.raises(NotFound) as err:
        hpsearch.load("intrope", searched.runs)
    assert str(searched.runs) in str(err.value) and "did you mean 'interop'" in str(err.value)
    with pytest.raises(NotFound, match="no experiment 'zzz'"):
        hpsearch.load("zzz", searched.runs)


def test_load_defaults_to_the_runs_dir_the_cli_uses(searched, monkeypatch):
    monkeypatch.setenv("HPSEARCH_RUNS_DIR", str(searched.runs))
    assert hpsearch.load("interop").name == "interop"
    monkeypatch.delenv("HPSEARCH_RUNS_DIR")
    monkeypatch.chdir(searched.cwd)  # ./hpsearch-runs
    assert len(hpsearch.load("interop").trials) == 8


def test_export_has_every_metric_iso_times_and_durations(searched):
    import csv
    import datetime as dt
    import io
    import json

    rows = list(csv.DictReader(io.StringIO(searched("export", "interop", check=0).stdout)))
    assert list(rows[0])[:9] == ["trial", "state", "attempts", "loss", "param_x", "param_lr",
                                 "param_steps", "loss_last", "loss_last_step"]
    assert {"acc", "acc_last", "acc_last_step", "started", "finished", "duration",
            "steps"} <= set(rows[0])
    exp = hpsearch.load("interop", searched.runs)
    for row, t in zip(rows, exp.trials):
        x = t.params["x"]
        assert row["loss"] == ("" if t.state != "completed" else str(float(x * x)))
        assert float(row["loss_last"]) == x * x and row["loss_last_step"] == "2"
        assert float(row["acc"]) == float(row["acc_last"]) == float(f"0.{9 - x % 9}")
        started = dt.datetime.fromisoformat(row["started"])
        assert started.tzinfo is not None and started.timestamp() == pytest.approx(t.started,
                                                                                   abs=1e-3)
        assert dt.datetime.fromisoformat(row["finished"]).timestamp() == \
            pytest.approx(t.finished, abs=1e-3)
        assert float(row["duration"]) == pytest.approx(t.finished - t.started)
    out = searched.cwd / "t.json"
    searched("export", "interop", "--format", "json", "--out", out, check=0)
    data = json.loads(out.read_text())
    assert [d["trial"] for d in data] == list(range(8)) and len({tuple(d) for d in data}) == 1
    assert data[0]["loss"] == 1.0 and data[4]["loss"] is None and data[4]["acc"] == 0.6


def test_load_reads_a_search_whose_strategy_needs_packages_missing_here(searched, monkeypatch):
    """Reading needs no sampler: a gp search (torch) copied to a machine without torch
    still loads, with its own strategy. Simulated by making the grid strategy need a
    package that does not exist."""
    from hpsearch.search.registry import STRATEGIES
    monkeypatch.setattr(STRATEGIES.get("grid"), "needs", (("no_such_module_x", "pip ..."),))
    exp = hpsearch.load("interop", searched.runs)
    assert exp.spec.search.strategy == "grid" and len(exp.trials) == 8
    assert exp.trials_dataframe().shape[0] == 8


ATTRS = ("number", "value", "datetime_start", "datetime_complete", "duration", "params",
         "user_attrs", "state")


def _optunas(exp, attrs=ATTRS, multi_index=False):
    return exp.optuna_study().trials_dataframe(attrs=attrs, multi_index=multi_index)


def test_trials_dataframe_is_made_by_columns_and_equals_optunas(searched):
    """The frame made from the rows column by column (hpsearch.interop.trials_frame) is
    the one Optuna makes of the FrozenTrials: columns, values, dtypes."""
    import pandas as pd

    from hpsearch.interop import trials_frame
    exp = hpsearch.load("interop", searched.runs)
    assert trials_frame.covers(exp.raw, ATTRS)  # the fast way is the one taken here
    frame = exp.trials_dataframe()
    assert "view" not in exp.__dict__  # and it made no typed row
    pd.testing.assert_frame_equal(frame, _optunas(exp))
    pd.testing.assert_frame_equal(exp.trials_dataframe(multi_index=True),
                                  _optunas(exp, multi_index=True))
    some = ("number", "params", "state", "duration")
    pd.testing.assert_frame_equal(exp.trials_dataframe(some), _optunas(exp, some))
    assert not trials_frame.covers(exp.raw, ("number", "intermediate_values"))


def test_trials_dataframe_of_several_objectives_equals_optunas(cli):
    import pandas as pd
    exp = _two_objectives(cli)
    pd.testing.assert_frame_equal(exp.trials_dataframe(), _optunas(exp))


@pytest.mark.parametrize("zone", ["UTC", "Europe/Berlin", "America/St_Johns"])
def test_iso_many_gives_isos_text_and_fromtimestamps_datetimes(zone, monkeypatch):
    """Times made in numpy (trials_frame) are the ones optuna_trials makes one by one,
    across a daylight-saving change and in a zone half an hour off."""
    import datetime as dt
    import time

    from hpsearch.interop.optuna_trials import iso
    from hpsearch.interop.trials_frame import _local, iso_many
    monkeypatch.setenv("TZ", zone)
    time.tzset()
    try:
        change = 1_774_746_000.0  # 2026-03-29 01:00 UTC: Berlin's clocks go forward
        back = 1_792_890_000.0  # 2026-10-25 01:00 UTC: they go back (an hour twice)
        stamps = [at + k * 599.123456 - 30_000 for at in (change, back) for k in range(100)] + [
            None, 1_796_031_823.4959543, 0.0005, 1_800_000_000.9995]
        assert iso_many(stamps) == [iso(s) for s in stamps]
        dense = [back - 1000 + k * 1.0007 for k in range(2000)]  # 2,000 s across the change
        assert iso_many(dense) == [iso(s) for s in dense]
        assert _local(dense).tolist() == [dt.datetime.fromtimestamp(s) for s in dense]
        assert _local(stamps).tolist() == [None if s is None else
                                           dt.datetime.fromtimestamp(s) for s in stamps]
    finally:
        monkeypatch.undo()
        time.tzset()


def test_export_streams_piece_by_piece_the_same_text(searched, monkeypatch):
    """export writes its first rows before it reads the rest of the trials, and the text
    it streams is the one made of every trial at once (csv and json, stdout and --out)."""
    from hpsearch.interop.store_view import read_view
    from hpsearch.report import budget, export
    from hpsearch.report.data import collect
    from hpsearch.store.reader import Reader
    monkeypatch.setattr(export, "FIRST_PIECE", 2)
    monkeypatch.setattr(export, "PIECE", 3)
    reads = []
    after = Reader.trials_after
    monkeypatch.setattr(Reader, "trials_after",
                        lambda self, last, count: reads.append(count) or after(self, last, count))
    exp_dir = searched.runs / "interop"
    view = read_view(exp_dir)
    data = collect(exp_dir, use_sacct=False, view=view)
    whole = export.records(view, {b.trial: b for b in budget.trial_budgets(
        data.trials, data.curves, data.usage)}, data.gpu, data.timing)
    for fmt in ("csv", "json"):
        reads.clear()
        pieces = export.stream(exp_dir, fmt)
        first, count = next(pieces)
        assert reads == [2] and count == 2  # one piece read: 2 of the 8 trials
        assert first.startswith("trial,state" if fmt == "csv" else "[\n {")
        text = first + "".join(t for t, _ in pieces)
        assert reads == [2, 3, 3, 3] and text == export.render(whole, fmt)
        out = searched.cwd / f"t.{fmt}"
        searched("export", "interop", "--format", fmt, "--out", out, check=0)
        assert out.read_bytes() == text.encode()


def test_numeric_params_read_by_arrow_are_the_columns_json_gives(searched, monkeypatch):
    """pyarrow's JSON reader (trials_frame._numeric_params) gives the params columns that
    json.loads and the split per value give: the same frame either way; anything but
    numbers (a string, a bool, a list, a number no double holds) is left to the split."""
    import pandas as pd

    from hpsearch.interop import trials_frame
    exp = hpsearch.load("interop", searched.runs)
    fast, numeric = exp.trials_dataframe(), trials_frame._numeric_params
    monkeypatch.setattr(trials_frame, "_numeric_params", lambda texts: None)
    pd.testing.assert_frame_equal(fast, exp.trials_dataframe())
    monkeypatch.setattr(trials_frame, "_numeric_values", lambda texts, states, n: None)
    pd.testing.assert_frame_equal(fast, exp.trials_dataframe())  # values: json's way too
    texts = ['{"a": 1, "b": 0.5}', '{"a": 2}', '{"b": 3, "a": null}', '{"c": 7, "a": 4}']
    got = numeric(texts)
    want = {"a": [1, 2, None, 4], "b": [0.5, math.nan, 3, math.nan],
            "c": [math.nan, math.nan, math.nan, 7]}
    pd.testing.assert_frame_equal(pd.DataFrame({k: got["params", k] for k in want}),
                                  pd.DataFrame(want))
    assert numeric(['{"a": 1}', '{"a": 2}'])["params", "a"].dtype == "int64"
    for other in ('{"a": "x"}', '{"a": true}', '{"a": [1]}', '{"a": 1e400}'):
        assert numeric(['{"a": 1}', other]) is None, other


def test_gc_paused_gives_the_collector_back_as_it_found_it():
    import gc

    from hpsearch.interop.store_view import gc_paused
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_ints_gives_numpy_the_columns_pandas_would_make_of_the_list():
    import pandas as pd

    from hpsearch.interop.trials_frame import _ints
    for values in ([1, 2, 3], [1, None], [2**70, 1], [True, 1], [1, 2.5], []):
        pd.testing.assert_series_equal(pd.Series(_ints(values)), pd.Series(values))
    assert _ints([1, None]) == [1, None] and _ints([True]) == [True]


def test_trials_dataframe_without_pyarrow_is_the_same_frame(searched, monkeypatch):
    """pyarrow is not a dependency of hpsearch (mlflow's extra brings it): where it cannot
    be imported, the frame is made the json way, and is the same."""
    import sys

    import pandas as pd
    exp = hpsearch.load("interop", searched.runs)
    fast = exp.trials_dataframe()
    for name in ("pyarrow", "pyarrow.json", "pyarrow.compute"):
        monkeypatch.setitem(sys.modules, name, None)  # `import pyarrow` raises ImportError
    pd.testing.assert_frame_equal(fast, exp.trials_dataframe())


def test_numeric_values_read_by_arrow_are_the_columns_json_gives(cli, monkeypatch):
    """trials_frame._numeric_values: each objective's column as json.loads gives it (two
    objectives here), NaN where a trial is not COMPLETE; anything else is left to json."""
    import pandas as pd

    from hpsearch.interop import trials_frame
    exp = _two_objectives(cli)
    fast, numeric = exp.trials_dataframe(), trials_frame._numeric_values
    monkeypatch.setattr(trials_frame, "_numeric_values", lambda texts, states, n: None)
    pd.testing.assert_frame_equal(fast, exp.trials_dataframe())
    done = ["COMPLETE", "COMPLETE"]
    assert numeric(["[1]", "[2]"], done, 1)[0].dtype == "int64"
    got = numeric(["[1, 0.5]", "[2, 3]", "null"], [*done, "FAIL"], 2)
    assert [c.tolist()[:2] for c in got] == [[1, 2], [0.5, 3]] and math.isnan(got[0][2])
    for texts, states in ((["[1]", "[]"], done), (["[1, 2]", "[3]"], done),
                          (["[1]", None], done), (["[1]", '["a"]'], done),
                          (["[1]", "[2]"], ["FAIL", "WAITING"])):
        assert numeric(texts, states, len(texts[0].split(","))) is None, texts

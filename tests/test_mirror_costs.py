"""Issue 38 item 9: the TensorBoard and MLflow mirrors carry what each trial cost (gpu_hours,
node_hours, wall_s: export's numbers), its parallel efficiency and its rung; a paused trial
(promotion mode) is no failure in TensorBoard and has its rung value in a column of
trials_dataframe (its value, as Optuna gives a pruned trial); integer choices stay integers
in TensorBoard's HParams; runs are named as the trial dirs (00002) so they sort as numbers.
Through the CLI, on a real ASHA promotion search (tests/promotion_search.py) whose trials
also report step timing."""

from __future__ import annotations

import csv
import io
import sys

import pytest

import hpsearch
from tests.helpers import read_store
from tests.promotion_search import SEGMENTED, SPEC
from tests.test_cost_objective import CHEAP

ea = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
mlflow = pytest.importorskip("mlflow")
from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2  # noqa: E402
from tensorboard.util import tensor_util  # noqa: E402

TIMED = SEGMENTED.replace("    trial.report(step, loss=loss)\n",
                          "    trial.report(step, loss=loss)\n"
                          "    trial.report_timing(step, step_s=0.02, compute_s=0.015)\n")
COST = ("node_hours", "gpu_hours", "wall_s", "parallel_efficiency")
QUIET = {"MLFLOW_DISABLE_TELEMETRY": "true"}


@pytest.mark.slow  # 22 s in the quick tier (2026-11-29): over its 5 s rule
def test_the_mirrors_and_the_dataframe_of_a_promotion_search(cli):
    """One search (about 10 s) read by all three."""
    searched = _search(cli)
    _tensorboard_has_cost_rung_int_choices_and_no_failure_for_paused(cli, searched)
    _mlflow_has_cost_and_rung_and_runs_named_to_sort(cli, searched)
    _trials_dataframe_gives_paused_trials_their_rung_and_value(cli, searched)


def _search(cli):
    """The promotion search, ended: x = 0 and the end-game trial completed, the rest paused
    at rung 0 or 1; and its export, by trial."""
    assert TIMED != SEGMENTED
    script = cli.cwd / "segmented.py"
    script.write_text(TIMED)
    spec = cli.write_spec(SPEC.format(name="costs", python=sys.executable, script=script,
                                      xs=[5, 3, 4, 1, 8, 2, 7, 0, 6], parallel=2,
                                      pause=0.02), "costs.yaml")
    cli("submit", spec, check=0)
    exported = {int(row["trial"]): row for row in csv.DictReader(io.StringIO(
        cli("export", "costs", check=0).stdout))}
    trials = read_store(cli.runs, "costs")[1]
    assert {t.state for t in trials} == {"completed", "paused"}
    return trials, exported


def _expected(row: dict) -> dict[str, float]:
    """What the mirrors must hold: export's numbers (its wall-clock run is run_seconds)."""
    found = {"node_hours": row["node_hours"], "gpu_hours": row["gpu_hours"],
             "wall_s": row["run_seconds"], "parallel_efficiency": row["parallel_efficiency"]}
    return {k: float(v) for k, v in found.items()}


def _tensorboard_has_cost_rung_int_choices_and_no_failure_for_paused(cli, searched):
    trials, exported = searched
    cli("tensorboard", "costs", "--logdir", "tb", check=0)
    logdir = cli.cwd / "tb"
    assert sorted(p.name for p in logdir.iterdir() if p.is_dir()) == \
        [f"{t.id:05d}" for t in trials]
    for t in trials:
        acc = ea.EventAccumulator(str(logdir / f"{t.id:05d}"),
                                  size_guidance={ea.TENSORS: 0}).Reload()
        last = {tag: float(tensor_util.make_ndarray(acc.Tensors(tag)[-1].tensor_proto))
                for tag in acc.Tags()["tensors"] if not tag.startswith("_hparams_")}
        assert {k: last[k] for k in COST} == pytest.approx(_expected(exported[t.id]),
                                                           rel=1e-6), t.id  # float32
        assert last["rung"] == float(exported[t.id]["rung"])
        data = {tag: plugin_data_pb2.HParamsPluginData.FromString(content)
                for tag, content in acc.PluginTagToContent(metadata.PLUGIN_NAME).items()}
        start = data[metadata.SESSION_START_INFO_TAG].session_start_info
        assert start.group_name == f"{t.id:05d}"
        assert start.hparams["x"].string_value == str(t.params["x"])  # "5", not 5.000
        if t.state == "paused":
            assert last["rung_value"] == pytest.approx(t.rung_value, rel=1e-6)
            assert metadata.SESSION_END_INFO_TAG not in data  # not STATUS_FAILURE
        else:
            end = data[metadata.SESSION_END_INFO_TAG].session_end_info
            assert api_pb2.Status.Name(end.status) == "STATUS_SUCCESS"
    root = ea.EventAccumulator(str(logdir)).Reload()
    config = metadata.parse_experiment_plugin_data(
        root.PluginTagToContent(metadata.PLUGIN_NAME)[metadata.EXPERIMENT_TAG])
    assert [m.name.tag for m in config.metric_infos] == ["loss", *COST, "rung", "rung_value"]
    assert {v.string_value for v in config.hparam_infos[0].domain_discrete.values} == \
        {"0", "1", "2", "3", "4", "5", "6", "7", "8"}
    again = cli("tensorboard", "costs", "--logdir", "tb", check=0)
    assert "(0 added, 0 updated, 0 points)" in again.stdout


def _mlflow_has_cost_and_rung_and_runs_named_to_sort(cli, searched):
    trials, exported = searched
    uri = f"sqlite:///{cli.cwd / 'mlflow.db'}"
    cli("mlflow", "costs", "--tracking-uri", uri, env=QUIET, check=0)
    mlflow.set_tracking_uri(uri)
    try:
        frame = mlflow.search_runs(experiment_names=["costs"])
    finally:
        mlflow.set_tracking_uri(None)
    rows = {int(row["tags.hpsearch_trial"]): row for _, row in frame.iterrows()}
    assert sorted(rows) == [t.id for t in trials]
    for t in trials:
        row = rows[t.id]
        assert row["tags.mlflow.runName"] == f"trial-{t.id:05d}"
        assert {k: row[f"metrics.{k}"] for k in COST} == pytest.approx(
            _expected(exported[t.id]))
        assert row["metrics.rung"] == float(exported[t.id]["rung"])
        assert row["params.x"] == str(t.params["x"])
        if t.state == "paused":
            assert row["metrics.rung_value"] == pytest.approx(t.rung_value)
    again = cli("mlflow", "costs", "--tracking-uri", uri, env=QUIET, check=0)
    assert "(0 added, 0 updated, 0 points)" in again.stdout


def _trials_dataframe_gives_paused_trials_their_rung_and_value(cli, searched):
    trials, _ = searched
    frame = hpsearch.load("costs", cli.runs).trials_dataframe().set_index("number")
    for t in trials:
        row = frame.loc[t.id]
        assert row["user_attrs_hpsearch_rung"] == t.rung
        if t.state == "paused":
            assert row["state"] == "PRUNED" and row["user_attrs_hpsearch_state"] == "paused"
            assert row["value"] == pytest.approx(t.rung_value)  # before: NaN
            assert row["user_attrs_hpsearch_rung_value"] == pytest.approx(t.rung_value)


@pytest.mark.slow  # 3.6 s in the quick tier (2026-11-30): over its 3 s rule
def test_a_cost_objective_is_the_objective_and_the_stores_reading_is_beside_it(cli):
    """Objective gpu_hours, reported by no trial: TensorBoard's gpu_hours is the objective's
    value (what `best` and the sampler saw), hpsearch_gpu_hours export's reading beside it
    (export's naming rule)."""
    cli("submit", cli.write_spec(CHEAP), "--no-tui", "-q", check=0)
    trials = read_store(cli.runs, "cheap")[1]
    exported = {int(row["trial"]): row for row in csv.DictReader(io.StringIO(
        cli("export", "cheap", check=0).stdout))}
    cli("tensorboard", "cheap", "--logdir", "tb", check=0)
    for t in trials:
        acc = ea.EventAccumulator(str(cli.cwd / "tb" / f"{t.id:05d}"),
                                  size_guidance={ea.TENSORS: 0}).Reload()
        last = {tag: float(tensor_util.make_ndarray(acc.Tensors(tag)[-1].tensor_proto))
                for tag in acc.Tags()["tensors"] if not tag.startswith("_hparams_")}
        assert set(last) == {"gpu_hours", "hpsearch_gpu_hours", "node_hours", "wall_s"}
        assert last["gpu_hours"] == pytest.approx(t.objective_values[0], rel=1e-6)
        assert last["hpsearch_gpu_hours"] == pytest.approx(
            float(exported[t.id]["hpsearch_gpu_hours"]), rel=1e-6)
        assert last["wall_s"] == pytest.approx(float(exported[t.id]["run_seconds"]), rel=1e-6)

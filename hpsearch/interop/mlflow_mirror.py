"""Mirror an experiment into an MLflow tracking store (`hpsearch mlflow`).

One MLflow experiment (named after the hpsearch experiment, or as given), one run per trial
(named `trial-` and its trial dir's name, `trial-00002`, so that names sort as numbers;
tagged `hpsearch_trial=<id>`): the trial's parameters as params, every reported metric by
step (`log_batch`), once it is not in flight what it cost and its rung as metrics at its
last reported step (`values`: hpsearch.report.mirror_values; logged again where they
changed), its hpsearch state and bookkeeping as tags
(`hpsearch_state`, `hpsearch_attempts`, `hpsearch_job_id`, `hpsearch_error`,
`hpsearch_trial_dir`), its first start and last end as the run's start and end times, and
a run status mapped from its state (RUN_STATUS). Written through `MlflowClient` only (no
`mlflow.start_run`, no global active run).

Idempotent, with MLflow itself as the record of what was written: a sync finds the runs by
their `hpsearch_trial` tag, creates those missing, and for the others logs only the steps
beyond the last one MLflow holds for each metric (`get_metric_history`; the last report of
a step wins, as in the Optuna mirror), changed tags, and the status. A run whose status is
final, whose `hpsearch_state` tag is the store's state and whose values are MLflow's is
left alone. Unlike Optuna's
storages, MLflow lets a run's status change again: a paused trial promoted after the
search was resumed goes back to RUNNING. Params never change (MLflow refuses it; a trial's
parameters never change either). One sync at a time per MLflow experiment: two at once may
both create a trial's run.

Tracking URI: `sqlite:///PATH.db` (or any database URL MLflow takes), a `file:` URI or a
folder path (MLflow's file store; MLflow 3 keeps it in maintenance mode and refuses it
unless MLFLOW_ALLOW_FILE_STORE=true, which hpsearch sets for its own process when given one:
`mlflow ui` needs the same), or an MLflow server's `http(s)://` address.

hpsearch's store is only read (hpsearch.interop.store_view).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpsearch.errors import BadInput, HpsearchError
from hpsearch.interop.store_view import MetricRow, StoreView
from hpsearch.interop.trial_times import trial_times
from hpsearch.store import rows
from hpsearch.store.runs import trial_name

TRIAL_TAG = "hpsearch_trial"
STATE_TAG = "hpsearch_state"
# hpsearch trial state -> MLflow RunStatus (paused: run_status)
RUN_STATUS = {
    rows.COMPLETED: "FINISHED",
    rows.FAILED: "FAILED",
    rows.CANCELLED: "KILLED",
    rows.PRUNED: "KILLED",
    rows.RUNNING: "RUNNING",
    rows.QUEUED: "SCHEDULED",
    rows.SUBMITTING: "SCHEDULED",
}
FINAL = ("FINISHED", "FAILED", "KILLED")
BATCH = 1000  # MLflow's log_batch takes at most 1000 metrics, 100 params, 100 tags a call


@dataclass(frozen=True)
class SyncResult:
    trials: int     # trials of the experiment
    added: int      # new runs
    updated: int    # runs that got new metrics, tags or status
    points: int     # metric values logged


def run_status(state: str, experiment_running: bool) -> str:
    """The MLflow run status of an hpsearch trial state: a paused trial (promotion: waits
    at a rung) is RUNNING while the experiment runs, KILLED once it has ended; an unknown
    state is RUNNING while it runs, FAILED after."""
    if state == rows.PAUSED:
        return "RUNNING" if experiment_running else "KILLED"
    return RUN_STATUS.get(state, "RUNNING" if experiment_running else "FAILED")


def tracking_uri(value: str) -> str:
    """The tracking URI `value` names: a URI as it is, a path as a file: URI (its folder
    must exist). Raises BadInput otherwise."""
    if "://" in value or value.startswith("file:"):
        return value
    path = Path(value).absolute()
    if not path.parent.is_dir():
        raise BadInput(f"--tracking-uri {value}: folder {path.parent} does not exist")
    return path.as_uri()


def open_client(value: str):
    """An MlflowClient on the tracking store `value` names (see the module docstring).
    Raises HpsearchError (exit 2) where MLflow cannot open it."""
    uri = tracking_uri(value)
    if uri.startswith("file:"):
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    from mlflow.tracking import MlflowClient

    logging.getLogger("mlflow").setLevel(logging.WARNING)  # "Creating initial ... tables"
    logging.getLogger("alembic").setLevel(logging.WARNING)
    try:
        client = MlflowClient(tracking_uri=uri)
        client.search_experiments(max_results=1)
    except Exception as exc:  # noqa: BLE001 - MLflow's store and driver errors vary
        raise HpsearchError(f"--tracking-uri {value}: MLflow cannot open it: "
                            f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                            ) from None
    return client


def sync(view: StoreView, client, experiment_name: str,
         values: Mapping[int, Mapping[str, float]] | None = None) -> SyncResult:
    """Bring the MLflow experiment `experiment_name` up to date with `view` (idempotent);
    `values`: trial id -> what it cost and its rung (hpsearch.report.mirror_values)."""
    from mlflow.entities import Param, RunTag

    experiment_id = _experiment(client, experiment_name, view)
    mirrored = _mirrored_runs(client, experiment_id)
    running = view.experiment.status == "running"
    added = updated = points = 0
    for trial in view.trials:
        status = run_status(trial.state, running)
        tags = _tags(trial, view)
        times = trial_times(trial, view.attempts_of(trial.id))
        run = mirrored.get(trial.id)
        created = run is None
        own = {} if trial.state in rows.IN_FLIGHT or values is None else values.get(trial.id, {})
        if run is None:
            run = client.create_run(experiment_id, start_time=_ms(times.started or trial.created),
                                    tags=tags, run_name=f"trial-{trial_name(trial.id)}")
            _log(client, run.info.run_id, params=[Param(k, _text(v)) for k, v
                                                  in trial.params.items()])
            logged: dict[str, int] = {}
            added += 1
        elif run.info.status == status and status in FINAL \
                and run.data.tags.get(STATE_TAG) == trial.state \
                and all(run.data.metrics.get(k) == v for k, v in own.items()):
            continue  # final, as the store has it
        else:
            logged = _logged_steps(client, run.info.run_id, view.metrics_of(trial.id))
        new = _new_points(view.metrics_of(trial.id), logged, times.started or trial.created)
        new += _changed_values(own, run.data.metrics, view.metrics_of(trial.id),
                               times.finished or time.time())
        changed = [RunTag(k, v) for k, v in tags.items() if run.data.tags.get(k) != v]
        _log(client, run.info.run_id, metrics=new, tags=changed)
        if run.info.status != status:
            if status in FINAL:
                client.set_terminated(run.info.run_id, status,
                                      end_time=_ms(times.finished or time.time()))
            else:
                client.update_run(run.info.run_id, status=status)
        points += len(new)
        updated += int(not created and bool(new or changed or run.info.status != status))
    return SyncResult(len(view.trials), added, updated, points)


def _experiment(client, name: str, view: StoreView) -> str:
    """The id of the MLflow experiment `name`, created where missing."""
    found = client.get_experiment_by_name(name)
    if found is None:
        return client.create_experiment(name, tags={
            "hpsearch_experiment": view.experiment.name,
            # MLflow 3's UI opens an experiment of this kind on its training runs
            "mlflow.experimentKind": "custom_model_development"})
    if found.lifecycle_stage != "active":
        raise BadInput(f"MLflow experiment '{name}' is deleted: restore it (mlflow "
                       "experiments restore) or choose another --experiment-name")
    return found.experiment_id


def _mirrored_runs(client, experiment_id: str) -> dict[int, Any]:
    """trial id -> its run (the first found), from the runs tagged hpsearch_trial."""
    found: dict[int, Any] = {}
    token = None
    while True:
        page = client.search_runs([experiment_id], max_results=1000, page_token=token,
                                  order_by=["attributes.start_time ASC"])
        for run in page:
            value = run.data.tags.get(TRIAL_TAG, "")
            if value.isdigit():
                found.setdefault(int(value), run)
        token = page.token
        if not token:
            return found


def _tags(trial: rows.TrialRow, view: StoreView) -> dict[str, str]:
    tags = {TRIAL_TAG: str(trial.id), STATE_TAG: trial.state,
            "hpsearch_attempts": str(trial.attempt), "hpsearch_job_id": trial.job_id,
            "hpsearch_error": trial.error, "hpsearch_trial_dir": trial.trial_dir,
            "hpsearch_experiment": view.experiment.name}
    return {k: v for k, v in tags.items() if v is not None}


def _logged_steps(client, run_id: str, metrics: list[MetricRow]) -> dict[str, int]:
    """metric -> the highest step MLflow holds for it in the run (those the trial reports)."""
    logged = {}
    for name in dict.fromkeys(m.name for m in metrics):
        history = client.get_metric_history(run_id, name)
        if history:
            logged[name] = max(m.step for m in history)
    return logged


def _new_points(metrics: list[MetricRow], logged: dict[str, int], started: float) -> list:
    """MLflow Metrics for the reports beyond the logged steps (the last report of a step)."""
    from mlflow.entities import Metric

    last = {(m.name, m.step): m for m in metrics}
    return [Metric(m.name, m.value, _ms(m.time if m.time is not None else started), m.step)
            for m in sorted(last.values(), key=lambda m: (m.step, m.name))
            if m.step > logged.get(m.name, -1)]


def _changed_values(own: Mapping[str, float], have: Mapping[str, float],
                    metrics: list[MetricRow], finished: float) -> list:
    """MLflow Metrics for the trial's values (cost, rung) that MLflow does not hold as its
    latest, at its last reported step and the time it ended."""
    from mlflow.entities import Metric

    at = max((m.step for m in metrics), default=0)
    return [Metric(k, v, _ms(finished), at) for k, v in own.items() if have.get(k) != v]


def _log(client, run_id: str, metrics: Sequence = (), params: Sequence = (),
         tags: Sequence = ()) -> None:
    """log_batch within MLflow's limits a call (1000 metrics, 100 params, 100 tags)."""
    calls = max(-(-len(metrics) // BATCH), -(-len(params) // 100), -(-len(tags) // 100))
    for i in range(calls):
        client.log_batch(run_id, metrics=metrics[i * BATCH:(i + 1) * BATCH],
                         params=params[i * 100:(i + 1) * 100], tags=tags[i * 100:(i + 1) * 100])


def _text(value: Any) -> str:
    """A parameter value as an MLflow param (a string): scalars as Python prints them,
    anything else as JSON."""
    if isinstance(value, (bool, int, float, str)) or value is None:
        return str(value)
    return json.dumps(value, default=str)


def _ms(seconds: float) -> int:
    return int(round(seconds * 1000))

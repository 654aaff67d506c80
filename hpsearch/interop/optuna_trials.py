"""An experiment's trials as Optuna FrozenTrials: a pure conversion of a StoreView.

  number               the hpsearch trial id
  params               the trial's parameters, each with its distribution from the spec's
                       space (a fixed parameter: a one-choice CategoricalDistribution)
  values               the objective values (COMPLETE trials), in spec order; a paused
                       trial's value at its rung once it is PRUNED (single objective: as
                       Optuna gives a pruned trial its last intermediate value)
  intermediate_values  the first objective's reports, step -> value
  user_attrs           every other metric's last reported value, by metric name, and
                       hpsearch_trial, hpsearch_state, hpsearch_attempts, hpsearch_job_id,
                       hpsearch_error, hpsearch_trial_dir, hpsearch_started (its first
                       attempt's start), hpsearch_finished (its last attempt's end),
                       hpsearch_last_started (its last attempt's start), all ISO-8601, and
                       hpsearch_run_seconds (the time it actually ran, summed over its
                       attempts: retries, promotion segments); hpsearch_startup_s (the part
                       of it before each attempt's code first called hpsearch.trial, where
                       known: docs/trial.md#start-up); for a trial that reported
                       per-rank timing, hpsearch_ranks, _step_s, _load_balance,
                       _comm_efficiency, _parallel_efficiency, _throughput(_unit), _speedup
                       and _scaling_efficiency (docs/scaling.md); in promotion mode,
                       hpsearch_rung (its last segment's) and hpsearch_rung_value (the
                       objective's value there: what a paused trial waits with); under pbt,
                       hpsearch_pbt_schedule ([{from_step, trial, params}]: the parameters
                       its model trained with, through the members it took checkpoints from)
  datetime_start/_complete  its first attempt's start and last attempt's end (local time,
                       as Optuna's own), so Optuna's duration spans every segment and the
                       pauses between them (hpsearch.interop.trial_times)

State mapping (STATE_MAP): completed -> COMPLETE; pruned -> PRUNED; failed, cancelled -> FAIL;
running -> RUNNING; queued, submitting -> WAITING; paused (promotion: waits at a rung) ->
RUNNING while the experiment runs, PRUNED once it has ended (it stopped at its rung).
"""

from __future__ import annotations

import datetime as dt
import functools
import warnings
from typing import Any

from hpsearch.interop.store_view import StoreView, last_reports
from hpsearch.interop.trial_times import trial_times
from hpsearch.search.pbt_schedule import as_json, lived_all
from hpsearch.spec.model import Param
from hpsearch.store import rows

# hpsearch trial state -> Optuna TrialState name (paused: see paused_state)
STATE_MAP = {
    rows.COMPLETED: "COMPLETE",
    rows.PRUNED: "PRUNED",
    rows.FAILED: "FAIL",
    rows.CANCELLED: "FAIL",
    rows.RUNNING: "RUNNING",
    rows.QUEUED: "WAITING",
    rows.SUBMITTING: "WAITING",
}
TRIAL_ATTR = "hpsearch_trial"  # user attr holding the hpsearch trial id (the mirror's key)


@functools.cache
def optuna():
    import optuna as module  # heavy: imported on first use

    module.logging.set_verbosity(module.logging.WARNING)
    warnings.filterwarnings("ignore", category=module.exceptions.ExperimentalWarning)
    return module


def trial_state(state: str, experiment_running: bool) -> str:
    """The Optuna TrialState name of an hpsearch trial state (see the module docstring);
    an unknown state is FAIL once the experiment has ended, WAITING while it runs."""
    if state == rows.PAUSED:
        return "RUNNING" if experiment_running else "PRUNED"
    return STATE_MAP.get(state, "WAITING" if experiment_running else "FAIL")


def distribution(param: Param):
    """The Optuna distribution of one spec parameter (a fixed one: its one value)."""
    from hpsearch.search.optuna_search import distribution as tuned

    if param.kind == "fixed":
        return optuna().distributions.CategoricalDistribution([param.value])
    return tuned(param)


def iso(timestamp: float | None) -> str | None:
    """A Unix time as ISO-8601 with the local UTC offset, to the millisecond; None stays."""
    if timestamp is None:
        return None
    return dt.datetime.fromtimestamp(timestamp).astimezone().isoformat(timespec="milliseconds")


def _local(timestamp: float | None) -> dt.datetime | None:
    return None if timestamp is None else dt.datetime.fromtimestamp(timestamp)


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def frozen_trials(view: StoreView) -> list:
    """Every trial of the view as an optuna.trial.FrozenTrial, by trial id."""
    space = {p.name: p for p in view.spec.search.space}
    running = view.experiment.status == "running"
    objectives = [o.metric for o in view.spec.objectives]
    schedules = lived_all(list(view.trials))
    return [frozen_trial(t, space, objectives, view, running, schedules.get(t.id))
            for t in view.trials]


def frozen_trial(t: rows.TrialRow, space: dict[str, Param], objectives: list[str],
                 view: StoreView, experiment_running: bool, schedule: list | None = None):
    """One trial as a FrozenTrial (see the module docstring for what goes where)."""
    o = optuna()
    state = o.trial.TrialState[trial_state(t.state, experiment_running)]
    params, distributions, extra = {}, {}, {}
    for name, value in t.params.items():
        if name in space and (space[name].kind != "fixed" or _scalar(value)):
            params[name], distributions[name] = value, distribution(space[name])
        elif _scalar(value):  # not in the space: shown as a one-choice parameter
            params[name] = value
            distributions[name] = o.distributions.CategoricalDistribution([value])
        else:
            extra[f"param_{name}"] = value
    reports = view.metrics_of(t.id)
    curve = {m.step: m.value for m in reports if m.name == objectives[0]}
    user_attrs: dict[str, Any] = {name: value for name, (_, value)
                                  in last_reports(reports).items() if name not in objectives}
    user_attrs.update(extra)
    times = trial_times(t, view.attempts_of(t.id))
    user_attrs.update({
        TRIAL_ATTR: t.id, "hpsearch_state": t.state, "hpsearch_attempts": t.attempt,
        "hpsearch_job_id": t.job_id, "hpsearch_error": t.error,
        "hpsearch_trial_dir": t.trial_dir, "hpsearch_started": iso(times.started),
        "hpsearch_finished": iso(times.finished),
        "hpsearch_last_started": iso(times.last_started),
        "hpsearch_run_seconds": times.run_seconds})
    if times.startup_s is not None:  # apart from the run (a cost objective leaves it out)
        user_attrs["hpsearch_startup_s"] = times.startup_s
    timed = view.timing.get(t.id)  # a multi-rank trial's POP metrics (docs/scaling.md)
    if timed is not None:
        user_attrs.update({f"hpsearch_{name}": value for name, value in timed.columns().items()
                           if value is not None})
    if t.rung is not None:  # promotion mode
        user_attrs.update(hpsearch_rung=t.rung, hpsearch_rung_value=t.rung_value)
    if schedule:  # pbt: the parameters its model trained with, through its donors
        user_attrs["hpsearch_pbt_schedule"] = as_json(schedule)
    values = t.objective_values if state == o.trial.TrialState.COMPLETE else None
    if t.state == rows.PAUSED and state == o.trial.TrialState.PRUNED and t.rung_value \
            is not None and len(objectives) == 1:
        values = [t.rung_value]
    if state == o.trial.TrialState.COMPLETE and values is None:
        state = o.trial.TrialState.FAIL  # completed without values: cannot be COMPLETE
    start = None if state == o.trial.TrialState.WAITING else \
        _local(times.started if times.started is not None else t.created)
    end = None
    if state.is_finished():
        end = _local(times.finished or times.started or t.created)
    frozen = o.trial.FrozenTrial(
        number=t.id, state=state, value=None, datetime_start=start, datetime_complete=end,
        params=params, distributions=distributions, user_attrs=user_attrs, system_attrs={},
        intermediate_values=curve, trial_id=t.id,
        values=list(values) if values is not None else None)
    frozen._validate()
    return frozen


def in_memory_study(view: StoreView):
    """An in-memory Optuna study named after the experiment holding every trial."""
    o = optuna()
    study = o.create_study(study_name=view.experiment.name,
                           directions=[ob.direction for ob in view.spec.objectives])
    study.add_trials(frozen_trials(view))
    return study

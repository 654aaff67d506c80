"""The Python API: `hpsearch.load(name)` gives an experiment's data, read-only.

    import hpsearch
    exp = hpsearch.load("quadratic")            # runs dir: $HPSEARCH_RUNS_DIR or ./hpsearch-runs
    exp.best.params, exp.best.objective_values
    df = exp.trials_dataframe()                 # pandas, the columns of Optuna's own

Everything is read at load() through the store's read-only Reader (typed on first use);
load again to see newer trials. Nothing here writes the store (the driver is its only writer).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hpsearch.interop import optuna_trials, trials_frame
from hpsearch.interop.store_view import AttemptRow, MetricRow, RawRows, StoreView, read_raw
from hpsearch.search.pbt_schedule import Piece, lived_all
from hpsearch.spec.model import Spec
from hpsearch.store import rows, runs
from hpsearch.store.results import best as best_trials

if TYPE_CHECKING:
    import pandas


@dataclass(frozen=True)
class Experiment:
    """One experiment as stored when it was loaded (typed rows, read-only)."""

    raw: RawRows  # the rows as read at load(); typed on first use (view)

    @functools.cached_property
    def view(self) -> StoreView:
        """The typed rows (100,000 trials: seconds to make; trials_dataframe needs none)."""
        return self.raw.view()

    @property
    def name(self) -> str:
        return self.raw.experiment.name

    @property
    def status(self) -> str:
        """The experiment's status as its driver last wrote it (running, completed, ...)."""
        return self.raw.experiment.status

    @property
    def path(self) -> Path:
        """The experiment's folder (store, trial dirs)."""
        return self.raw.exp_dir

    @property
    def spec(self) -> Spec:
        """The validated spec it was submitted with (space, objectives, executor, ...)."""
        return self.raw.spec

    @property
    def directions(self) -> tuple[str, ...]:
        return tuple(o.direction for o in self.raw.spec.objectives)

    @property
    def trials(self) -> tuple[rows.TrialRow, ...]:
        """Every trial by id: state, params, objective_values, started, finished, error, ..."""
        return self.view.trials

    @property
    def attempts(self) -> tuple[AttemptRow, ...]:
        """Every attempt (retry, requeue, promotion segment) by trial and attempt."""
        return self.view.attempts

    @property
    def metrics(self) -> tuple[MetricRow, ...]:
        """Every reported metric value (trial, step, name, value, attempt, time)."""
        return self.view.metrics

    @property
    def checkpoints(self) -> tuple[rows.CheckpointRow, ...]:
        """Every registered checkpoint; those the checkpoint policy deleted have `deleted`."""
        return self.view.checkpoints

    @property
    def best(self) -> rows.TrialRow | None:
        """The best completed trial (single objective), None before one completed. A
        multi-objective experiment has no single best: raises ValueError (see best_trials)."""
        if len(self.directions) > 1:
            raise ValueError(f"experiment {self.name} has {len(self.directions)} objectives: "
                             "use .best_trials (the Pareto front)")
        top = best_trials(list(self.trials), list(self.directions), 1)
        return top[0] if top else None

    @property
    def best_trials(self) -> list[rows.TrialRow]:
        """The best trial as a list (single objective), or the Pareto front."""
        return best_trials(list(self.trials), list(self.directions), 1)

    def schedule(self, trial_id: int) -> list[Piece]:
        """A pbt member's schedule as its model lived it: Pieces (from_step, params, trial),
        through the members it took checkpoints from (docs/pbt.md); [] for another
        strategy's trial."""
        return lived_all(list(self.trials)).get(trial_id, [])

    def optuna_trials(self) -> list:
        """Every trial as an optuna FrozenTrial (hpsearch.interop.optuna_trials)."""
        return optuna_trials.frozen_trials(self.view)

    def optuna_study(self):
        """An in-memory optuna Study holding every trial (its plots, best_trial, ...)."""
        return optuna_trials.in_memory_study(self.view)

    def trials_dataframe(self, attrs: tuple[str, ...] = ("number", "value", "datetime_start",
                                                         "datetime_complete", "duration",
                                                         "params", "user_attrs", "state"),
                         multi_index: bool = False) -> pandas.DataFrame:
        """Optuna's `study.trials_dataframe()` of optuna_study(): one row per trial, columns
        number, value (values_0, values_1, ... for several objectives), datetime_start,
        datetime_complete, duration, params_*, user_attrs_* (other metrics and hpsearch's
        own facts), state. datetime_start is the first attempt's start, datetime_complete the
        last attempt's end; user_attrs_hpsearch_run_seconds the time it ran, summed over its
        attempts (docs/python-api.md#times). Made from the rows column by column where
        hpsearch.interop.trials_frame covers the experiment, the same frame."""
        if trials_frame.covers(self.raw, attrs):
            return trials_frame.frame(self.raw, attrs, multi_index)
        return self.optuna_study().trials_dataframe(attrs=attrs, multi_index=multi_index)


def load(name: str, runs_dir: str | Path | None = None) -> Experiment:
    """The experiment `name` under `runs_dir` (default: $HPSEARCH_RUNS_DIR, else
    ./hpsearch-runs, as the command line finds it). Raises hpsearch.errors.NotFound (a
    LookupError-like HpsearchError) naming the runs dir, with close names if there are."""
    where = Path(runs_dir).absolute() if runs_dir is not None else runs.default_runs_dir()
    return Experiment(read_raw(runs.existing_experiment_dir(where, name)))

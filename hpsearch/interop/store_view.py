"""One consistent, typed, read-only view of an experiment's store: the rows every export
and conversion starts from (hpsearch.api, hpsearch.interop.optuna_trials, `hpsearch export`).

Read through hpsearch.store's Reader only (mode=ro): never blocks or writes the driver's store.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path

from hpsearch.accounting.efficiency import TrialEfficiency, efficiency
from hpsearch.spec.model import Spec
from hpsearch.store import rows
from hpsearch.store.runs import STORE_FILE


@dataclass(frozen=True)
class MetricRow:
    """One reported metric value: `trial` reported `name` = `value` at `step` (NaN stays NaN)."""

    trial: int
    step: int
    name: str
    value: float
    attempt: int | None
    time: float | None


@dataclass(frozen=True)
class AttemptRow:
    """One attempt (a retry, a requeue, or a promotion segment) of a trial."""

    trial: int
    attempt: int
    state: str | None
    started: float | None
    finished: float | None
    host: str | None
    job_id: str | None
    exit_code: int | None
    reason: str | None       # why it began or how it ended, as the driver wrote it
    failure: str | None      # its failure class (hpsearch.driver.retry), if it failed
    nodes: str | None
    startup_s: float | None = None  # before its code first called hpsearch.trial, if known

    @classmethod
    def from_db(cls, row: dict) -> AttemptRow:
        """From a row of the store's attempts table (Reader.all_attempts, attempts)."""
        return cls(row["trial"], row["attempt"], row.get("state"), row.get("started"),
                   row.get("finished"), row.get("host"), row.get("job_id"),
                   row.get("exit_code"), row.get("reason"), row.get("failure"),
                   row.get("nodes"), row.get("startup_s"))


@dataclass(frozen=True)
class StoreView:
    """An experiment's rows, read at one moment. `spec` is the spec it was submitted with."""

    exp_dir: Path
    experiment: rows.ExperimentRow
    spec: Spec
    trials: tuple[rows.TrialRow, ...]
    attempts: tuple[AttemptRow, ...]
    metrics: tuple[MetricRow, ...]
    checkpoints: tuple[rows.CheckpointRow, ...]
    # each timed trial's parallel efficiency and scaling (docs/scaling.md)
    timing: dict[int, TrialEfficiency] = field(default_factory=dict)

    @property
    def metric_names(self) -> tuple[str, ...]:
        """The objective metrics first (spec order), then every other reported metric in the
        order first reported."""
        objectives = tuple(o.metric for o in self.spec.objectives)
        others = dict.fromkeys(m.name for m in self.metrics if m.name not in objectives)
        return objectives + tuple(others)

    def metrics_of(self, trial_id: int) -> list[MetricRow]:
        return list(self._by_trial("metrics").get(trial_id, ()))

    def attempts_of(self, trial_id: int) -> list[AttemptRow]:
        return list(self._by_trial("attempts").get(trial_id, ()))

    def _by_trial(self, table: str) -> dict[int, list]:
        """metrics or attempts indexed by trial, built once: a lookup per trial must not
        scan every row (10,000 trials: 10^8 comparisons, seconds, for an export)."""
        index = self.__dict__.get(f"_{table}_index")
        if index is None:
            index = {}
            for row in getattr(self, table):
                index.setdefault(row.trial, []).append(row)
            object.__setattr__(self, f"_{table}_index", index)
        return index


def last_reports(metrics: list[MetricRow]) -> dict[str, tuple[int, float]]:
    """metric -> (step, value) at the highest step it was reported (one trial's rows)."""
    found: dict[str, tuple[int, float]] = {}
    for m in metrics:
        if m.name not in found or m.step >= found[m.name][0]:
            found[m.name] = (m.step, m.value)
    return found


def read_view(exp_dir: Path) -> StoreView:
    """Read the experiment in `exp_dir` (its store must exist) and parse its stored spec.
    Raises hpsearch.errors.NotFound / BadInput with a message meant for the user."""
    from hpsearch.store.reader import Reader

    exp_dir = Path(exp_dir)
    with Reader(exp_dir / STORE_FILE) as reader:
        exp = reader.experiment()
        trials = reader.trials()
        metrics = [MetricRow(row["trial"], row["step"], row["name"],
                             math.nan if row["value"] is None else row["value"],
                             row.get("attempt"), row.get("time"))
                   for row in reader.all_metrics()]
        attempts = [AttemptRow.from_db(row) for row in reader.all_attempts()]
        checkpoints = reader.checkpoints(include_deleted=True)
        timing = efficiency(reader.rank_timing(), {t.id: t.params for t in trials},
                            exp.spec_yaml)
    return StoreView(exp_dir, exp, stored_spec(exp, exp_dir.parent), tuple(trials),
                     tuple(attempts), tuple(metrics), tuple(checkpoints), timing)


def stored_spec(exp: rows.ExperimentRow, runs_dir: Path) -> Spec:
    """The spec the experiment was submitted with. Its strategy's packages (torch for gp,
    ...) are needed to run it, not to read it: where they are missing here, the spec is
    validated as a random search and given its own strategy back."""
    import yaml

    from hpsearch.errors import BadInput
    from hpsearch.preflight import parse_spec
    from hpsearch.preflight.run_checks import missing_module

    args = (exp.spec_file, Path(exp.base_dir), runs_dir)
    try:
        return parse_spec(exp.spec_yaml, *args)
    except BadInput:
        if not missing_module(exp.strategy):
            raise
    raw = yaml.safe_load(exp.spec_yaml)
    raw["search"].update(strategy="random", trials=raw["search"].get("trials")
                         or exp.trials_requested)  # a grid may omit trials
    spec = parse_spec(yaml.safe_dump(raw, sort_keys=False), *args)
    return dataclasses.replace(spec, text=exp.spec_yaml, search=dataclasses.replace(
        spec.search, strategy=exp.strategy))

"""One consistent, typed, read-only view of an experiment's store: the rows every export
and conversion starts from (hpsearch.api, hpsearch.interop.optuna_trials, `hpsearch export`).

Read through hpsearch.store's Reader only (mode=ro): never blocks or writes the driver's store.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import math
import operator
from collections.abc import Iterator
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


@dataclass(frozen=True)
class RawRows:
    """An experiment's rows as SQLite gave them, read at one moment (read_raw): the
    trials, attempts and metrics tables as (column names, row tuples), by trial. view()
    makes the typed StoreView of them; hpsearch.interop.trials_frame reads the tuples
    column by column (100,000 trials: typed rows took seconds to make)."""

    exp_dir: Path
    experiment: rows.ExperimentRow
    spec: Spec
    tables: dict[str, tuple[tuple[str, ...], list[tuple]]]
    checkpoints: tuple[rows.CheckpointRow, ...]
    rank_timing: tuple[dict, ...]
    staged: bool = False  # a trial is paused, or has promotion rungs or a pbt schedule

    @property
    def trials(self) -> list[tuple]:
        return self.tables["trials"][1]

    def values(self, name: str, table: str = "trials") -> list:
        """Each row's value of column `name` (None where an older store lacks it)."""
        header, found = self.tables[table]
        if name not in header:
            return [None] * len(found)
        made = self.__dict__.setdefault("_columns", {})  # read once: trials_dataframe
        if (table, name) not in made:                    # asks for some columns twice
            made[table, name] = list(map(operator.itemgetter(header.index(name)), found))
        return list(made[table, name])

    def column(self, *names: str, table: str = "trials") -> list[tuple]:
        """Each row's values of `names`, as a tuple (None for a column an older store
        lacks)."""
        header, found = self.tables[table]
        if not all(n in header for n in names):
            at = [header.index(n) if n in header else None for n in names]
            return [tuple(None if i is None else row[i] for i in at) for row in found]
        if len(names) == 1:
            i = header.index(names[0])
            return [(row[i],) for row in found]
        return list(map(operator.itemgetter(*(header.index(n) for n in names)), found))

    def view(self) -> StoreView:
        """The typed StoreView of these rows (as read_view gives it)."""
        def typed(table: str, make) -> tuple:
            header, found = self.tables[table]
            return tuple(make(dict(zip(header, row))) for row in found)

        trials = typed("trials", rows.TrialRow.from_db)
        timing = efficiency(list(self.rank_timing), {t.id: t.params for t in trials},
                            self.experiment.spec_yaml)
        return StoreView(self.exp_dir, self.experiment, self.spec, trials,
                         typed("attempts", AttemptRow.from_db), typed("metrics", _metric_row),
                         self.checkpoints, timing)


TABLE_ORDER = {"trials": "id", "attempts": "trial, attempt", "metrics": "trial, step, name"}


def read_raw(exp_dir: Path) -> RawRows:
    """Read the experiment in `exp_dir` (its store must exist) and parse its stored spec.
    Raises hpsearch.errors.NotFound / BadInput with a message meant for the user."""
    from hpsearch.store.reader import Reader

    exp_dir = Path(exp_dir)
    with gc_paused(), Reader(exp_dir / STORE_FILE) as reader:
        exp = reader.experiment()
        tables = {table: reader.table_rows(table, order) for table, order in
                  TABLE_ORDER.items()}
        checkpoints = reader.checkpoints(include_deleted=True)
        timing = reader.rank_timing()
        staged = reader.db.execute(
            "select 1 from trials where state = ? or pruner_attrs like '%\"rungs\"%' or "
            "pruner_attrs like '%\"pbt\"%' limit 1", (rows.PAUSED,)).fetchone() is not None
    return RawRows(exp_dir, exp, stored_spec(exp, exp_dir.parent), tables,
                   tuple(checkpoints), tuple(timing), staged)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while rows are read or made in bulk (read_raw,
    trials_frame): they make no cycles, yet each full collection their allocations set
    off walks every object held, the rows read included. At 100,000 trials
    trials_dataframe() took 1.36-1.58 s of CPU with it on, 0.80-0.96 s off (the frame
    alone; benchmarks/README.md, scale.py)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def read_view(exp_dir: Path) -> StoreView:
    """read_raw's rows, typed (see read_raw)."""
    return read_raw(exp_dir).view()


def read_pieces(reader, exp_dir: Path, size: int, first: int | None = None
                ) -> Iterator[StoreView]:
    """The experiment's trials `size` at a time by id (`first` in the first piece), each
    piece a StoreView of those
    trials with their attempts and metrics (no checkpoints, no timing), read from an open
    Reader when it is asked for: `hpsearch export` writes a piece before it reads the next,
    so its first rows come at once and its memory does not grow with the store. A trial
    whose rows the driver changes meanwhile is read once, in its piece."""
    exp = reader.experiment()
    spec = stored_spec(exp, Path(exp_dir).parent)
    last = -1
    while trials := reader.trials_after(last, size if first is None else first):
        low, last, first = trials[0].id, trials[-1].id, None
        metrics = [_metric_row(row) for row in reader.rows_between("metrics", low, last)]
        attempts = [AttemptRow.from_db(row) for row in reader.rows_between("attempts", low,
                                                                          last)]
        yield StoreView(Path(exp_dir), exp, spec, tuple(trials), tuple(attempts),
                        tuple(metrics), ())


def _metric_row(row: dict) -> MetricRow:
    return MetricRow(row["trial"], row["step"], row["name"],
                     math.nan if row["value"] is None else row["value"], row.get("attempt"),
                     row.get("time"))


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

"""Optuna's side of benchmarks/scale.py: a study of N finished trials in Optuna's own storages,
and the time `optuna.load_study(...).trials` takes to read it back in a fresh process.

    python benchmarks/_optuna_load.py build journal study.log 100000   # prints seconds
    python benchmarks/_optuna_load.py build rdb study.sqlite 100000
    python benchmarks/_optuna_load.py load journal study.log           # prints seconds, count

The study is what scale.py's hpsearch search holds: one float parameter x in [0, 1], the
value loss = x, each trial COMPLETE with its start and end. It is built with
`study.add_trials` of FrozenTrials (much faster than running `optimize`), in batches; the
journal storage writes each trial as `optimize` would (a log line per operation). Into
RDBStorage (SQLite) Optuna writes the first trial; the others are inserted by SQL as copies
of its rows (add_trials commits each trial, 10-20 ms a trial here: half an hour for 100,000),
and load_study reads them all back as FrozenTrials (scale.py checks the count). The load is
timed from before `load_study` to after `.trials` (the import of optuna excluded, as the
import of hpsearch is from hpsearch.load()'s).
"""

from __future__ import annotations

import datetime as dt
import random
import sys
import time

import optuna

STUDY = "scale"
BATCH = 1000


def storage(kind: str, path: str):
    if kind == "journal":
        from optuna.storages.journal import JournalFileBackend
        return optuna.storages.JournalStorage(JournalFileBackend(path))
    if kind == "rdb":
        return optuna.storages.RDBStorage(f"sqlite:///{path}")
    raise ValueError(f"storage kind {kind!r}: expected journal or rdb")


def frozen(number: int, rng: random.Random) -> optuna.trial.FrozenTrial:
    x = rng.random()
    start = dt.datetime(2026, 1, 1) + dt.timedelta(seconds=number * 0.01)
    return optuna.trial.FrozenTrial(
        number=number, state=optuna.trial.TrialState.COMPLETE, value=x,
        datetime_start=start, datetime_complete=start + dt.timedelta(seconds=0.01),
        params={"x": x}, distributions={"x": optuna.distributions.FloatDistribution(0, 1)},
        user_attrs={}, system_attrs={}, intermediate_values={0: x}, trial_id=number)


def build(kind: str, path: str, trials: int) -> float:
    """Seconds to write a study of `trials` finished trials into a new storage at `path`."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    began = time.perf_counter()
    study = optuna.create_study(study_name=STUDY, storage=storage(kind, path))
    rng = random.Random(1)
    if kind == "rdb":  # Optuna writes the first; the rest are copies of its rows
        study.add_trials([frozen(0, rng)])
        _copy_rows(path, range(1, trials), rng)
        return time.perf_counter() - began
    for first in range(0, trials, BATCH):
        study.add_trials(frozen(n, rng) for n in range(first, min(first + BATCH, trials)))
    return time.perf_counter() - began


def _copy_rows(path: str, numbers: range, rng: random.Random) -> None:
    """Insert the rows RDBStorage writes for a trial (trials, trial_params, trial_values,
    trial_intermediate_values: as it wrote them for trial 0) for each of `numbers`, in one
    transaction. RDBStorage.add_trials commits each trial through SQLAlchemy, 10-20 ms a
    trial on the project's machine: 100,000 would take half an hour."""
    import sqlite3

    with sqlite3.connect(path) as db:
        (study_id,) = db.execute("select study_id from studies").fetchone()
        (distribution,) = db.execute("select distribution_json from trial_params").fetchone()
        stamp = "%Y-%m-%d %H:%M:%S.%f"
        for n in numbers:
            t = frozen(n, rng)
            x = t.params["x"]
            trial_id = db.execute(
                "insert into trials (number, study_id, state, datetime_start,"
                " datetime_complete) values (?, ?, 'COMPLETE', ?, ?)",
                (n, study_id, t.datetime_start.strftime(stamp),
                 t.datetime_complete.strftime(stamp))).lastrowid
            db.execute("insert into trial_params (trial_id, param_name, param_value,"
                       " distribution_json) values (?, 'x', ?, ?)", (trial_id, x, distribution))
            db.execute("insert into trial_values (trial_id, objective, value, value_type)"
                       " values (?, 0, ?, 'FINITE')", (trial_id, x))
            db.execute("insert into trial_intermediate_values (trial_id, step,"
                       " intermediate_value, intermediate_value_type) values (?, 0, ?,"
                       " 'FINITE')", (trial_id, x))


def load(kind: str, path: str) -> tuple[float, int]:
    """(seconds of load_study + .trials, trials read)."""
    began = time.perf_counter()
    trials = optuna.load_study(study_name=STUDY, storage=storage(kind, path)).trials
    return time.perf_counter() - began, len(trials)


def main(argv: list[str]) -> int:
    if argv[0] == "build":
        print(f"{build(argv[1], argv[2], int(argv[3])):.3f}")
    else:
        seconds, count = load(argv[1], argv[2])
        print(f"{seconds:.3f} {count}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

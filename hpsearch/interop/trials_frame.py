"""`Experiment.trials_dataframe()` built from the store's rows as read, column by column:
the frame Optuna's `study.trials_dataframe()` gives for the study of
hpsearch.interop.optuna_trials (the same columns, values and dtypes), without making a
FrozenTrial, an in-memory study and a record per trial first. At 100,000 trials that way
took 25 s; this takes a fraction of a second (benchmarks/scale.py).

It covers what most experiments hold; `frame` returns None for the rest, and the caller
takes Optuna's way: an attr other than number, value(s), datetime_start,
datetime_complete, duration, params, user_attrs and state; rank timing (its user attrs
compare trials), promotion (rungs, paused trials), pbt (schedules). The conversion rules
are optuna_trials' (its module docstring); tests/test_api.py checks the two frames equal.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from hpsearch.interop.optuna_trials import STATE_MAP, TRIAL_ATTR, _scalar

if TYPE_CHECKING:
    import pandas

    from hpsearch.interop.store_view import RawRows

ATTRS = frozenset(("number", "value", "values", "datetime_start", "datetime_complete",
                   "duration", "params", "user_attrs", "state"))
FINISHED = frozenset(("COMPLETE", "PRUNED", "FAIL"))
MISSING = float("nan")  # what pandas puts where a record lacks a column


def covers(raw: RawRows, attrs: tuple[str, ...]) -> bool:
    """Whether `frame` can build the frame of these rows (see the module docstring)."""
    return set(attrs) <= ATTRS and not raw.rank_timing and not raw.staged


def frame(raw: RawRows, attrs: tuple[str, ...], multi_index: bool) -> pandas.DataFrame:
    """Optuna's trials_dataframe(attrs, multi_index) of the experiment (covers() first)."""
    import pandas as pd

    if not raw.trials:
        return pd.DataFrame()
    spec = raw.spec
    objectives = [o.metric for o in spec.objectives]
    running = raw.experiment.status == "running"
    trials = raw.column("id", "state", "objective_values", "attempt", "created", "started",
                        "finished", "job_id", "error", "trial_dir", "params")
    fallback = "WAITING" if running else "FAIL"
    states = [STATE_MAP.get(state, fallback) for state in raw.values("state")]
    states = [("FAIL" if values in (None, "null") else name) if name == "COMPLETE" else name
              for name, values in zip(states, raw.values("objective_values"))]
    times = _times(raw, trials)
    params, extras = _params(raw, trials) if {"params", "user_attrs"} & set(attrs) else ({}, [])
    columns: dict[tuple[str, Any], list] = {}
    for attr in attrs:
        if attr == "number":
            columns[("number", "")] = [t[0] for t in trials]
        elif attr in ("value", "values"):
            columns.update(_values(trials, states, len(objectives), attr))
        elif attr in ("datetime_start", "datetime_complete", "duration"):
            columns.update(_datetimes(trials, states, times, attr))
        elif attr == "params":
            columns.update(sorted(params.items()))
        elif attr == "user_attrs":
            columns.update(sorted(_user_attrs(raw, trials, extras, times, objectives)
                                  .items()))
        elif attr == "state":
            columns[("state", "")] = states
    df = pd.DataFrame({i: values for i, values in enumerate(columns.values())})
    keys = list(columns)
    df.columns = pd.MultiIndex.from_tuples(keys) if multi_index else \
        ["_".join(str(c) for c in key if c != "") for key in keys]
    return df


def _json_each(texts: list[str | None]) -> list:
    """json.loads of each (None stays None), in one call: 100,000 calls took a second."""
    import json
    return json.loads("[" + ",".join("null" if t is None else t for t in texts) + "]")


def _values(trials: list, states: list[str], objectives: int, attr: str) -> dict:
    found = [v if state == "COMPLETE" else None
             for v, state in zip(_json_each([t[2] for t in trials]), states)]
    if objectives == 1 and attr == "value":
        return {("value", ""): [v[0] if v else None for v in found]}
    return {("values", i): [v[i] if v else None for v in found] for i in range(objectives)}


def _times(raw: RawRows, trials: list) -> dict[str, list]:
    """Per trial (in `trials`' order) its trial_times: started, finished, run (run_seconds),
    startup (startup_s), over its attempt rows (hpsearch.interop.trial_times, in numpy)."""
    import numpy as np

    def floats(name: str, table: str = "trials") -> np.ndarray:
        return np.array(raw.values(name, table), dtype=float)  # None: NaN

    now = time.time()
    ids = np.array(raw.values("id"), dtype=np.int64)  # by id (RawRows' order)
    last = np.array(raw.values("attempt"), dtype=np.int64)
    t_started, t_finished = floats("started"), floats("finished")
    trial, attempt = (np.array(raw.values(name, "attempts"), dtype=np.int64)
                      for name in ("trial", "attempt"))
    started, finished, startup = (floats(name, "attempts")
                                  for name in ("started", "finished", "startup_s"))
    row = np.clip(np.searchsorted(ids, trial), 0, max(len(ids) - 1, 0))
    counted = (ids[row] == trial) & ~np.isnan(started) & ~(np.isnan(finished)
                                                           & (attempt != last[row]))
    row, started, finished, startup = (x[counted] for x in (row, started, finished, startup))
    end_now = np.where(np.isnan(t_finished), now, t_finished)
    spans = np.bincount(row, minlength=len(ids))
    first = np.full(len(ids), np.inf)
    np.minimum.at(first, row, started)
    run = np.bincount(row, np.maximum(0.0, np.where(np.isnan(finished), end_now[row],
                                                    finished) - started), len(ids))
    known = np.bincount(row, ~np.isnan(startup), len(ids))
    up = np.bincount(row, np.nan_to_num(startup), len(ids))
    alone = (spans == 0) & ~np.isnan(t_started)  # no attempt rows: the trial row's own
    first = np.where(alone, t_started, first)
    run = np.where(alone, np.maximum(0.0, end_now - t_started), run)
    ran = (spans > 0) | alone

    def listed(values: np.ndarray, where: np.ndarray) -> list:
        return [v if w else None for v, w in zip(values.tolist(), where.tolist())]

    return {"started": listed(first, ran), "finished": listed(t_finished, ran & ~np.isnan(
        t_finished)), "run": listed(run, ran), "startup": listed(np.minimum(run, up),
                                                                known > 0)}


def _datetimes(trials: list, states: list[str], times: dict[str, list], attr: str) -> dict:
    """datetime_start, datetime_complete or duration, as frozen_trial sets them (local naive
    datetimes; their difference), as numpy datetime64[us] / timedelta64[us] with NaT where
    there is none: the dtypes pandas gives Optuna's datetimes (all missing: None, object)."""
    start = [None if state == "WAITING" else (s if s is not None else t[4])
             for t, state, s in zip(trials, states, times["started"])]
    end = [(f or s or t[4]) if state in FINISHED else None
           for t, state, s, f in zip(trials, states, times["started"], times["finished"])]
    starts, ends = _local(start), _local(end)
    found = {"datetime_start": starts, "datetime_complete": ends,
             "duration": ends - starts}[attr]
    import numpy as np
    return {(attr, ""): [None] * len(trials) if np.isnat(found).all() else found}


def _local(stamps: list[float | None]):
    """dt.datetime.fromtimestamp of each, made in numpy (the same microsecond): a
    datetime64[us] array, NaT for None."""
    import numpy as np

    seconds = np.array(stamps, dtype=float)  # None: NaN
    missing = np.isnan(seconds)
    micro = _micro(np.where(missing, 0.0, seconds))
    local = (micro + 1_000_000 * _offsets(micro)).astype("datetime64[us]")
    local[missing] = np.datetime64("NaT")
    return local


def _micro(seconds):
    """Microseconds since the epoch as datetime.fromtimestamp rounds them (half even)."""
    import numpy as np

    fraction, whole = np.modf(seconds)
    return whole.astype(np.int64) * 1_000_000 + np.round(fraction * 1e6).astype(np.int64)


def _offsets(micro):
    """The local UTC offset in seconds at each instant (time.localtime's, per quarter
    hour: every time zone changes its offset on a quarter hour)."""
    import numpy as np

    quarter = micro // 900_000_000
    keys, where = np.unique(quarter, return_inverse=True)
    offsets = np.array([time.localtime(int(k) * 900).tm_gmtoff for k in keys.tolist()],
                       dtype=np.int64)
    return offsets[where]


def iso_many(stamps: list[float | None]) -> list[str | None]:
    """optuna_trials.iso of each: ISO-8601 local time to the millisecond with its offset."""
    import numpy as np

    seconds = np.array(stamps, dtype=float)  # None: NaN
    missing = np.isnan(seconds)
    micro = _micro(np.where(missing, 0.0, seconds))
    offsets = _offsets(micro)
    text = np.datetime_as_string((micro + 1_000_000 * offsets).astype("datetime64[us]"),
                                 unit="ms").tolist()
    suffix = {o: _offset_text(o) for o in set(offsets.tolist())}
    return [None if m else t + suffix[o]
            for t, o, m in zip(text, offsets.tolist(), missing.tolist())]


def _offset_text(seconds: int) -> str:
    sign = "-" if seconds < 0 else "+"
    hours, rest = divmod(abs(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    return f"{sign}{hours:02d}:{minutes:02d}" + (f":{secs:02d}" if secs else "")


def _params(raw: RawRows, trials: list) -> tuple[dict, list[dict]]:
    """({("params", name): a value per trial}, per trial the user attrs param_<name> of the
    values that cannot be a parameter: frozen_trial's split)."""
    space = {p.name: p for p in raw.spec.search.space}
    columns: dict[tuple[str, str], list] = {}
    extras: list[dict] = []
    for row, params in enumerate(_json_each([t[10] for t in trials])):
        extra = {}
        for name, value in params.items():
            if _scalar(value) or (name in space and space[name].kind != "fixed"):
                if ("params", name) not in columns:
                    columns["params", name] = [MISSING] * len(trials)
                columns["params", name][row] = value
            else:
                extra[f"param_{name}"] = value
        extras.append(extra)
    return columns, extras


def _user_attrs(raw: RawRows, trials: list, extras: list[dict], times: dict[str, list],
                objectives: list[str]) -> dict:
    """{("user_attrs", key): a value per trial}: each other metric's last report, the
    param_<name> extras, then hpsearch's own (frozen_trial's, in its order of precedence)."""
    n = len(trials)
    row_of = {t[0]: i for i, t in enumerate(trials)}
    columns: dict[tuple[str, str], list] = {}

    def put(key: str, values: list) -> None:
        columns[("user_attrs", key)] = values

    last: dict[str, dict[int, tuple[int, float]]] = {}
    for trial, step, name, value in raw.column("trial", "step", "name", "value",
                                               table="metrics"):
        if name not in objectives:
            seen = last.setdefault(name, {})
            if trial not in seen or step >= seen[trial][0]:
                seen[trial] = (step, float("nan") if value is None else value)
    for name, by_trial in last.items():
        values = [MISSING] * n
        for trial, (_, value) in by_trial.items():
            values[row_of[trial]] = value
        put(name, values)
    for row, extra in enumerate(extras):
        for key, value in extra.items():
            if ("user_attrs", key) not in columns:
                columns["user_attrs", key] = [MISSING] * n
            columns["user_attrs", key][row] = value
    put(TRIAL_ATTR, [t[0] for t in trials])
    put("hpsearch_state", [t[1] for t in trials])
    put("hpsearch_attempts", [t[3] for t in trials])
    put("hpsearch_job_id", [t[7] for t in trials])
    put("hpsearch_error", [t[8] for t in trials])
    put("hpsearch_trial_dir", [t[9] for t in trials])
    put("hpsearch_started", iso_many(times["started"]))
    put("hpsearch_finished", iso_many(times["finished"]))
    put("hpsearch_last_started", iso_many([t[5] for t in trials]))
    put("hpsearch_run_seconds", times["run"])
    if any(s is not None for s in times["startup"]):
        put("hpsearch_startup_s", [MISSING if s is None else s for s in times["startup"]])
    return columns

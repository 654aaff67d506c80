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
from typing import TYPE_CHECKING, Any, cast

from hpsearch.interop.optuna_trials import STATE_MAP, TRIAL_ATTR, _scalar
from hpsearch.interop.store_view import gc_paused

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
    with gc_paused():
        return _frame(raw, attrs, multi_index)


def _frame(raw: RawRows, attrs: tuple[str, ...], multi_index: bool) -> pandas.DataFrame:
    import pandas as pd

    if not raw.trials:
        return pd.DataFrame()
    spec = raw.spec
    objectives = [o.metric for o in spec.objectives]
    running = raw.experiment.status == "running"
    fallback = "WAITING" if running else "FAIL"
    states = [STATE_MAP.get(state, fallback) for state in raw.values("state")]
    states = [("FAIL" if values in (None, "null") else name) if name == "COMPLETE" else name
              for name, values in zip(states, raw.values("objective_values"))]
    times = _times(raw)
    params, extras = _params(raw) if {"params", "user_attrs"} & set(attrs) else ({}, [])
    columns: dict[tuple[str, Any], Any] = {}
    for attr in attrs:
        if attr == "number":
            columns[("number", "")] = _ints(raw.values("id"))
        elif attr in ("value", "values"):
            columns.update(_values(raw, states, len(objectives), attr))
        elif attr in ("datetime_start", "datetime_complete", "duration"):
            columns.update(_datetimes(raw, states, times, attr))
        elif attr == "params":
            columns.update(sorted(params.items()))
        elif attr == "user_attrs":
            columns.update(sorted(_user_attrs(raw, extras, times, objectives).items()))
        elif attr == "state":
            columns[("state", "")] = states
    df = pd.DataFrame({i: values for i, values in enumerate(columns.values())})
    keys = list(columns)
    df.columns = pd.MultiIndex.from_tuples(keys) if multi_index else \
        ["_".join(str(c) for c in key if c != "") for key in keys]
    return df


def _ints(values: list) -> Any:
    """An int64 array of the values where each is an int (that fits), else the list: the
    column pandas makes of either. Of 100,000 ids pandas made a column in 0.021-0.025 s
    from the list, in 0.010 s from the array (this check and numpy's conversion in it)."""
    import numpy as np

    if set(map(type, values)) == {int}:  # 100,000: 0.0035 s; all() of a generator 0.0053
        try:
            return np.array(values, dtype=np.int64)
        except OverflowError:
            pass
    return values


def _json_each(texts: list[str | None]) -> list:
    """json.loads of each (None stays None), in one call: 100,000 calls took a second."""
    import json
    if None in texts:  # a pass in C where there is none (most stores)
        texts = ["null" if t is None else t for t in texts]
    return json.loads("[" + ",".join(cast("list[str]", texts)) + "]")


def _values(raw: RawRows, states: list[str], objectives: int, attr: str) -> dict:
    texts = raw.values("objective_values")
    columns = _numeric_values(texts, states, objectives)
    if columns is None:
        found = [v if state == "COMPLETE" else None
                 for v, state in zip(_json_each(texts), states)]
        columns = [[v[i] if v else None for v in found] for i in range(objectives)]
    if objectives == 1 and attr == "value":
        return {("value", ""): columns[0]}
    return {("values", i): columns[i] for i in range(objectives)}


def _numeric_values(texts: list, states: list[str], objectives: int) -> list | None:
    """_values' column of each objective (NaN where the trial is not COMPLETE) read by
    pyarrow's JSON reader, where every trial has a list of numbers: 100,000 of them in
    0.03 s where json.loads took 0.05-0.1 s and the lists' passes 0.02 s more. None
    where a text is missing, a list holds something else or is too short, or no trial is
    COMPLETE (pandas would make a column of None): _values' own way."""
    import io

    import numpy as np
    try:  # not a dependency of hpsearch (mlflow's extra brings it): without it, _values
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.json
    except ImportError:
        return None

    complete = np.array([state == "COMPLETE" for state in states], dtype=bool)
    if None in texts or not complete.any():
        return None
    try:
        table = pyarrow.json.read_json(io.BytesIO("".join(
            ['{"v":' + text + "}\n" for text in texts]).encode()))
        kind = table.schema.field("v").type
        if len(table) != len(texts) or not pa.types.is_list(kind) or not (
                pa.types.is_float64(kind.value_type) or pa.types.is_int64(kind.value_type)):
            return None
        columns = [pc.list_element(table["v"], i).to_numpy(zero_copy_only=False)
                   for i in range(objectives)]
    except (pa.ArrowInvalid, KeyError):
        return None
    # as pandas makes a list of ints and None: float64 with NaN
    return columns if complete.all() else [np.where(complete, c, np.nan) for c in columns]


def _times(raw: RawRows) -> dict:
    """Per trial (by id) its trial_times: started, finished, run (run_seconds), startup
    (startup_s), over its attempt rows (hpsearch.interop.trial_times, in numpy): float
    arrays, NaN where trial_times gives None."""
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
    return {"started": np.where(ran, first, np.nan), "finished": np.where(ran, t_finished,
                                                                          np.nan),
            "run": np.where(ran, run, np.nan),
            "startup": np.where(known > 0, np.minimum(run, up), np.nan)}


def _datetimes(raw: RawRows, states: list[str], times: dict, attr: str) -> dict:
    """datetime_start, datetime_complete or duration, as frozen_trial sets them (local naive
    datetimes; their difference), as numpy datetime64[us] / timedelta64[us] with NaT where
    there is none: the dtypes pandas gives Optuna's datetimes (all missing: None, object)."""
    import numpy as np

    created = np.array(raw.values("created"), dtype=float)  # None: NaN
    started, finished = times["started"], times["finished"]
    waiting = np.array([state == "WAITING" for state in states], dtype=bool)
    done = np.array([state in FINISHED for state in states], dtype=bool)

    def truthy(x):  # frozen_trial's `f or s or created`: None and 0.0 are passed over
        return ~np.isnan(x) & (x != 0)

    start = np.where(waiting, np.nan, np.where(np.isnan(started), created, started))
    end = np.where(done, np.where(truthy(finished), finished,
                                  np.where(truthy(started), started, created)), np.nan)
    starts, ends = _local(start), _local(end)
    found = {"datetime_start": starts, "datetime_complete": ends,
             "duration": ends - starts}[attr]
    return {(attr, ""): [None] * len(states) if np.isnat(found).all() else found}


def _local(stamps):
    """dt.datetime.fromtimestamp of each (a list, or a float array: None or NaN for none),
    made in numpy (the same microsecond): a datetime64[us] array, NaT for none."""
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


def iso_many(stamps) -> list[str | None]:
    """optuna_trials.iso of each (a list, or a float array: None or NaN for none): ISO-8601
    local time to the millisecond with its offset."""
    import numpy as np

    seconds = np.array(stamps, dtype=float)  # None: NaN
    missing = np.isnan(seconds)
    micro = _micro(np.where(missing, 0.0, seconds))
    offsets = _offsets(micro)
    local = micro + 1_000_000 * offsets
    # Text is made once per distinct second, offset and millisecond, and numpy's string
    # ufunc joins the pieces in C: 100,000 stamps over 450 s took 0.061-0.070 s, where
    # datetime_as_string of each and a join per stamp in Python took 0.083-0.086 s.
    whole, second = np.unique(local // 1_000_000, return_inverse=True)
    text = np.datetime_as_string(whole.astype("datetime64[s]"))[second]
    millis = np.array([f".{ms:03d}" for ms in range(1000)])[(local % 1_000_000) // 1000]
    zones, zone = np.unique(offsets, return_inverse=True)
    suffix = np.array([_offset_text(o) for o in zones.tolist()])[zone]
    found = np.strings.add(np.strings.add(text, millis), suffix).astype(object)
    found[missing] = None
    return found.tolist()


def _offset_text(seconds: int) -> str:
    sign = "-" if seconds < 0 else "+"
    hours, rest = divmod(abs(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    return f"{sign}{hours:02d}:{minutes:02d}" + (f":{secs:02d}" if secs else "")


def _params(raw: RawRows) -> tuple[dict, list[dict]]:
    """({("params", name): a value per trial}, per trial the user attrs param_<name> of the
    values that cannot be a parameter: frozen_trial's split)."""
    texts = raw.values("params")
    numbers = _numeric_params(texts)
    if numbers is not None:
        return numbers, []
    space = {p.name: p for p in raw.spec.search.space}
    found = _json_each(texts)
    n = len(found)
    columns: dict[tuple[str, str], list] = {}
    extras: list[dict] = [{} for _ in range(n)]
    for name in dict.fromkeys(name for params in found for name in params):
        if name in space and space[name].kind != "fixed":  # a parameter, whatever its value
            columns["params", name] = [params.get(name, MISSING) for params in found]
            continue
        for row, params in enumerate(found):  # each value where it can be one
            if name not in params:
                continue
            if _scalar(params[name]):
                columns.setdefault(("params", name), [MISSING] * n)[row] = params[name]
            else:
                extras[row][f"param_{name}"] = params[name]
    return columns, extras


def _numeric_params(texts: list[str]) -> dict | None:
    """_params' columns where every value of every parameter is a number (or null), read
    by pyarrow's JSON reader: 100,000 trials in 0.03 s where json.loads took 0.08 s and
    the split per value 0.1 s more (benchmarks/scale.py). A number is a parameter
    whatever the spec says, so no value goes to the user attrs. None where a value is
    something else (a string, a list...), or too big for a double: _params' own way."""
    import io

    try:  # not a dependency of hpsearch (mlflow's extra brings it): without it, _params
        import pyarrow as pa
        import pyarrow.json
    except ImportError:
        return None

    try:
        table = pyarrow.json.read_json(io.BytesIO("\n".join(texts).encode()))
    except (pa.ArrowInvalid, TypeError):
        return None
    if len(table) != len(texts) or not all(pa.types.is_float64(t) or pa.types.is_int64(t)
                                           for t in table.schema.types):
        return None
    # an int64 column with nulls becomes float64 with NaN, as pandas makes [1, nan]
    return {("params", name): table[name].to_numpy(zero_copy_only=False)
            for name in table.column_names}


def _user_attrs(raw: RawRows, extras: list[dict], times: dict, objectives: list[str]
                ) -> dict:
    """{("user_attrs", key): a value per trial}: each other metric's last report, the
    param_<name> extras, then hpsearch's own (frozen_trial's, in its order of precedence)."""
    import numpy as np

    n = len(raw.trials)
    columns: dict[tuple[str, str], Any] = {}

    def put(key: str, values) -> None:
        columns[("user_attrs", key)] = values

    last = _other_metrics(raw, objectives)
    row_of = {trial: i for i, trial in enumerate(raw.values("id"))} if last else {}
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
    for key, name in ((TRIAL_ATTR, "id"), ("hpsearch_state", "state"),
                      ("hpsearch_attempts", "attempt"), ("hpsearch_job_id", "job_id"),
                      ("hpsearch_error", "error"), ("hpsearch_trial_dir", "trial_dir")):
        put(key, _ints(raw.values(name)) if name in ("id", "attempt") else raw.values(name))
    put("hpsearch_started", iso_many(times["started"]))
    put("hpsearch_finished", iso_many(times["finished"]))
    put("hpsearch_last_started", iso_many(raw.values("started")))
    ran = ~np.isnan(times["run"])
    put("hpsearch_run_seconds", times["run"] if ran.any() else [None] * n)
    if not np.isnan(times["startup"]).all():
        put("hpsearch_startup_s", times["startup"])
    return columns


def _other_metrics(raw: RawRows, objectives: list[str]
                   ) -> dict[str, dict[int, tuple[int, float]]]:
    """metric -> trial -> (step, value) of its last report, for the metrics that are not
    objectives; the objectives' rows (most of them) are passed over without a loop."""
    names = raw.values("name", table="metrics")
    if set(names) <= set(objectives):
        return {}
    last: dict[str, dict[int, tuple[int, float]]] = {}
    for trial, step, name, value in raw.column("trial", "step", "name", "value",
                                               table="metrics"):
        if name not in objectives:
            seen = last.setdefault(name, {})
            if trial not in seen or step >= seen[trial][0]:
                seen[trial] = (step, float("nan") if value is None else value)
    return last

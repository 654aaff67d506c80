"""Validate what a search is told before it samples: `search.enqueue` (points run first, as
Optuna's enqueue_trial) and `search.warm_start` (earlier experiments whose finished trials the
sampler learns from). `point_problem` also checks a point given to `hpsearch enqueue`.

    search:
      enqueue:
        - {lr: 0.001, optimizer: adam}      # a known-good point; parameters left out are sampled
      warm_start: [lr-sweep-v1]             # experiments in the same runs dir
"""

from __future__ import annotations

import difflib
import math
from typing import TYPE_CHECKING, Any

from hpsearch.spec.model import Param
from hpsearch.spec.names import NAME_RE
from hpsearch.spec.yamlpos import KeyPath

if TYPE_CHECKING:
    from hpsearch.spec.validate import _Validator


def point_problem(space: tuple[Param, ...], point: dict) -> tuple[str | None, str | None]:
    """(the key at fault, what is wrong) with a point for the search, or (None, None)."""
    tuned = {p.name: p for p in space if p.kind != "fixed"}
    if not point:
        return None, "expected at least one parameter"
    for key, value in point.items():
        param = tuned.get(key)
        if param is None:
            fixed = any(p.name == key for p in space)
            close = difflib.get_close_matches(str(key), list(tuned), n=1)
            return str(key), (f"'{key}' is a fixed parameter; only searched ones can be given"
                              if fixed else f"unknown parameter '{key}'" +
                              (f"; did you mean '{close[0]}'?" if close else
                               f"; expected one of: {', '.join(tuned)}"))
        problem = _value_problem(param, value)
        if problem:
            return str(key), problem
    return None, None


def _value_problem(p: Param, value: Any) -> str | None:
    if p.kind == "categorical":
        same = any(type(value) is type(c) and value == c for c in p.choices)
        return None if same else f"{value!r} is not one of the choices {list(p.choices)}"
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if p.kind == "int" and not (number and float(value).is_integer()):
        return f"expected an integer in [{p.low}, {p.high}]; got {value!r}"
    if not number or not math.isfinite(value) or not p.low <= value <= p.high:
        return f"expected a number in [{p.low}, {p.high}]; got {value!r}"
    return None


def enqueue(v: _Validator, value: Any, path: KeyPath, space: tuple[Param, ...],
            strategy: str) -> tuple[dict, ...]:
    if v.enumerates(strategy):
        others = ", ".join(s.name for s in v.vocabulary.strategies if not s.enumerates)
        raise v.fail(path, f"a grid runs every point of its space; enqueue is for the other "
                           f"strategies ({others})")
    v.typed(value, path, lambda x: isinstance(x, list), "a list of points (mappings of "
                                                       "parameter: value)")
    points = []
    for i, point in enumerate(value):
        v.typed(point, path + (i,), lambda x: isinstance(x, dict), "a mapping of parameter: "
                                                                   "value")
        key, problem = point_problem(space, point)
        if problem:
            raise v.fail(path + (i,) + ((key,) if key is not None else ()), problem)
        points.append(dict(point))
    return tuple(points)


def warm_start(v: _Validator, value: Any, path: KeyPath, strategy: str,
               name: str) -> tuple[str, ...]:
    if v.enumerates(strategy):
        raise v.fail(path, "a grid has no sampler to warm-start; use a sampler (tpe, gp, ...)")
    if isinstance(value, str):
        value = [value]
    v.typed(value, path, lambda x: isinstance(x, list) and x, "a list of experiment names")
    for i, other in enumerate(value):
        if not isinstance(other, str) or not NAME_RE.fullmatch(other):
            raise v.fail(path + (i,), f"expected an experiment name; got {other!r}")
        if other == name:
            raise v.fail(path + (i,), "an experiment cannot warm-start from itself")
    return tuple(dict.fromkeys(value))

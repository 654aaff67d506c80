"""Validate `search.max_failures` and `search.timeout`: when a search stops early.

    max_failures: {first: 5, fraction: 0.5}   # either key may be left out
    max_failures: false                       # never stop for failures

`first` (default 5, 0 turns it off): stop when this many trials have failed and none has
completed since the driver started. `fraction` (default none): stop when more than this share
of the finished trials failed, once at least `first` (5 if `first` is 0) have finished.

`timeout`: a time budget from the experiment's creation; past it no new trial is asked (those
running finish).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from hpsearch.spec.durations import parse_time_limit
from hpsearch.spec.model import MaxFailures, Pruner
from hpsearch.spec.yamlpos import KeyPath

if TYPE_CHECKING:
    from hpsearch.spec.validate import _Validator

KEYS = ("first", "fraction")


def max_failures(v: _Validator, value: Any, path: KeyPath) -> MaxFailures:
    if value is False:
        return MaxFailures(first=0, fraction=None)
    d = v.mapping(value, path, KEYS)
    first = v.optional(d, "first", path, lambda x, p: v.integer(x, p, 0), 5)
    fraction = v.optional(d, "fraction", path, lambda x, p: v.typed(
        x, p, lambda f: isinstance(f, (int, float)) and not isinstance(f, bool)
        and math.isfinite(f) and 0 <= f < 1, "a fraction of trials, 0 <= x < 1"), None)
    return MaxFailures(first=first, fraction=None if fraction is None else float(fraction))


def timeout(v: _Validator, value: Any, path: KeyPath) -> float:
    """`search.timeout`: seconds (a number), or a Slurm time limit ("2:00:00", "1-12")."""
    seconds: float | None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str):
        seconds = parse_time_limit(value)
    else:
        seconds = None
    if seconds is None or not math.isfinite(seconds) or seconds <= 0:
        raise v.fail(path, "expected a time budget: seconds (a number > 0) or a Slurm time "
                           f"such as \"2:00:00\" or \"1-12\"; got {value!r}")
    return seconds


def reproducible(v: _Validator, value: Any, path: KeyPath, seed: int | None,
                 pruner: Pruner) -> bool:
    """`search.reproducible`: needs a seed; not with a pruner, whose decisions depend on
    which trials reported first (hpsearch.search.ordered)."""
    v.typed(value, path, lambda x: isinstance(x, bool), "true or false")
    if value and seed is None:
        raise v.fail(path, "a reproducible search needs search.seed")
    if value and pruner.enabled:
        raise v.fail(path, "not with search.pruner: a pruner judges a trial against the "
                           "reports of the trials running beside it, which depend on timing")
    return value

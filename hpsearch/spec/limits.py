"""Validate `search.max_failures`: when a search whose trials keep failing stops.

    max_failures: {first: 5, fraction: 0.5}   # either key may be left out
    max_failures: false                       # never stop for failures

`first` (default 5, 0 turns it off): stop when this many trials have failed and none has
completed since the driver started. `fraction` (default none): stop when more than this share
of the finished trials failed, once at least `first` (5 if `first` is 0) have finished.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from hpsearch.spec import model as m
from hpsearch.spec.yamlpos import KeyPath

if TYPE_CHECKING:
    from hpsearch.spec.validate import _Validator

KEYS = ("first", "fraction")


def max_failures(v: _Validator, value: Any, path: KeyPath) -> m.MaxFailures:
    if value is False:
        return m.MaxFailures(first=0, fraction=None)
    d = v.mapping(value, path, KEYS)
    first = v.optional(d, "first", path, lambda x, p: v.integer(x, p, 0), 5)
    fraction = v.optional(d, "fraction", path, lambda x, p: v.typed(
        x, p, lambda f: isinstance(f, (int, float)) and not isinstance(f, bool)
        and math.isfinite(f) and 0 <= f < 1, "a fraction of trials, 0 <= x < 1"), None)
    return m.MaxFailures(first=first, fraction=None if fraction is None else float(fraction))

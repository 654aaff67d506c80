"""Validate per-trial resources: a field of `resources` written as "{name}" takes each
trial's value of the searched parameter `name` (docs/spec.md#per-trial-resources).

    resources: {nodes: "{nodes}", gpus_per_node: "{gpus}", time: "{limit}"}
    search:
      space:
        nodes: {choices: [1, 2, 4]}
        gpus: {type: int, low: 1, high: 2}
        limit: {choices: ["00:30:00", "01:00:00"]}

Every value the parameter can take must be a valid setting of the field, checked by the
field's own rule (an int range at both ends: the rules are bounds); a bad one is named at
its place in search.space. The field itself then holds the largest value (Resources).
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hpsearch.errors import BadInput, shown
from hpsearch.spec import checks
from hpsearch.spec.model import PER_TRIAL_FIELDS, Param, memory_mb
from hpsearch.spec.yamlpos import KeyPath

if TYPE_CHECKING:
    from hpsearch.spec.validate import _Validator

REFERENCE_RE = re.compile(r"^\{([A-Za-z_][A-Za-z0-9_]*)\}$")


def per_trial(v: _Validator, d: dict, path: KeyPath, space: tuple[Param, ...],
              field_check: Callable[[str], Callable[[Any, KeyPath], Any]]
              ) -> tuple[dict[str, Any], tuple[tuple[str, str], ...]]:
    """({field: the largest value its parameter takes}, ((field, parameter), ...)) for the
    fields of `d` (resources as written) that name a parameter; or one BadInput."""
    largest: dict[str, Any] = {}
    named: list[tuple[str, str]] = []
    params = {p.name: p for p in space}
    for key, written in d.items():
        found = REFERENCE_RE.fullmatch(written) if isinstance(written, str) else None
        if found is None:
            if isinstance(written, str) and "{" in written and key in PER_TRIAL_FIELDS:
                raise v.fail(path + (key,), f"expected a value, or exactly \"{{name}}\" naming "
                                            f"a parameter of search.space; got "
                                            f"{shown(written)}")
            continue
        name = found.group(1)
        kpath = path + (key,)
        if key not in PER_TRIAL_FIELDS:
            raise v.fail(kpath, f"{key} cannot take a parameter's value; per-trial values "
                                f"are for {', '.join(PER_TRIAL_FIELDS)}")
        param = params.get(name)
        if param is None:
            close = difflib.get_close_matches(name, list(params), n=1)
            raise v.fail(kpath, f"\"{{{name}}}\" names no parameter in search.space" +
                                (f"; did you mean {{{close[0]}}}?" if close else ""))
        if param.when is not None:
            raise v.fail(kpath, f"parameter '{name}' exists only in some trials (when: "
                                f"{param.when.parent}); a trial's {key} needs a parameter "
                                "every trial has")
        if param.kind == "float":
            raise v.fail(kpath, f"parameter '{name}' is a float range; {key} takes an int "
                                "range, choices or a fixed value")
        check = field_check(key)
        values = [_checked(v, check, value, vpath, key, name)
                  for value, vpath in _values(v, param, ("search", "space", name))]
        largest[key] = max(values, key=lambda value: _magnitude(key, value))
        named.append((key, name))
    return largest, tuple(named)


def _values(v: _Validator, p: Param, ppath: KeyPath) -> list[tuple[Any, KeyPath]]:
    """Every value the parameter takes that the field's rule must pass, with its key path:
    each choice, the fixed value, or an int range's two ends."""
    if p.kind == "categorical":
        return [(c, ppath + ("choices", i)) for i, c in enumerate(p.choices)]
    if p.kind == "fixed":
        vpath = ppath + ("value",)
        return [(p.value, vpath if vpath in v.lines else ppath)]
    return [(p.low, ppath + ("low",)), (p.high, ppath + ("high",))]


def _checked(v: _Validator, check: Callable[[Any, KeyPath], Any], value: Any, vpath: KeyPath,
             key: str, name: str) -> Any:
    """The value as the field takes it, or the field's own error at the value's place,
    saying which resource the parameter sizes."""
    try:
        return check(value, vpath)
    except BadInput as exc:
        raise BadInput(f"{exc.detail} (resources.{key} is \"{{{name}}}\": every value of "
                       f"'{name}' must be a valid {key})", exc.file, exc.line,
                       exc.key) from None


def _magnitude(key: str, value: Any) -> float:
    """How large a checked value of `key` is: a count, seconds of a time, megabytes."""
    if key == "time":
        return checks.time_limit_seconds(value) or math.inf
    if key == "mem":
        return memory_mb(value)
    return float(value)

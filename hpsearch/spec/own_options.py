"""A piece's own settings (spec/vocabulary.py Option): a strategy's under `search:`, an
executor's under `executor:`. Each is checked as its registry entry declares it, defaults
filled in; one that belongs to another piece of the seam is named as such, not as an unknown
key; a required one missing is named with its piece."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from hpsearch.errors import shown
from hpsearch.spec.problems import FAILED
from hpsearch.spec.vocabulary import Option
from hpsearch.spec.yamlpos import KeyPath

if TYPE_CHECKING:
    from hpsearch.spec.model import Param
    from hpsearch.spec.validate import _Validator


def options(v: _Validator, d: dict, path: KeyPath, seam: str, name: str,
            pieces: Sequence[tuple[str, tuple[Option, ...]]],
            space: tuple[Param, ...] | Any = FAILED) -> tuple[tuple[str, Any], ...]:
    """(name, value) of each option of the piece `name` (a `seam`: "strategy", "executor"),
    as given in `d` or by default. `pieces`: (name, options) of every piece of the seam.
    `space`: the checked space (FAILED where it had a problem or there is none: names in it
    are not checked then)."""
    own = dict(pieces)[name]
    mine = {o.name for o in own}
    for key in d:
        owners = [n for n, opts in pieces if any(o.name == key for o in opts)]
        if owners and key not in mine:
            v.problems.note(v.fail(path + (key,), f"'{key}' is a setting of {seam} "
                                                  f"{' or '.join(owners)}, not of {name}"))
    out = []
    for o in own:
        if o.required and d.get(o.name) is None:
            v.problems.note(v.fail(path, f"missing required key '{o.name}' for {seam} "
                                         f"{name} ({o.doc})"))
            v.problems.skip(path + (o.name,))
        out.append((o.name, v.optional(d, o.name, path,
                                       lambda x, p, o=o: _value(v, o, x, p, space), o.default)))
    return tuple(out)


def _value(v: _Validator, option: Option, value: Any, path: KeyPath, space: Any) -> Any:
    if option.kind == "int":
        number = v.integer(value, path, int(option.low))
        if option.high is not None and number > option.high:
            raise v.fail(path, f"expected an integer from {option.low:g} to {option.high:g}; "
                               f"got {number}")
        return number
    if option.kind == "float":
        return _number(v, option, value, path)
    if option.kind == "floats":
        v.typed(value, path, lambda x: isinstance(x, list) and x, "a non-empty list of numbers")
        return tuple(_number(v, option, x, path + (i,)) for i, x in enumerate(value))
    if option.kind == "names":
        names = v.strings(value, path)
        searched = () if space is FAILED else tuple(p.name for p in space if p.kind != "fixed")
        for i, name in enumerate(names):
            if space is not FAILED and name not in searched:
                raise v.fail(path + (i,), f"expected a searched parameter of search.space "
                                          f"({', '.join(searched)}); got {shown(name)}")
        return names
    if option.kind == "schedule":
        return _schedule(v, value, path, space)
    if value not in option.choices:
        raise v.fail(path, f"expected one of {', '.join(map(str, option.choices))}; "
                           f"got {shown(value)}")
    return value


def _number(v: _Validator, option: Option, value: Any, path: KeyPath) -> float:
    """A finite number in the option's range: low <= x (low < x unless `closed`, and always
    for floats), x <= high where high is set."""
    lowest = ">=" if option.closed and option.kind == "float" else ">"
    bound = f"a number {lowest} {option.low:g}" + \
        (f" and <= {option.high:g}" if option.high is not None else "")
    v.typed(value, path, lambda x: isinstance(x, (int, float)) and not isinstance(x, bool)
            and math.isfinite(x), bound)
    x = float(value)
    if (x < option.low if lowest == ">=" else x <= option.low) or \
            (option.high is not None and x > option.high):
        raise v.fail(path, f"expected {bound}; got {shown(value)}")
    return x


def _schedule(v: _Validator, value: Any, path: KeyPath, space: Any) -> tuple[dict, ...]:
    """[{from_step, params}, ...]: the first from step 0, each later one further on, the
    parameters named in the space."""
    v.typed(value, path, lambda x: isinstance(x, list) and x,
            "a non-empty list of {from_step, params}")
    names = () if space is FAILED else tuple(p.name for p in space)
    out: list[dict] = []
    for i, item in enumerate(value):
        d = v.mapping(item, path + (i,), ("from_step", "params"))
        v.require(d, path + (i,), ("from_step", "params"))
        step = v.integer(d.get("from_step", 0), path + (i, "from_step"), 0)
        bad = step != 0 if not out else step <= out[-1]["from_step"]
        if bad:
            raise v.fail(path + (i, "from_step"), "expected 0 for the first piece"
                         if not out else f"expected a step after {out[-1]['from_step']}")
        params = v.plain(v.typed(d.get("params", {}), path + (i, "params"),
                                 lambda x: isinstance(x, dict),
                                 "a mapping of parameter: value"), path + (i, "params"))
        for name in params:
            if space is not FAILED and name not in names:
                raise v.fail(path + (i, "params", name), f"expected a parameter of "
                                                         f"search.space ({', '.join(names)})")
        out.append({"from_step": step, "params": dict(params)})
    return tuple(out)

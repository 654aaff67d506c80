"""Validate `search.space`: each parameter's kind and range, and conditions between them.

A parameter with `when: {parent: value}` (or `{parent: [values]}`) is conditional: it exists
in a trial only where `parent`, a categorical parameter defined earlier in the space, exists
and has one of those values, as Optuna's define-by-run users write `if optimizer == "sgd":
trial.suggest_float("momentum", ...)`. Parents come first, so the space is a tree walked in
spec order, and a cycle cannot be written (one is named as such when tried).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
from typing import TYPE_CHECKING, Any

from hpsearch.errors import shown
from hpsearch.spec.model import Condition, Param, same_value
from hpsearch.spec.problems import FAILED
from hpsearch.spec.yamlpos import KeyPath
from hpsearch.template import BUILTIN_PLACEHOLDERS, placeholders

if TYPE_CHECKING:
    from hpsearch.spec.validate import _Validator

PARAM_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
PARAM_KEYS = ("type", "low", "high", "log", "step", "choices", "value", "when")
PARAM_TYPES = ("float", "int", "categorical", "fixed")
_WHEN_EXPECTED = ("expected a mapping of one categorical parameter defined earlier to one of "
                  "its choices or a list of them, such as {optimizer: sgd}")


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def space(v: _Validator, value: Any, path: KeyPath, strategy: str) -> tuple[Param, ...]:
    """The parameters of `search.space`, in spec order, each checked on its own: those
    without a problem (v.problems says which failed)."""
    v.typed(value, path, lambda x: isinstance(x, dict) and x,
            "a non-empty mapping of parameter name to its range")
    params: list[Param] = []
    for name, spec in value.items():
        ppath = path + (name,)
        when = spec.get("when") if isinstance(spec, dict) else None
        if isinstance(when, dict) and len(when) == 1 and v.problems.broken(
                path + (next(iter(when)),)):
            v.problems.skip(ppath)  # its condition names a parameter that had a problem
            continue
        param = v.problems.recover(ppath, _one, v, name, spec, ppath, strategy, params, value)
        if param is not FAILED:
            params.append(param)
    return tuple(params)


def _one(v: _Validator, name: Any, spec: Any, ppath: KeyPath, strategy: str,
         earlier: list[Param], raw: dict) -> Param:
    if not isinstance(name, str) or not PARAM_RE.fullmatch(name):
        raise v.fail(ppath, "expected a parameter name made of letters, digits and "
                            f"'_' (it is used as {{name}} in command); got "
                            f"{shown(name)}")
    if name in BUILTIN_PLACEHOLDERS:
        raise v.fail(ppath, f"'{name}' is reserved for hpsearch's own placeholder "
                            f"{{{name}}}; choose another name")
    param = _param(v, name, spec, ppath, strategy)
    if isinstance(spec, dict) and spec.get("when") is not None:
        when = _condition(v, spec["when"], ppath + ("when",), name, earlier, raw)
        param = dataclasses.replace(param, when=when)
    return param


def _condition(v: _Validator, value: Any, path: KeyPath, name: str, earlier: list[Param],
               raw: dict) -> Condition:
    """`when` of parameter `name`, checked against the parameters before it (`earlier`) and
    the whole space as written (`raw`, to name a later parameter or a cycle)."""
    if not isinstance(value, dict) or not value:
        raise v.fail(path, f"{_WHEN_EXPECTED}; got {shown(value)}")
    if len(value) > 1:
        raise v.fail(path, f"expected one condition; got {len(value)} "
                           f"({', '.join(map(str, value))}): make one of them conditional on "
                           "the other instead (nesting)")
    (parent, wanted), = value.items()
    ppath = path + (parent,)
    before = {p.name: p for p in earlier}
    if parent == name:
        raise v.fail(ppath, f"'{name}' cannot depend on itself; {_WHEN_EXPECTED}")
    if parent not in before:
        if parent in raw:
            cycle = _cycle(raw, parent, name)
            why = (f"a cycle: {' -> '.join(cycle)}" if cycle else
                   f"'{parent}' is defined after '{name}'")
            raise v.fail(ppath, f"{why}; a condition names a parameter defined earlier in "
                                "search.space (move it above)")
        close = difflib.get_close_matches(str(parent), list(before), n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise v.fail(ppath, f"'{parent}' names no parameter in search.space{hint}")
    gate = before[parent]
    if gate.kind != "categorical":
        raise v.fail(ppath, f"'{parent}' is a {gate.kind} parameter; a condition names a "
                            "categorical one (with choices)")
    listed = wanted if isinstance(wanted, list) else [wanted]
    if not listed:
        raise v.fail(ppath, f"expected at least one of {parent}'s choices; got an empty list")
    values: list[Any] = []
    for i, item in enumerate(listed):
        match = [c for c in gate.choices if same_value(c, item)]
        if not match:
            where = ppath + (i,) if isinstance(wanted, list) else ppath
            choices = ", ".join(map(_yaml, gate.choices))
            raise v.fail(where, f"{_yaml(item)} is not one of {parent}'s choices ({choices})")
        if not any(same_value(match[0], seen) for seen in values):
            values.append(match[0])
    return Condition(parent, tuple(values))


def _yaml(value: Any) -> str:
    """A choice as YAML reads it: true, null, 'sgd', 0.5 (a number is not its string)."""
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    return shown(value) if isinstance(value, str) else repr(value)


def _cycle(raw: dict, start: str, target: str) -> list[str] | None:
    """[target, ..., target] if following `when` from `start` in the space as written comes
    back to `target`; else None."""
    path, seen, name = [target, start], {start}, start
    while True:
        spec = raw.get(name)
        when = spec.get("when") if isinstance(spec, dict) else None
        if not isinstance(when, dict) or len(when) != 1:
            return None
        name = next(iter(when))
        path.append(name)
        if name == target:
            return path
        if name in seen or name not in raw:
            return None
        seen.add(name)


def _param(v: _Validator, name: str, spec: Any, path: KeyPath, strategy: str) -> Param:
    if isinstance(spec, list):
        raise v.fail(path, "a list is ambiguous: write {choices: [...]} to search over "
                           "it, or {value: [...]} to fix it")
    if not isinstance(spec, dict):
        return Param(name, "fixed", value=v.plain(spec, path))
    d = v.mapping(spec, path, PARAM_KEYS)
    kind = d.get("type")
    if kind is None:
        kind = ("categorical" if "choices" in d else "fixed" if "value" in d else
                "int" if is_int(d.get("low")) and is_int(d.get("high")) and
                is_int(d.get("step", 1)) and not d.get("log") else "float")
    elif kind not in PARAM_TYPES:
        raise v.fail(path + ("type",), f"unknown parameter type {shown(kind)}; "
                                       f"expected one of {', '.join(PARAM_TYPES)}")
    allowed = {"fixed": ("type", "value", "when"), "categorical": ("type", "choices", "when"),
               "float": ("type", "low", "high", "log", "step", "when"),
               "int": ("type", "low", "high", "log", "step", "when")}[kind]
    for key in d:
        if key not in allowed:
            raise v.fail(path + (key,), f"'{key}' does not apply to a {kind} parameter; "
                                        f"expected only {', '.join(allowed)}")
    if kind == "fixed":
        if "value" not in d:
            raise v.fail(path, "missing required key 'value'")
        return Param(name, "fixed", value=v.plain(d["value"], path + ("value",)))
    if kind == "categorical":
        choices = d.get("choices")
        v.typed(choices, path + ("choices",), lambda x: isinstance(x, list),
                "a list of choices")
        if not choices:
            raise v.fail(path + ("choices",), "expected at least one choice; got an "
                                              "empty list")
        for i, c in enumerate(choices):
            v.typed(c, path + ("choices", i), lambda x: x is None or
                    isinstance(x, (str, int, float, bool)), "a string, number or bool")
            v.plain(c, path + ("choices", i))
        if len(set(map(repr, choices))) != len(choices):
            raise v.fail(path + ("choices",), "duplicate choices; each may appear once")
        return Param(name, "categorical", choices=tuple(choices))
    return _numeric(v, name, kind, d, path, strategy)


def _numeric(v: _Validator, name: str, kind: str, d: dict, path: KeyPath,
             strategy: str) -> Param:
    check = is_int if kind == "int" else is_number
    what = "an integer" if kind == "int" else "a number"
    for key in ("low", "high"):
        if key not in d:
            raise v.fail(path, f"missing required key '{key}' for a {kind} parameter")
        if isinstance(d[key], float) and not math.isfinite(d[key]):
            raise v.fail(path + (key,), f"expected a finite number; got {d[key]}")
        v.typed(d[key], path + (key,), check, what)
    low, high = d["low"], d["high"]
    if low >= high:
        raise v.fail(path + ("low",), f"expected low < high; got low={low}, high={high}")
    log = v.optional(d, "log", path, lambda x, p: v.typed(
        x, p, lambda y: isinstance(y, bool), "true or false"), False)
    if log and low <= 0:
        raise v.fail(path + ("low",), f"a log scale needs low > 0; got low={low}")
    step = v.optional(d, "step", path, lambda x, p: v.typed(x, p, check, what), None)
    if step is not None:
        if step <= 0:
            raise v.fail(path + ("step",), f"expected step > 0; got {step}")
        if log:
            raise v.fail(path + ("step",), "step and log cannot be combined "
                                           "(Optuna samples log scales without a step)")
        span = (high - low) / step
        if abs(span - round(span)) > 1e-9:
            raise v.fail(path + ("step",), f"expected a step that divides high - low "
                                           f"({high} - {low}); got {step}")
    if v.enumerates(strategy):
        if kind == "float" and d.get("step") is None:  # (a bad step is reported already)
            raise v.fail(path, "a grid search needs a finite set: give this float "
                               "range a 'step', or use 'choices'")
        if log:
            raise v.fail(path + ("log",), "a grid search cannot enumerate a log range; "
                                          "list the values with 'choices'")
        if kind == "int" and step is None:
            step = 1
    return Param(name, kind, low=low, high=high, log=log, step=step)


def template_problem(command: str, params: tuple[Param, ...]) -> tuple[KeyPath, str] | None:
    """(key path, problem) if the command cannot pass a conditional parameter; else None.

    A conditional parameter is absent from the trials where its condition does not hold, so
    it has no `{name}` placeholder (an empty argument would reach the program as a value);
    it reaches the trial through `{params}`, `$HPSEARCH_PARAMS`, params.json and
    `hpsearch.trial.params()`, where it is simply absent when inactive."""
    used = placeholders(command)
    for p in params:
        if p.when is None:
            continue
        condition = f"when {p.when.parent}: " + (
            _yaml(p.when.values[0]) if len(p.when.values) == 1 else
            "[" + ", ".join(map(_yaml, p.when.values)) + "]")
        if p.name in used:
            return ("command",), (
                f"placeholder {{{p.name}}} names a conditional parameter ({condition}), "
                "absent from the trials where that does not hold; pass it with {params} "
                "(the trial's active parameters as one JSON argument; also in "
                "$HPSEARCH_PARAMS and params.json) instead")
        if "params" not in used:
            return ("search", "space", p.name), (
                f"conditional parameter '{p.name}' ({condition}) never reaches the command; "
                "add {params} to it (the trial's active parameters as one JSON argument; "
                "a conditional parameter has no {name} placeholder)")
    return None

"""Validate `search.pruner`: which Optuna pruner stops trials early, with its options.

Each option is checked here, with the file, line and key of a bad one, so that building the
Optuna pruner (hpsearch.pruning) never fails at run time. Options and defaults are Optuna's,
except where a default would make a resumed search decide differently: `min_resource` of
successive_halving and hyperband defaults to 1 step (Optuna's 'auto' takes it from the first
finished trial, which a resumed driver cannot know), and hyperband needs `max_resource`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hpsearch.spec.model import PROMOTING, PRUNER_ALIASES, PRUNER_MODES, PRUNERS, Pruner
from hpsearch.spec.names import choose
from hpsearch.spec.yamlpos import KeyPath

if TYPE_CHECKING:
    from hpsearch.spec.validate import _Validator

_STEPS = ("n_startup_trials", "n_warmup_steps", "interval_steps", "n_min_trials")
# type -> {option: (kind, default)}; kind: count (int >= 0), positive (int >= 1), eta
# (int >= 2), number (finite), fraction (0 < x <= 1), percent (0 < x < 100), or required-*
OPTIONS: dict[str, dict[str, tuple[str, Any]]] = {
    "none": {},
    "median": {"n_startup_trials": ("count", 5), "n_warmup_steps": ("count", 0),
               "interval_steps": ("positive", 1), "n_min_trials": ("positive", 1)},
    "percentile": {"percentile": ("required-percent", None), "n_startup_trials": ("count", 5),
                   "n_warmup_steps": ("count", 0), "interval_steps": ("positive", 1),
                   "n_min_trials": ("positive", 1)},
    "successive_halving": {"min_resource": ("positive", 1), "reduction_factor": ("eta", 4),
                           "min_early_stopping_rate": ("count", 0),
                           "bootstrap_count": ("count", 0)},
    "hyperband": {"min_resource": ("positive", 1), "max_resource": ("required-positive", None),
                  "reduction_factor": ("eta", 3), "bootstrap_count": ("count", 0)},
    "wilcoxon": {"p_threshold": ("fraction", 0.1), "n_startup_steps": ("count", 2)},
    "patient": {"patience": ("required-count", None), "min_delta": ("nonnegative", 0.0),
                "wrapped": ("pruner", None)},
    "threshold": {"lower": ("number", None), "upper": ("number", None),
                  "n_warmup_steps": ("count", 0), "interval_steps": ("positive", 1)},
}
assert set(OPTIONS) == set(PRUNERS)
TYPES = PRUNERS + tuple(PRUNER_ALIASES)


def pruner(v: _Validator, value: Any, path: KeyPath, objectives: int) -> Pruner:
    """`search.pruner`: a type name, or a mapping with `type` and that pruner's options."""
    if isinstance(value, str):
        value = {"type": value}
    v.typed(value, path, lambda x: isinstance(x, dict), "a pruner type or a mapping with "
                                                       "'type' and its options")
    kind = choose(v, value.get("type", "none"), path + ("type",), TYPES, "pruner")
    kind = PRUNER_ALIASES.get(kind, kind)
    if "mode" in value and kind not in PROMOTING:
        raise v.fail(path + ("mode",), f"the {kind} pruner only stops trials; mode: promotion "
                                       "is for successive_halving (asha) and hyperband")
    promoting = ("mode", "max_resource") if kind == "successive_halving" else ("mode",)
    d = v.mapping(value, path, ("type",) + tuple(OPTIONS[kind])
                  + (promoting if kind in PROMOTING else ()))
    mode = v.choice(d.get("mode", "stop"), path + ("mode",), PRUNER_MODES, "pruner mode")
    max_resource = None
    if kind == "successive_halving" and (mode == "promotion" or "max_resource" in d):
        if mode != "promotion":
            raise v.fail(path + ("max_resource",), "max_resource is for mode: promotion "
                                                   "(the steps of a full trial)")
        if "max_resource" not in d:
            raise v.fail(path, "missing required key 'max_resource' for mode: promotion (the "
                               "most steps a trial reports, e.g. its epochs)")
        max_resource = v.integer(d["max_resource"], path + ("max_resource",), 1)
    if kind != "none" and objectives > 1:
        raise v.fail(path + ("type",), "early stopping judges one objective (Optuna's pruners "
                                       "do not support several); remove search.pruner or "
                                       "keep one objective")
    options, wrapped = [], None
    for key, (check, _default) in OPTIONS[kind].items():
        if key not in d or d[key] is None:
            if check.startswith("required"):
                raise v.fail(path, f"missing required key '{key}' for the {kind} pruner"
                             + (" (the most steps a trial reports, e.g. its epochs)"
                                if key == "max_resource" else ""))
            continue
        if check == "pruner":
            wrapped = pruner(v, d[key], path + (key,), objectives)
            if wrapped.type in ("patient", "none"):
                raise v.fail(path + (key, "type"), "expected a pruner to make patient (median, "
                                                   "successive_halving, ...); got "
                                                   f"{wrapped.type}")
            continue
        options.append((key, _CHECKS[check.removeprefix("required-")](v, d[key],
                                                                        path + (key,))))
    given = dict(options)
    if kind == "hyperband" and mode == "promotion":
        max_resource = given["max_resource"]
    if max_resource is not None:
        given["max_resource"] = max_resource
    _relations(v, kind, given, path)
    return Pruner(type=kind, options=tuple(options), wrapped=wrapped, mode=mode,
                    max_resource=max_resource)


def _relations(v: _Validator, kind: str, given: dict, path: KeyPath) -> None:
    if "max_resource" in given and given["max_resource"] <= given.get("min_resource", 1):
        raise v.fail(path + ("max_resource",), "expected max_resource above min_resource "
                                               f"({given.get('min_resource', 1)}); got "
                                               f"{given['max_resource']}")
    if kind == "threshold":
        if "lower" not in given and "upper" not in given:
            raise v.fail(path, "the threshold pruner needs 'lower', 'upper' or both")
        if given.get("lower", -math.inf) > given.get("upper", math.inf):
            raise v.fail(path + ("lower",), f"expected lower ({given['lower']}) at most upper "
                                            f"({given['upper']})")


def _number(v: _Validator, value: Any, path: KeyPath, ok: Callable[[float], bool],
            expected: str) -> float:
    v.typed(value, path, lambda x: isinstance(x, (int, float)) and not isinstance(x, bool)
            and math.isfinite(x) and ok(x), expected)
    return float(value)


_CHECKS: dict[str, Callable[[_Validator, Any, KeyPath], Any]] = {
    "count": lambda v, x, p: v.integer(x, p, 0),
    "positive": lambda v, x, p: v.integer(x, p, 1),
    "eta": lambda v, x, p: v.integer(x, p, 2),
    "number": lambda v, x, p: _number(v, x, p, lambda y: True, "a number"),
    "nonnegative": lambda v, x, p: _number(v, x, p, lambda y: y >= 0, "a number >= 0"),
    "fraction": lambda v, x, p: _number(v, x, p, lambda y: 0 < y <= 1,
                                        "a number above 0 and at most 1"),
    "percent": lambda v, x, p: _number(v, x, p, lambda y: 0 < y < 100,
                                       "a percentile above 0 and below 100"),
}

"""Names a spec picks from a fixed list: `search.strategy` and `search.pruner`'s type.

Case does not matter: Optuna and its papers write these names in capitals (TPE, GP, CMA-ES,
QMC, NSGA-II), so `strategy: TPE` is `tpe`, as an Optuna user means it; nothing else could be
meant. Any other spelling is refused with the valid names and the closest one, found among
the names, the same without '-', '_' or case (`NSGA-II`, `cma-es`), and Optuna's class names
(`TPESampler`, `MedianPruner`).
"""

from __future__ import annotations

import difflib
import re
from typing import TYPE_CHECKING, Any

from hpsearch.errors import shown

if TYPE_CHECKING:
    from hpsearch.spec.validate import _Validator
    from hpsearch.spec.yamlpos import KeyPath

# Optuna's class for each pruner (optuna.pruners); the samplers' come from the strategies'
# registry (StrategyFacts.optuna_class), passed to choose().
OPTUNA_CLASSES = {
    "NopPruner": "none", "MedianPruner": "median", "PercentilePruner": "percentile",
    "SuccessiveHalvingPruner": "successive_halving", "HyperbandPruner": "hyperband",
    "WilcoxonPruner": "wilcoxon", "PatientPruner": "patient", "ThresholdPruner": "threshold",
}


# An experiment's name: it names its folder under the runs dir (hpsearch.store.runs).
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def choose(v: _Validator, value: Any, path: KeyPath, allowed: tuple[str, ...],
           what: str, classes: dict[str, str] | None = None) -> str:
    """The name in `allowed` that `value` is, ignoring case; else BadInput at `path` with
    the valid names and, if one is close, `did you mean` (`classes`: Optuna's class name ->
    name, beside OPTUNA_CLASSES)."""
    if isinstance(value, str) and value.lower() in allowed:
        return value.lower()
    close = closest(str(value), allowed, classes)
    hint = f"; did you mean '{close[0]}'{close[1]}?" if close else ""
    raise v.fail(path, f"unknown {what} {shown(value)}; expected one of "
                       f"{', '.join(allowed)}{hint}")


def closest(value: str, allowed: tuple[str, ...],
            classes: dict[str, str] | None = None) -> tuple[str, str] | None:
    """(the allowed name closest to `value`, ' (Optuna's X)' where it was found as Optuna's
    class X, else ''), or None if none is close."""
    candidates: dict[str, tuple[str, str]] = {}
    for cls, name in {**OPTUNA_CLASSES, **(classes or {})}.items():
        if name in allowed:
            candidates[_plain(re.sub(r"(Sampler|Pruner)$", "", cls))] = (name, "")
            candidates[_plain(cls)] = (name, f" (Optuna's {cls})")
    for name in allowed:  # over a class name of the same letters (GPSampler, gp)
        candidates[_plain(name)] = (name, "")
    plain = _plain(value)
    if plain in candidates:
        return candidates[plain]
    found = difflib.get_close_matches(plain, list(candidates), n=1)
    return candidates[found[0]] if found else None


def _plain(name: str) -> str:
    """`name` in lower case without anything but letters and digits: NSGA-II is nsgaii."""
    return re.sub(r"[^a-z0-9]", "", name.lower())

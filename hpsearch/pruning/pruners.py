"""Build the Optuna pruner a spec names (search.pruner, validated by hpsearch.spec.pruner)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from hpsearch.spec.pruner import OPTIONS

if TYPE_CHECKING:
    from optuna.pruners import BasePruner

    from hpsearch.spec.model import Pruner

_CLASSES = {"none": "NopPruner", "median": "MedianPruner", "percentile": "PercentilePruner",
            "successive_halving": "SuccessiveHalvingPruner", "hyperband": "HyperbandPruner",
            "wilcoxon": "WilcoxonPruner", "patient": "PatientPruner",
            "threshold": "ThresholdPruner"}


def build(spec: Pruner) -> BasePruner:
    """The Optuna pruner for `spec`, with the options as written (defaults are Optuna's,
    except those hpsearch.spec.pruner names)."""
    import optuna.pruners

    options = dict(spec.options)
    if spec.type in ("successive_halving", "hyperband"):
        options.setdefault("min_resource", 1)
    if spec.type == "patient":
        options["wrapped_pruner"] = build(spec.wrapped) if spec.wrapped else None
    return getattr(optuna.pruners, _CLASSES[spec.type])(**options)


def describe(spec: Pruner) -> str:
    """The pruner as one line, e.g. 'successive_halving(min_resource=1, reduction_factor=3)'."""
    options = [f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in spec.options]
    if spec.wrapped is not None:
        options.append(f"wrapped={describe(spec.wrapped)}")
    return f"{spec.type}({', '.join(options)})"


def _rungs(spec: Pruner, step: int, attrs: Mapping[str, Any]) -> int:
    # Optuna's successive halving judges a trial only once its step reaches its next rung's
    # promotion step, min_resource x reduction_factor ** (min_early_stopping_rate + rung),
    # its rung being how many completed_rung_N attrs it has. Hyperband's brackets are
    # successive halving with a rate of at least 0: the rate-0 step is a lower bound.
    rung = 0
    while f"completed_rung_{rung}" in attrs:
        rung += 1
    rate = _option(spec, "min_early_stopping_rate") or 0  # hyperband has none
    return max(step + 1, _option(spec, "min_resource")
               * _option(spec, "reduction_factor") ** (rate + rung))


def _warmup(spec: Pruner, step: int, attrs: Mapping[str, Any]) -> int:
    # median, percentile and threshold judge no step below n_warmup_steps
    return max(step + 1, _option(spec, "n_warmup_steps"))


def _option(spec: Pruner, name: str) -> Any:
    """The option as written, else its default (hpsearch.spec.pruner.OPTIONS)."""
    return spec.option(name, OPTIONS[spec.type].get(name, (None, None))[1])


# How far a pruner's rule lets a running trial go unjudged; a pruner not named here may stop
# a trial at any step.
_QUIET: dict[str, Callable[[Pruner, int, Mapping[str, Any]], int]] = {
    "successive_halving": _rungs, "hyperband": _rungs,
    "median": _warmup, "percentile": _warmup, "threshold": _warmup}


def first_stop_step(spec: Pruner, step: int, attrs: Mapping[str, Any]) -> int:
    """The first step, after `step` (judged, the trial goes on), at which `spec`'s pruner may
    stop a trial whose pruner attrs are `attrs`: on a report of an earlier step it cannot
    (trial.should_stop() need not wait for the verdict then)."""
    rule = _QUIET.get(spec.type)
    return rule(spec, step, attrs) if rule else step + 1

"""Build the Optuna pruner a spec names (search.pruner, validated by hpsearch.spec.pruner)."""

from __future__ import annotations

from typing import TYPE_CHECKING

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

"""Early stopping: which running trials stop before their end (docs/early-stopping.md).

The driver feeds each trial's intermediate reports of the objective to an EarlyStopping
policy, which asks one of Optuna's pruners (hpsearch.pruning.pruners builds it from the spec)
and answers stop or go on. The policy keeps an in-memory Optuna study that the driver rebuilds
from the store on every start, so a resumed search decides as the uninterrupted one would.
"""

from __future__ import annotations

from hpsearch.pruning.policy import EarlyStopping, StopDecision

__all__ = ["EarlyStopping", "StopDecision"]

"""Early stopping and promotion: which running trials stop before their end, and which paused
trials go on (docs/early-stopping.md). The driver asks these through two small objects kept
out of its loop; neither sees more of the spec than `search.pruner`.

- early stopping: stopper (the Stopper) feeds each trial's intermediate reports of the
  objective to the EarlyStopping policy (policy.py), which asks one of Optuna's pruners
  (pruners.py builds it from the spec) and answers stop or go on. The policy keeps an
  in-memory Optuna study that the driver rebuilds from the store on every start, so a
  resumed search decides as the uninterrupted one would.
- promotion (`search.pruner.mode: promotion`): promoter (the Promoter) over promotion.py's
  rung-level policy: a trial runs in segments, pauses at a rung with a checkpoint, and is
  promoted to the next rung when it ranks high enough there.
- finishing: `hpsearch finish`, which paused trials of a promotion search to train to
  max_resource.
"""

from __future__ import annotations

from hpsearch.pruning.policy import EarlyStopping, StopDecision

__all__ = ["EarlyStopping", "StopDecision"]

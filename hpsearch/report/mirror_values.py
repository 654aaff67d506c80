"""What the mirrors (`hpsearch tensorboard`, `hpsearch mlflow`) log for each trial beside the
metrics it reported, so that accuracy against cost can be plotted where ML people look
(docs/tensorboard-mlflow.md). The same numbers as `hpsearch export`, from the same code:

  <objective>          an objective the trial does not report itself (a cost objective such
                       as gpu_hours): its value as the sampler and `best` saw it
  node_hours, gpu_hours, wall_s
                       what it cost over all its attempts (hpsearch.accounting.usage.trial_cost:
                       the cost objectives' definition, over hpsearch.report.data's usage,
                       from the store, as export and status read it: no sacct)
  parallel_efficiency  of a trial whose ranks reported step timing (hpsearch.accounting.efficiency)
  rung, rung_value     promotion mode: the rung of its last segment and the objective's value
                       there (TrialRow.rung, .rung_value): what a paused trial waits with

As in export, a name the experiment's objectives or reported metrics take goes under
hpsearch_<name> (a cost objective gpu_hours: the objective under gpu_hours, the store's
reading under hpsearch_gpu_hours). A trial has only the values it has (no rung outside
promotion mode, no cost before it started, nothing that is not a finite number).
"""

from __future__ import annotations

import math
from pathlib import Path

from hpsearch.accounting.usage import AttemptUsage, trial_cost
from hpsearch.interop.store_view import StoreView
from hpsearch.report.data import collect


def mirror_values(exp_dir: Path, view: StoreView) -> dict[int, dict[str, float]]:
    """trial id -> {name: value} (see the module docstring), read-only on the store."""
    usage: dict[int, list[AttemptUsage]] = {}
    for used in collect(exp_dir, use_sacct=False, view=view).usage:
        usage.setdefault(used.trial, []).append(used)
    objectives = [o.metric for o in view.spec.objectives]
    reported = {m.name for m in view.metrics}
    taken = set(objectives) | reported
    found = {}
    for t in view.trials:
        values: dict[str, float] = {
            name: float(value) for name, value in zip(objectives, t.objective_values or ())
            if name not in reported and value is not None}
        own: dict[str, float | None] = dict(trial_cost(usage[t.id])) if t.id in usage else {}
        timed = view.timing.get(t.id)
        own.update(parallel_efficiency=timed.parallel_efficiency if timed else None,
                   rung=t.rung, rung_value=t.rung_value)
        values.update({f"hpsearch_{k}" if k in taken else k: float(v)
                       for k, v in own.items() if v is not None})
        found[t.id] = {k: v for k, v in values.items() if math.isfinite(v)}
    return found

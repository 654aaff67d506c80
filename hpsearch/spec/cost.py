"""Objectives that name what a trial cost (node_hours, gpu_hours, wall_s): what the rest of
a spec must allow for them (docs/spec.md#cost-as-an-objective).

A cost is measured by the driver when a trial ends, never reported during it: early
stopping and `checkpoints.keep_best`, which judge the first objective at each reported
step, need a reported metric first. gpu_hours needs trials that get GPUs, or every value
would be 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hpsearch.spec.model import Spec


def cost_problem(spec: Spec, on_slurm: bool) -> tuple[tuple, str] | None:
    """(key path, problem) for a cost objective the spec cannot serve, or None."""
    listed = isinstance(spec.raw.get("objective"), list)
    first = spec.objectives[0]
    where = ("objective", 0, "metric") if listed else ("objective", "metric")
    if first.measured and spec.search.pruner.enabled:
        return ("search", "pruner"), (
            f"early stopping judges the objective's reports during a trial, and "
            f"{first.metric} is a cost hpsearch measures only when the trial ends; remove "
            "search.pruner, or make the objective a metric the trial reports")
    if first.measured and spec.checkpoints.keep_best is not None:
        return ("checkpoints", "keep_best"), (
            f"keep_best ranks checkpoints by the first objective at their step, and "
            f"{first.metric} is a cost hpsearch measures only when the trial ends; put a "
            "metric the trial reports first in objective, or use keep_last")
    for i, objective in enumerate(spec.objectives):
        if objective.metric == "gpu_hours" and (why := _no_gpus(spec, on_slurm)):
            at = ("objective", i, "metric") if listed else where
            return at, (f"gpu_hours is GPUs x hours, and {why}: every trial's would be 0; "
                        "give trials GPUs, or use node_hours or wall_s")
    return None


def _no_gpus(spec: Spec, on_slurm: bool) -> str | None:
    """Why no trial of this spec gets a GPU, or None where some may."""
    res = spec.resources
    if not on_slurm:
        if spec.executor.gpus is None:
            return ("the local executor gives trials no GPU slots without executor.gpus "
                    "(auto, or device ids such as [0, 1])")
        return None
    asks = res.gpus_per_node > 0 or any(k == "gpus_per_node" for k, _ in res.per_trial) \
        or any("gpu" in option or "gres" in option for option in res.sbatch_extra)
    return None if asks else "trials ask Slurm for no GPUs (resources.gpus_per_node is 0)"

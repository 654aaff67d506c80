"""`hpsearch export`: one record per trial, as CSV or JSON (read-only on the store).

Columns, in this order: trial, state, attempts; each objective metric (its final value, as
the trial's result recorded it); param_<name> for each parameter (spec order); for every
metric the trial reported, objective or not: <metric> (the final value: the objective value,
or else the last report), <metric>_last and <metric>_last_step (its last intermediate report
and that step); started (its first attempt's start) and finished (its last attempt's end),
ISO-8601 with UTC offset, duration (finished - started, seconds: pauses between promotion
segments and retries included), run_seconds (the time it actually ran: the sum over its
attempts), startup_s (the part of run_seconds before each attempt's code first called
hpsearch.trial, which a cost objective leaves out: docs/spec.md#cost-as-an-objective; empty
where unknown), last_started (its last attempt's start; hpsearch.interop.trial_times), host,
exit_code, error, trial_dir; then steps, node_hours, gpu_hours, segments, rung (the resource
it used, hpsearch.report.budget); then, where any trial's GPUs were sampled (docs/gpu.md),
gpu_util (mean utilisation, percent), gpu_mem_max_mib, gpu_busy_hours, gpu_held_hours and
gpu_busy (the busy fraction, 0 to 1); then, where any trial's ranks reported step timing
(docs/scaling.md), ranks, step_s, load_balance, comm_efficiency, parallel_efficiency,
throughput, throughput_unit, speedup and scaling_efficiency. A value a trial does not have
is empty (CSV) or null (JSON).

A metric keeps its name: where an objective or a reported metric is named like one of
hpsearch's own columns (a cost objective gpu_hours or node_hours, docs/spec.md#cost-as-an-
objective, beside the budget's of that name; a metric named host), that column holds the
metric, as `best` and the sampler saw it, and hpsearch's own goes under hpsearch_<name> (the
prefix of hpsearch's own facts in trials_dataframe). The two may differ: the objective is
what the driver measured when the trial ended (sacct's figures, on Slurm), the budget is
export's own reading of the store, which knows no GPUs of a Slurm job (0 there).
"""

from __future__ import annotations

import csv
import io
import json

from hpsearch.accounting.efficiency import COLUMNS as TIMING_COLUMNS
from hpsearch.accounting.efficiency import TrialEfficiency
from hpsearch.interop.optuna_trials import iso
from hpsearch.interop.store_view import StoreView, last_reports
from hpsearch.interop.trial_times import trial_times
from hpsearch.report import budget
from hpsearch.report.gpu_use import GpuUse
from hpsearch.search.pbt_schedule import as_json, lived_all


def records(view: StoreView, budgets: dict[int, budget.TrialBudget],
            gpu: dict[int, GpuUse] | None = None,
            timing: dict[int, TrialEfficiency] | None = None) -> list[dict]:
    """One dict per trial, every dict with the same keys (see the module docstring)."""
    objectives = [o.metric for o in view.spec.objectives]
    names = view.metric_names
    params = list(dict.fromkeys([p.name for p in view.spec.search.space]  # spec order
                                + [k for t in view.trials for k in t.params]))
    taken = set(objectives) | set(names)

    def own(columns: dict) -> dict:
        """hpsearch's own columns, each under a name no metric takes (module docstring)."""
        return {f"hpsearch_{k}" if k in taken else k: v for k, v in columns.items()}

    schedules = lived_all(list(view.trials))  # pbt: each member's, through its donors
    out = []
    for t in view.trials:
        rec = own({"trial": t.id, "state": t.state, "attempts": t.attempt})
        rec.update(zip(objectives, t.objective_values or [None] * len(objectives)))
        rec.update({f"param_{k}": t.params.get(k) for k in params})
        last = last_reports(view.metrics_of(t.id))
        for name in names:
            step, value = last.get(name, (None, None))
            if name not in objectives:
                rec[name] = value
            rec[f"{name}_last"], rec[f"{name}_last_step"] = value, step
        times = trial_times(t, view.attempts_of(t.id))
        rec.update(own({"started": iso(times.started), "finished": iso(times.finished),
                        "duration": times.duration, "run_seconds": times.run_seconds,
                        "startup_s": times.startup_s,
                        "last_started": iso(times.last_started), "host": t.host,
                        "exit_code": t.exit_code,
                        "error": t.error, "trial_dir": t.trial_dir}))
        b = budgets.get(t.id)
        if budgets:  # budget accounting (docs/early-stopping.md#budget)
            rec.update(own({"steps": b and b.steps, "node_hours": b and b.node_hours,
                            "gpu_hours": b and b.gpu_hours, "segments": b and b.segments,
                            "rung": b and b.rung}))
        if gpu:  # measured GPU use (docs/gpu.md)
            rec.update(own(_gpu_columns(gpu.get(t.id))))
        if timing:  # parallel efficiency and scaling (docs/scaling.md)
            eff = timing.get(t.id)
            rec.update(own(eff.columns() if eff else dict.fromkeys(TIMING_COLUMNS)))
        if schedules:  # pbt (docs/pbt.md): JSON text, also in CSV
            rec.update(own({"schedule": json.dumps(as_json(schedules[t.id]))
                            if t.id in schedules else None}))
        out.append(rec)
    return out


def _gpu_columns(use: GpuUse | None) -> dict:
    if use is None:
        return dict.fromkeys(("gpu_util", "gpu_mem_max_mib", "gpu_busy_hours", "gpu_held_hours",
                              "gpu_busy"))
    return {"gpu_util": use.util_mean, "gpu_mem_max_mib": use.mem_max_mib,
            "gpu_busy_hours": use.busy_gpu_hours, "gpu_held_hours": use.held_gpu_hours,
            "gpu_busy": use.busy_fraction}


def render(found: list[dict], fmt: str) -> str:
    """The records as `fmt` ("csv" or "json") text."""
    if fmt == "json":
        return json.dumps(found, indent=1) + "\n"
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(found[0]) if found else ["trial"])
    writer.writeheader()
    writer.writerows(found)
    return buf.getvalue()

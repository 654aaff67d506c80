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
import time
from collections.abc import Iterator
from pathlib import Path

from hpsearch.accounting.efficiency import COLUMNS as TIMING_COLUMNS
from hpsearch.accounting.efficiency import TrialEfficiency
from hpsearch.interop.optuna_trials import iso
from hpsearch.interop.store_view import StoreView, last_reports
from hpsearch.interop.trial_times import trial_times
from hpsearch.report import budget
from hpsearch.report.gpu_use import GpuUse
from hpsearch.search.pbt_schedule import as_json, lived_all
from hpsearch.store.runs import STORE_FILE
from hpsearch.views.spec_facts import spec_facts

PIECE = 2000  # trials read, turned into records and written at a time (stream)
FIRST_PIECE = 100  # fewer in the first piece, so that the first rows come at once


def stream(exp_dir: Path, fmt: str) -> Iterator[tuple[str, int]]:
    """The export of the experiment in `exp_dir` as `fmt` ("csv" or "json") text, piece by
    piece: (text, trials in it). The columns are learnt first from the whole store in a few
    queries (Reader.metric_order, param_order); then PIECE trials at a time are read,
    turned into records and given out, so the first rows come before the store is read
    whole, and memory stays flat. An experiment with pbt schedules (which go through other
    trials), sampled GPUs or rank timing is read whole, in one piece, as before."""
    from hpsearch.interop.store_view import read_pieces, read_view
    from hpsearch.report.data import attempt_usages, collect, curves_of, pilot_share
    from hpsearch.store.reader import Reader
    with Reader(Path(exp_dir) / STORE_FILE) as reader:
        if not _streams(reader):
            view = read_view(exp_dir)
            data = collect(exp_dir, use_sacct=False, view=view)
            found = records(view, {b.trial: b for b in budget.trial_budgets(
                data.trials, data.curves, data.usage)}, data.gpu, data.timing)
            yield render(found, fmt), len(found)
            return
        exp = reader.experiment()
        pilot_rows = reader.pilots() if reader.db["pilots"].exists() else []
        share_of = pilot_share(exp, Path(exp_dir).parent) if pilot_rows else None
        metric = (spec_facts(exp.spec_yaml)[0] or (None,))[0]  # collect's curves
        columns: tuple[list[str], list[str]] | None = None
        now, fields, count = time.time(), None, 0
        for view in read_pieces(reader, exp_dir, PIECE, FIRST_PIECE):
            if columns is None:
                columns = _columns(reader, view)
            usage, _ = attempt_usages(
                [(a.trial, a.attempt, a.state, a.started, a.finished, a.job_id, a.nodes,
                  a.reason, a.host, a.startup_s) for a in view.attempts],
                view.trials, pilot_rows, {}, share_of, now)
            curves = curves_of((m.trial, m.step, m.value) for m in view.metrics
                             if metric is not None and m.name == metric)
            found = records(view, {b.trial: b for b in budget.trial_budgets(
                list(view.trials), curves, usage)}, columns=columns)
            fields = fields or list(found[0])
            yield _piece(found, fmt, fields, count == 0), len(found)
            count += len(found)
        yield ("" if count else render([], fmt)) + ("\n]\n" if count and fmt == "json"
                                                    else ""), 0


def _streams(reader) -> bool:
    """Whether each trial's record can be made from its own rows (stream's pieces)."""
    return not (reader.gpu_use() or reader.rank_timing() or reader.db.execute(
        "select 1 from trials where pruner_attrs like '%\"pbt\"%' limit 1").fetchone())


def _columns(reader, view: StoreView) -> tuple[list[str], list[str]]:
    """(metric names, parameter names) of the whole experiment, as records() finds them in
    a view of every trial: the objectives then the other metrics in the order first
    reported; the spec's parameters then any other a trial has."""
    objectives = [o.metric for o in view.spec.objectives]
    names = objectives + [n for n in reader.metric_order() if n not in objectives]
    params = list(dict.fromkeys([p.name for p in view.spec.search.space]
                                + reader.param_order()))
    return names, params


def _piece(found: list[dict], fmt: str, fields: list[str], first: bool) -> str:
    """Records as a piece of render()'s text: CSV rows (the header before the first),
    or JSON array items (the bracket before the first; stream writes the closing one)."""
    if fmt == "json":
        items = ",\n".join(" " + json.dumps(r, indent=1).replace("\n", "\n ")
                            for r in found)
        return ("[\n" if first else ",\n") + items
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields)
    if first:
        writer.writeheader()
    writer.writerows(found)
    return buf.getvalue()


def records(view: StoreView, budgets: dict[int, budget.TrialBudget],
            gpu: dict[int, GpuUse] | None = None,
            timing: dict[int, TrialEfficiency] | None = None,
            columns: tuple[list[str], list[str]] | None = None) -> list[dict]:
    """One dict per trial, every dict with the same keys (see the module docstring).
    columns: (metric names, parameter names) when the view holds some trials only (stream);
    else they are the view's."""
    objectives = [o.metric for o in view.spec.objectives]
    names, params = columns or (list(view.metric_names), list(dict.fromkeys(
        [p.name for p in view.spec.search.space]  # spec order
        + [k for t in view.trials for k in t.params])))
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

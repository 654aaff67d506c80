"""`hpsearch status`, `best` and `export`: read the store (read-only, never blocks the driver)."""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path

from hpsearch.accounting import efficiency
from hpsearch.cli import sites_cmds
from hpsearch.cli.common import (
    add_command,
    add_runs_dir,
    format_params,
    format_value,
    print_table,
    runs_dir_of,
)
from hpsearch.ingest import outcome, resume_check
from hpsearch.report import budget
from hpsearch.report.gpu_use import describe, read_gpu_use
from hpsearch.search.pbt_schedule import describe as describe_schedule
from hpsearch.search.pbt_schedule import lived, schedule_of
from hpsearch.store import runs
from hpsearch.store.atomic import AS_OPEN, replace_file
from hpsearch.store.lockfile import DriverLock
from hpsearch.store.results import best as best_trials
from hpsearch.store.results import best_checkpoint, record
from hpsearch.store.rows import DONE
from hpsearch.store.runs import STORE_FILE
from hpsearch.views import scouts
from hpsearch.views.pilots import pilot_lines


def _reader(path):
    from hpsearch.store.reader import Reader  # loads sqlite-utils on first use (see hpsearch.store)
    return Reader(path)


def register(sub) -> None:
    p = add_command(sub, "status", "Show every experiment, or one experiment's trials.",
                    "  hpsearch status                # one line per experiment\n"
                    "  hpsearch status quadratic      # its trials, states, values, errors",
                    status)
    p.add_argument("name", nargs="?")
    add_runs_dir(p)
    p = add_command(sub, "best", "The best trials (top-k), or the Pareto front of a "
                    "multi-objective search, with params and trial dir. Objectives may be "
                    "what a trial cost, node_hours, gpu_hours or wall_s, measured by hpsearch "
                    "(docs/spec.md#cost-as-an-objective).",
                    "  hpsearch best quadratic\n  hpsearch best quadratic -k 5 --json\n"
                    "  hpsearch best cost        # examples/cost: val_acc against gpu_hours",
                    best)
    p.add_argument("name")
    p.add_argument("-k", type=int, default=1, help="how many (single objective; default 1)")
    p.add_argument("--json", action="store_true", help="print JSON")
    add_runs_dir(p)
    p = add_command(sub, "export", "Every trial with params, state, objective values, every "
                    "metric it reported (final and last intermediate), ISO-8601 start and end "
                    "times and duration in seconds, as CSV or JSON.",
                    "  hpsearch export quadratic > trials.csv\n"
                    "  hpsearch export quadratic --format json --out trials.json", export)
    p.add_argument("name")
    p.add_argument("--format", choices=["csv", "json"], default="csv")
    p.add_argument("--out", type=Path, help="write to this file (atomically) instead of stdout")
    add_runs_dir(p)


def _open(args):
    return _reader(runs.existing_experiment_dir(runs_dir_of(args), args.name) / STORE_FILE)


def _metric_names(exp) -> list[str]:
    from hpsearch.spec.yamlpos import load_yaml_with_lines
    raw, _ = load_yaml_with_lines(exp.spec_yaml, exp.spec_file)
    objective = raw["objective"]
    return [o["metric"] for o in (objective if isinstance(objective, list) else [objective])]


def status(args) -> int:
    if args.name is None:
        return _status_all(runs_dir_of(args))
    with _open(args) as reader:
        exp, trials, counts = reader.experiment(), reader.trials(), reader.state_counts()
        attempts = reader.all_attempts()
        ran, startup = _run_seconds(trials, attempts)
        trouble = reader.slurm_trouble() if exp.status == "running" else None
        pilots = pilot_lines(reader, runs_dir_of(args) / args.name)
        gpu, pilot_gpu = read_gpu_use(reader, exp.spec_yaml, pilots, time.time())
        timing = efficiency.efficiency(reader.rank_timing(), {t.id: t.params for t in trials},
                                       exp.spec_yaml)  # docs/scaling.md
        restarts = reader.events(limit=None, kind=resume_check.KIND)
        sites = sites_cmds.read_lines(reader, runs_dir_of(args) / args.name, exp, trials,
                                       attempts)
        resized = scouts.summary(scouts.read_resizes(reader))
    driver = DriverLock(runs_dir_of(args) / args.name).holder()
    metrics = _metric_names(exp)
    staged = _budgets(runs_dir_of(args) / args.name, trials)  # early stopping / promotion
    shown = outcome.experiment_status(exp.status, driver)
    print(f"experiment {exp.name}: {shown}, {exp.strategy}, "
          f"{outcome.progress(counts, exp.trials_requested)}"
          f"; driver: {f'pid {driver:d}' if driver else 'not running'}")
    if shown == outcome.INTERRUPTED:
        hint = outcome.resume_hint(exp.name, runs_dir_of(args) / args.name)
        print(f"no driver runs it; {hint}")
    if trouble and driver:
        print(trouble)
    if staged:
        print(budget.describe(budget.split(list(staged.values()))))
    rows = []
    pilot_leaf = {p.job_id: p.leaves[0] for p in pilots if p.job_id and len(p.leaves) == 1}
    for t in trials:
        values = " ".join(f"{m}={v:.6g}" for m, v in zip(metrics, t.objective_values or []))
        duration = f"{ran[t.id]:.1f}s" if ran.get(t.id) is not None else ""
        note = outcome.cause(t.error)
        if not t.leaves and t.job_id in pilot_leaf:  # in a pilot under one leaf: there too
            t = dataclasses.replace(t, leaves=pilot_leaf[t.job_id])
        spent = staged and [str(staged[t.id].steps), "" if staged[t.id].rung is None
                            else str(staged[t.id].rung)]
        used = [describe(gpu.get(t.id))] if gpu else []  # measured GPU use (docs/gpu.md)
        used += [efficiency.describe(timing.get(t.id))] if timing else []
        began = [f"{startup[t.id]:.1f}s" if startup.get(t.id) is not None else ""
                 ] if startup else []  # apart from the run: docs/trial.md#start-up
        rows.append([str(t.id), t.state, str(t.attempt), duration, *(spent or []), *began,
                     _where(t), *used, values, format_params(t.params), note])
    print_table(["id", "state", "try", "time", *(["steps", "rung"] if staged else []),
            *(["start-up"] if startup else []), "where",
            *(["gpu"] if gpu else []), *(["parallel"] if timing else []), "objective",
            "params", "error"], rows)
    not_resumed = resume_check.summary(restarts, exp.name)
    if not_resumed:
        print(not_resumed)
    if pilots:
        _pilot_table(pilots, pilot_gpu)
    if sites:
        sites_cmds.table(sites)
    if resized:
        print(resized)
    return 0


def _run_seconds(trials, attempt_rows: list[dict]
                 ) -> tuple[dict[int, float | None], dict[int, float]]:
    """trial id -> the time it ran, summed over its attempts (retries, promotion segments;
    one in flight until now): export's run_seconds (hpsearch.interop.trial_times). The
    trial row's own start and end are its last attempt's only. And trial id -> the part of
    it before each attempt's code first called hpsearch.trial, where known (startup_s)."""
    from hpsearch.interop.store_view import AttemptRow
    from hpsearch.interop.trial_times import trial_times
    by_trial: dict[int, list[AttemptRow]] = {}
    for row in attempt_rows:
        by_trial.setdefault(row["trial"], []).append(AttemptRow.from_db(row))
    now = time.time()
    times = {t.id: trial_times(t, by_trial.get(t.id, ()), now) for t in trials}
    return ({tid: x.run_seconds for tid, x in times.items()},
            {tid: x.startup_s for tid, x in times.items() if x.startup_s is not None})


def _budgets(exp_dir: Path, trials) -> dict:
    """trial id -> its TrialBudget (hpsearch.report.budget), from the store alone; {} for a
    search without early stopping or promotion."""
    if not any(t.stop_request or t.pruner_attrs or t.state in ("pruned", "paused")
               for t in trials):
        return {}
    from hpsearch.report.data import collect
    data = collect(exp_dir, use_sacct=False, trials=list(trials))
    return {b.trial: b for b in budget.trial_budgets(data.trials, data.curves, data.usage)}


def _pilot_table(pilots, gpu: dict) -> None:
    """The pilot jobs: each one's job, state, nodes and leaf, the trials running in it,
    how long it has run (waited, held its nodes) and the time left of its limit; where its
    trials' GPUs were sampled, its GPUs' busy fraction."""
    from hpsearch.tui import text
    live = sum(1 for p in pilots if p.live)
    print(f"\npilots: {live} live, {len(pilots) - live} ended")
    print_table(["pilot", "job", "state", "nodes", "trials", "time", "left",
            *(["gpu"] if gpu else []), "note"],
           [[str(p.id), p.job_id or "", p.state, text.pilot_where(p), text.pilot_trials(p),
             text.pilot_age(p), text.pilot_left(p), *([describe(gpu.get(p.id))] if gpu else []),
             p.reason or ""] for p in pilots])


def _where(t) -> str:
    """Where a trial runs or waits: job id, scheduler state and pending reason, nodes."""
    parts = []
    if t.job_id:
        parts.append(f"job {t.job_id}")
    if t.state == "running" and t.sched_state and t.sched_state != "RUNNING":
        parts.append(t.sched_state + (f" ({t.pending_reason})" if t.pending_reason else ""))
    if t.nodes or t.host:
        parts.append(t.nodes or t.host)
    if t.leaves:
        leaves = t.leaves.split(",")
        parts.append(f"[{leaves[0]}]" if len(leaves) == 1 else
                     f"[{len(leaves)} leaves: {t.leaves}]")
    return " ".join(parts)


def _status_all(runs_dir: Path) -> int:
    rows = []
    for exp_dir in runs.list_experiments(runs_dir):
        with _reader(exp_dir / STORE_FILE) as reader:
            exp, trials, counts = reader.experiment(), reader.trials(), reader.state_counts()
        top = best_trials(trials, exp.directions, 1)
        best_text = f"front of {len(top):d}" if len(exp.directions) > 1 else \
            (format_value(top[0].values[0]) if top else "")
        finished = sum(counts.get(s, 0) for s in DONE)
        driver = DriverLock(exp_dir).holder()
        rows.append([exp.name, outcome.experiment_status(exp.status, driver), exp.strategy,
                     f"{finished}/{exp.trials_requested}",
                     str(counts.get("running", 0)), str(counts.get("failed", 0)), best_text,
                     f"pid {driver}" if driver else "-",
                     time.strftime("%Y-%m-%d %H:%M", time.localtime(exp.updated))])
    if not rows:
        print(f"no experiments under {runs_dir}")
        return 0
    print_table(["name", "status", "strategy", "done", "running", "failed", "best", "driver",
            "updated"], rows)
    return 0


def best(args) -> int:
    with _open(args) as reader:
        exp, trials, saved = reader.experiment(), reader.trials(), reader.checkpoints()
    metrics = _metric_names(exp)
    top = best_trials(trials, exp.directions, args.k)
    checkpoint = {t.id: best_checkpoint([c for c in saved if c.trial == t.id],
                                        exp.directions[0]) for t in top}
    if args.json:
        print(json.dumps([{**record(t, metrics), "checkpoint": checkpoint[t.id] and
                           checkpoint[t.id].path} for t in top], indent=1))
        return 0 if top else 1
    if not top:
        print(f"experiment {exp.name}: no completed trial yet", file=sys.stderr)
        return 1
    if len(metrics) > 1:
        print(f"Pareto front of {exp.name}: {len(top)} trial(s) "
              f"({', '.join(f'{d} {m}' for m, d in zip(metrics, exp.directions))})")
    schedules = {t.id: s for t in trials if (s := schedule_of(t.pruner_attrs))}
    for rank, t in enumerate(top, 1):
        values = ", ".join(f"{m}={v:.6g}" for m, v in zip(metrics, t.values))
        print(f"{rank}. trial {t.id}: {values}")
        print(f"   params: {format_params(t.params)}")
        if t.id in schedules:  # pbt: the parameters its model trained with, step by step
            last = (t.pruner_attrs.get("pbt") or {}).get("step")
            print("   schedule (pbt, through the checkpoints it took):")
            for line in describe_schedule(lived(schedules, t.id), last):
                print(f"     {line}")
        print(f"   trial dir: {t.trial_dir}")
        ckpt = checkpoint[t.id]
        if ckpt is not None:
            at = f"step {ckpt.step}" + (f", {metrics[0]}={ckpt.metric:.6g}"
                                        if ckpt.metric is not None else "")
            print(f"   checkpoint: {ckpt.path} ({at})")
    return 0


def export(args) -> int:
    from hpsearch.interop.store_view import read_view
    from hpsearch.report import export as exporting
    from hpsearch.report.data import collect
    exp_dir = runs.existing_experiment_dir(runs_dir_of(args), args.name)
    view = read_view(exp_dir)
    data = collect(exp_dir, use_sacct=False, view=view)
    records = exporting.records(view, {b.trial: b for b in budget.trial_budgets(
        data.trials, data.curves, data.usage)}, data.gpu, data.timing)
    text = exporting.render(records, args.format)
    if args.out is None:
        sys.stdout.write(text)
        return 0
    replace_file(args.out, text, AS_OPEN)  # a link planted at a temporary name is not followed
    print(f"wrote {len(records)} trials to {args.out}", file=sys.stderr)
    return 0

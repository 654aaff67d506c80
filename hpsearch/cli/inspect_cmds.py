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
from hpsearch.store.results import best_checkpoint, best_of, record
from hpsearch.store.rows import DONE, IN_FLIGHT
from hpsearch.store.runs import STORE_FILE
from hpsearch.views import scouts
from hpsearch.views.pilots import pilot_lines
from hpsearch.views.sites import experiment_sites


def _reader(path):
    from hpsearch.store.reader import Reader  # loads sqlite-utils on first use (see hpsearch.store)
    return Reader(path)


def register(sub) -> None:
    p = add_command(sub, "status", "Show every experiment, or one experiment's trials.",
                    "  hpsearch status                # one line per experiment\n"
                    "  hpsearch status quadratic      # its trials, states, values, errors\n"
                    "  hpsearch status big --all      # every trial of a search of many",
                    status)
    p.add_argument("name", nargs="?")
    p.add_argument("--all", action="store_true",
                   help=f"list every trial (default: at most {LISTED:,}: those in flight "
                        "and the most recent)")
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
        exp, counts = reader.experiment(), reader.state_counts()
        trials, every = _listed(reader, counts, args.all)
        attempts = reader.all_attempts() if trials is every else \
            reader.attempts_of(t.id for t in trials)
        ran, startup = _run_seconds(trials, attempts)
        trouble = reader.slurm_trouble() if exp.status == "running" else None
        pilots = pilot_lines(reader, runs_dir_of(args) / args.name)
        gpu, pilot_gpu = read_gpu_use(reader, exp.spec_yaml, pilots, time.time())
        timed = reader.rank_timing()
        if timed and every is None:  # scaling compares a trial with others (docs/scaling.md)
            every = reader.trials()
        timing = efficiency.efficiency(timed, {t.id: t.params for t in every or ()},
                                       exp.spec_yaml)
        restarts = reader.events(limit=None, kind=resume_check.KIND)
        sites = _site_lines(reader, runs_dir_of(args) / args.name, exp, every, attempts
                            if trials is every else None)
        resized = scouts.summary(scouts.read_resizes(reader))
        if every is None and reader.db.execute(STAGED_SQL).fetchone():
            every = reader.trials()  # the budget's summary counts every trial
    driver = DriverLock(runs_dir_of(args) / args.name).holder()
    metrics = _metric_names(exp)
    staged = _budgets(runs_dir_of(args) / args.name, every or [])  # early stopping, promotion
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
    if len(trials) < sum(counts.values()):
        print(f"{sum(counts.values()) - len(trials):,} earlier trials not listed: "
              f"`hpsearch status {exp.name} --all` lists every trial, `hpsearch export "
              f"{exp.name}` writes them all")
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


# status lists every trial up to LISTED; beyond, those in flight and the last LISTED by id,
# unless --all: a listing of 100,000 trials took 9 s, from reading and formatting every row.
LISTED = 1000
# A trial that early stopping or promotion marked: status then reads every trial, for the
# budget's summary (_budgets tests the same, on each trial's row).
STAGED_SQL = ("select 1 from trials where state in ('pruned', 'paused') or stop_request not in"
              " ('', 'null') or pruner_attrs not in ('', '{}', 'null') limit 1")


def _listed(reader, counts: dict[str, int], show_all: bool):
    """(the trials status lists, every trial or None): every trial where there are at most
    LISTED or with --all; else those in flight and the last LISTED by id (None: not read)."""
    if show_all or sum(counts.values()) <= LISTED:
        every = reader.trials()
        return every, every
    shown = {t.id: t for t in reader.trials(IN_FLIGHT)}
    shown.update((t.id, t) for t in reader.last_trials(LISTED))
    return [shown[i] for i in sorted(shown)], None


def _site_lines(reader, exp_dir: Path, exp, every, attempts: list[dict] | None) -> list:
    """The sites table's lines (sites_cmds.read_lines), over every trial and attempt: read
    here where status did not (a big search lists some), and only if it has sites."""
    if every is None or attempts is None:
        if not experiment_sites(exp, exp_dir.parent):
            return []
        every, attempts = reader.trials(), reader.all_attempts()
    return sites_cmds.read_lines(reader, exp_dir, exp, every, attempts)


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
            exp, counts = reader.experiment(), reader.state_counts()
            top = best_of(reader, exp.directions)
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
    with _open(args) as reader:  # ranks ids and values; reads the winners' rows only
        exp = reader.experiment()
        top = reader.trials_by_id(t.id for t in best_of(reader, exp.directions, args.k))
        checkpoint = {t.id: best_checkpoint(reader.checkpoints(t.id), exp.directions[0])
                      for t in top}
        pbt = any(schedule_of(t.pruner_attrs) for t in top)
        trials = reader.trials() if pbt else top  # a schedule goes through its donors
    metrics = _metric_names(exp)
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
    """Streamed (hpsearch.report.export.stream): the first rows are written before the
    store is read whole; to --out, into a temporary file renamed over it at the end."""
    from hpsearch.report import export as exporting
    exp_dir = runs.existing_experiment_dir(runs_dir_of(args), args.name)
    count = [0]

    def pieces():
        for text, trials in exporting.stream(exp_dir, args.format):
            count[0] += trials
            yield text

    if args.out is None:
        for text in pieces():
            sys.stdout.write(text)
            sys.stdout.flush()
        return 0
    replace_file(args.out, pieces(), AS_OPEN)  # a link planted at a temporary name is not followed
    print(f"wrote {count[0]} trials to {args.out}", file=sys.stderr)
    return 0

"""What a report shows, read from the store (read-only) and, on Slurm, from sacct.

Resources are counted per attempt (hpsearch.accounting.usage, whose definition the cost
objectives share): node-hours = nodes x hours it ran, GPU-hours = GPUs x hours. On
Slurm they come from sacct (ElapsedRaw, NNodes, AllocTRES of each attempt's job);
elsewhere, or where sacct knows nothing, from the store's start and end times, with one
node and the GPUs the local executor gave the trial. Each attempt falls in one class:
completed, pruned, paused (a promotion segment that ended at its rung), failed, preempted
(preempted, node failure, lost: run again later) or cancelled. hpsearch.report.budget sums
them by how each trial ended.

Pilots: the attempts that ran in a pilot all carry the pilot's Slurm job id, so sacct's
usage of that job is the pilot's, never an attempt's. Such an attempt is counted from the
store (its nodes x the time between its start and end); the pilots' own node-hours, busy
and idle, are in hpsearch.report.pilot_usage. GPU use measured by the samplers (docs/gpu.md):
hpsearch.report.gpu_use. Sites and scouts (docs/brokerage.md): hpsearch.report.brokerage.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from hpsearch.accounting.efficiency import TrialEfficiency, efficiency
from hpsearch.accounting.usage import AttemptUsage, attempt_usage, gpu_count
from hpsearch.ingest import outcome, resume_check
from hpsearch.report.brokerage import Brokerage, read_brokerage
from hpsearch.report.gpu_use import GpuUse, pilot_gpu_use, pilot_gpus_per_node, trial_gpu_use
from hpsearch.report.pilot_usage import PilotUsage, Span, pilot_usage
from hpsearch.report.space import spec_space
from hpsearch.store.lockfile import DriverLock
from hpsearch.store.rows import ExperimentRow, TrialRow
from hpsearch.store.runs import STORE_FILE
from hpsearch.views.pilots import heartbeat_of
from hpsearch.views.spec_facts import spec_facts

if TYPE_CHECKING:
    from hpsearch.driver.cost import PilotShare
    from hpsearch.slurm.sacct import JobUsage

CLASSES = ("completed", "pruned", "paused", "failed", "preempted", "cancelled")
_PREEMPTED_WORDS = ("preempted", "node_fail", "lost", "requeued")


@dataclass
class ReportData:
    name: str
    strategy: str
    executor: str
    status: str
    metrics: tuple[str, ...]
    directions: tuple[str, ...]
    trials: list[TrialRow]
    curves: dict[int, list[tuple[int, float]]]   # trial -> [(step, value)] of metrics[0]
    usage: list[AttemptUsage]
    notes: list[str] = field(default_factory=list)
    created: float = 0.0
    updated: float = 0.0
    pilots: list[PilotUsage] = field(default_factory=list)
    space: dict[str, dict] = field(default_factory=dict)  # the spec's search.space entries
    gpu: dict[int, GpuUse] = field(default_factory=dict)  # trial -> its measured GPU use
    pilot_gpu: dict[int, GpuUse] = field(default_factory=dict)  # pilot -> its GPUs' use
    timing: dict[int, TrialEfficiency] = field(default_factory=dict)  # docs/scaling.md
    brokerage: Brokerage = field(default_factory=Brokerage)  # sites and scouts


def pilot_share(exp: ExperimentRow, runs_dir: Path) -> PilotShare | None:
    """A pilot attempt's share of each node it held, from the stored spec (as the cost
    objectives charge it: hpsearch.driver.cost); None (whole nodes) if it cannot be read."""
    from hpsearch.driver.cost import pilot_share_of
    from hpsearch.errors import BadInput
    from hpsearch.interop.store_view import stored_spec
    try:
        return pilot_share_of(stored_spec(exp, runs_dir))
    except BadInput:
        return None


def attempt_class(state: str | None, reason: str | None) -> str:
    """The resource class of an attempt from its recorded state and reason."""
    text = f"{state or ''} {reason or ''}".lower()
    if any(word in text for word in _PREEMPTED_WORDS):
        return "preempted"
    if state in ("completed", "pruned", "paused", "failed", "cancelled"):
        return state
    return "cancelled" if state is None else "failed"


def collect(exp_dir: Path, use_sacct: bool = True, slurm=None,
            trials: list | None = None, view=None) -> ReportData:
    """trials: the experiment's trial rows if the caller has read them already; view: a
    StoreView (hpsearch.interop.store_view) the caller has read, whose trials, metrics and
    attempts are used instead of reading them again (export at 10,000 trials: reading
    them twice was a third of its time)."""
    from hpsearch.store.reader import Reader
    with Reader(Path(exp_dir) / STORE_FILE) as reader:
        exp = reader.experiment()
        metrics, executor = spec_facts(exp.spec_yaml)
        if view is not None:
            trials = list(view.trials)
            curves = curves_of((m.trial, m.step, m.value) for m in view.metrics
                              if metrics and m.name == metrics[0])
            attempts = [(a.trial, a.attempt, a.state, a.started, a.finished, a.job_id,
                         a.nodes, a.reason, a.host, a.startup_s) for a in view.attempts]
        else:
            trials = reader.trials() if trials is None else trials
            curves = curves_of(reader.db.execute(
                "select trial, step, value from metrics where name = ? order by trial, "
                "step", (metrics[0],)).fetchall() if metrics else ())
            attempts = list(reader.db.execute(
                "select trial, attempt, state, started, finished, job_id, nodes, reason, host,"
                " startup_s from attempts order by trial, attempt").fetchall())
        pilot_rows = reader.pilots() if reader.db["pilots"].exists() else []
        gpu_rows = reader.gpu_use()
        timing_rows = reader.rank_timing()
        restarts = reader.events(limit=None, kind=resume_check.KIND)
        brokerage = read_brokerage(reader, exp, Path(exp_dir).parent, trials)
    share_of = pilot_share(exp, Path(exp_dir).parent) if pilot_rows else None
    in_pilot = {row.job_id: row.id for row in pilot_rows if row.job_id}
    notes = [n for n in [resume_check.summary(restarts, exp.name)] if n]
    by_job: dict[str, JobUsage] = {}
    jobs = [a[5] for a in attempts if a[5] and a[5] not in in_pilot] + list(in_pilot)
    if jobs and use_sacct:
        by_job, note = _sacct_usage(jobs, slurm)
        if note:
            notes.append(note)
    now = time.time()
    usage, spans = attempt_usages(attempts, trials, pilot_rows, by_job, share_of, now)
    if jobs and not use_sacct:
        notes.append("sacct not asked (--no-sacct): times from the store, 1 node per attempt "
                     "unless its nodes are recorded")
    gpu, busy_by_job = trial_gpu_use(gpu_rows, [a[:2] + a[3:6] for a in attempts], now)
    pilots = [pilot_usage(row, max(1, len(_hosts(row.nodes))),
                          by_job.get(row.job_id) if row.job_id else None,
                          spans.get(row.id, []), heartbeat_of(exp_dir, row), now)
              for row in pilot_rows]
    per_node = {site: pilot_gpus_per_node(exp.spec_yaml, site)
                for site in {row.site for row in pilot_rows}} if pilots and gpu else {}
    pilot_gpu = {p.pilot: use for p, row in zip(pilots, pilot_rows) if gpu and (
        use := pilot_gpu_use(busy_by_job.get(row.job_id or "", 0.0), p.nodes,
                             per_node[row.site], p.seconds))}
    return ReportData(name=exp.name, strategy=exp.strategy, executor=executor,
                      status=outcome.experiment_status(exp.status,
                                                       DriverLock(exp_dir).holder()),
                      metrics=metrics, directions=tuple(exp.directions),
                      trials=trials, curves=curves, usage=usage, notes=notes,
                      created=exp.created, updated=exp.updated,
                      space=spec_space(exp.spec_yaml), pilots=pilots, gpu=gpu,
                      pilot_gpu=pilot_gpu, brokerage=brokerage,
                      timing=efficiency(timing_rows, {t.id: t.params for t in trials},
                                        exp.spec_yaml))


def attempt_usages(attempts, trials, pilot_rows: list, by_job: dict,
                   share_of: PilotShare | None, now: float
                   ) -> tuple[list[AttemptUsage], dict[int, list[Span]]]:
    """(the AttemptUsage of each attempt that counts, pilot id -> its attempts' spans), from
    attempt tuples (trial, attempt, state, started, finished, job_id, nodes, reason, host,
    startup_s) of `trials` (export passes them a piece at a time); by_job: sacct's JobUsage
    by job id; share_of: a pilot attempt's share of a node (None: whole nodes)."""
    gpus_of = {t.id: gpu_count(t.gpus) for t in trials}
    params_of = {t.id: t.params for t in trials}
    in_pilot = {row.job_id: row.id for row in pilot_rows if row.job_id}
    site_of = {row.job_id: row.site for row in pilot_rows if row.job_id}
    usage = []
    spans: dict[int, list[Span]] = {}
    for trial, attempt, state, started, finished, job_id, nodes, reason, host, startup_s \
            in attempts:
        kind = attempt_class(state, reason)
        pilot = in_pilot.get(job_id) if job_id else None
        record = by_job.get(job_id) if job_id and pilot is None else None
        hosts = _hosts(nodes or (host if pilot is not None else None))
        share = share_of(params_of[trial], site_of.get(job_id)) \
            if share_of and pilot is not None else 1.0
        used = attempt_usage(trial, attempt, kind, started, finished, now, len(hosts),
                             gpus_of.get(trial, 0), record, pilot, share, startup_s)
        if used is not None:
            usage.append(used)
        if used is not None and pilot is not None and started is not None:
            end = finished if finished is not None else now  # nodes unknown: one of its own
            spans.setdefault(pilot, []).append((hosts or (f"?{trial}.{attempt}",), started,
                                                end))
    return usage, spans


def curves_of(rows) -> dict[int, list[tuple[int, float]]]:
    """(trial, step, value) rows, by trial and step, as trial -> [(step, value)]; a value
    that is not a number (NULL, NaN) is left out."""
    curves: dict[int, list[tuple[int, float]]] = {}
    for trial, step, value in rows:
        if value is not None and value == value:
            curves.setdefault(trial, []).append((step, value))
    return curves


def _hosts(hostlist: str | None) -> tuple[str, ...]:
    """The node names of a hostlist; () when empty or unreadable."""
    if not hostlist:
        return ()
    from hpsearch.slurm.hostlist import expand
    try:
        return tuple(expand(hostlist))
    except ValueError:
        return ()


def _sacct_usage(job_ids: list[str], slurm=None) -> tuple[dict[str, JobUsage], str | None]:
    """{job id: JobUsage} from sacct, and a note when sacct could not help."""
    from hpsearch.errors import HpsearchError
    try:
        if slurm is None:
            from hpsearch.slurm.commands import Slurm
            slurm = Slurm(timeout=60)
        records = slurm.sacct_usage(job_ids)
    except HpsearchError as exc:
        return {}, f"sacct failed, times from the store instead: {str(exc).splitlines()[0]}"
    if records is None:
        return {}, "the cluster keeps no accounting: times from the store instead"
    return {rec.job_id: rec for rec in records}, None

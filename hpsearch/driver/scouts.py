"""Scouts (issue 40 item 3, docs/brokerage.md#scouts): trials sized from what the first ones
took, as PanDA's scout jobs size a task's other jobs.

`resources.time: auto 04:00:00` and `resources.mem: auto 16G` keep the user's value as a
ceiling. Until `resources.scouts` (3) attempts have completed, every trial asks for the
ceiling; then each new attempt asks for the 95th percentile of what the completed ones took
(sacct: the job's ElapsedRaw, the largest MaxRSS of its steps) times MARGIN, never above the
ceiling. An attempt killed at such a limit (timeout, out_of_memory) runs again at the
ceiling without counting as a failure, and every later trial asks for GROWTH times more of
that resource (PanDA's retry module raises memory or time the same way). Each sized attempt
says so in its stored overrides (`scouts: ...`): what `events` and `status` show, and how
a failure is known to be the scouts' (also after a restart).

In pilots (`in_pilots`) a trial has no job of its own for sacct to measure: its run time is
its attempt's, as the store has it (started to finished), and its peak memory what its
pilot measured (attempts.max_rss_mb: its processes' memory summed at samples each second,
or wait4's ru_maxrss of its shell where more, hpsearch.executors.local; not known for a
trial on a pilot's other nodes, run through srun). The sized time becomes the trial's
own time limit in its assignment, which the pilot enforces and binds by (a trial fits in a
pilot's remaining time sooner); the sized memory its own `mem`, by which later pilots'
slots are cut (hpsearch.pilot.executor). The local executor's limit is executor.timeout:
no scouts.

Promotion segments are sized per rung: a segment to step budget B asks for what the
completed segments to B took (the first `scouts` of them at the ceiling), as each rung of
ASHA runs a different number of steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from hpsearch.driver.retry import format_slurm_time, slurm_time_seconds
from hpsearch.launch.attempt import Launch
from hpsearch.slurm.failures import SlurmError
from hpsearch.slurm.sacct import Peak
from hpsearch.spec.model import Resources, memory_mb
from hpsearch.store.store import Store

PREFIX = "scouts:"
QUANTILE = 0.95
MARGIN = 1.5        # on the 95th percentile
GROWTH = 1.5        # a resource's estimate after each trial killed at its scouted limit
MIN_TIME_S = 60     # Slurm time limits are whole minutes
MIN_MEM_MB = 100
SIZED_FAILURES = {"timeout": "time", "out_of_memory": "mem"}


def quantile(values: list[float], q: float = QUANTILE) -> float:
    """The q-quantile of `values`, the nearest rank (with few values: the largest)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def scouted(row: dict) -> bool:
    """Whether an attempt (a row of the store's attempts) asked for scouted sizes."""
    return (row.get("overrides") or "").startswith(PREFIX)


@dataclass(frozen=True)
class Sizing:
    """What a new attempt asks for: seconds and megabytes (None: the ceiling), and why."""

    time_s: int | None
    mem_mb: int | None
    note: str

    def apply(self, launch: Launch, resources: Resources, in_pilots: bool) -> Launch:
        """The launch asking for these sizes: sbatch options of its job, or in a pilot its
        own time limit and memory (resources.time and mem of its assignment)."""
        if in_pilots:
            own = launch.resources or resources
            sized = replace(own, time=format_slurm_time(self.time_s) if self.time_s
                            else own.time, mem=f"{self.mem_mb}M" if self.mem_mb else own.mem)
            return replace(launch, resources=sized) if self.time_s or self.mem_mb else launch
        options = ((f"--time={format_slurm_time(self.time_s)}",) if self.time_s else ()) \
            + ((f"--mem={self.mem_mb}M",) if self.mem_mb else ())
        return replace(launch, sbatch_extra=(*options, *launch.sbatch_extra))


@dataclass
class Scouts:
    resources: Resources
    store: Store
    slurm: object = None
    in_pilots: bool = False  # measured from the store (the module's docstring)
    peaks: dict[tuple[int, int], Peak] = field(default_factory=dict)  # (trial, attempt) ->
    told: set[str] = field(default_factory=set)  # notes given once           # what it took

    def __post_init__(self) -> None:
        if self.in_pilots:
            return
        if self.slurm is None:
            from hpsearch.slurm.commands import Slurm
            self.slurm = Slurm()

    # -- measuring -------------------------------------------------------------------------
    def _rows(self, budget: int | None) -> list[dict]:
        """The attempts measured (completed, or paused: a segment that ended well) or cut
        short at a limit; with `budget`, only the promotion segments to that step budget."""
        return list(self.store.db.query(
            "select trial, attempt, job_id, state, failure, overrides, started, finished, "
            "max_rss_mb from attempts where "
            "job_id is not null and (state in ('completed', 'paused') or failure in "
            "('timeout', 'out_of_memory'))" + (" and budget = ?" if budget is not None else ""),
            [budget] if budget is not None else []))

    def _measure(self, rows: list[dict]) -> None:
        new = [r for r in rows if r["state"] in ("completed", "paused")
               and (r["trial"], r["attempt"]) not in self.peaks]
        if not new:
            return
        if self.in_pilots:  # the attempt's own run time and peak memory in its pilot
            self.peaks.update({(r["trial"], r["attempt"]): Peak(r["finished"] - r["started"],
                                                                r["max_rss_mb"])
                               for r in new if r["started"] and r["finished"]})
            return
        try:
            found = self.slurm.sacct_peaks([r["job_id"] for r in new])  # type: ignore[attr-defined]
        except SlurmError:
            return  # asked again with the next launch
        self.peaks.update({(r["trial"], r["attempt"]): (found or {})[r["job_id"]]
                           for r in new if r["job_id"] in (found or {})})

    # -- sizing ------------------------------------------------------------------------------
    def sizing(self, budget: int | None = None) -> Sizing | None:
        """A new attempt's sizes and their stored note (with `budget`: of a promotion
        segment to that step budget) once enough attempts (segments to that budget)
        completed, else None: the ceiling."""
        rows = self._rows(budget)
        self._measure(rows)
        done = [self.peaks[key] for r in rows if (key := (r["trial"], r["attempt"])) in self.peaks]
        if len(done) < self.resources.scouts:
            return None
        grown = {kind: GROWTH ** sum(1 for r in rows if scouted(r)
                                     and SIZED_FAILURES.get(r["failure"]) == kind)
                 for kind in ("time", "mem")}
        seconds, said = self._time(done, grown["time"])
        megabytes, mem_said = self._mem(done, grown["mem"])
        said += [mem_said] if mem_said else []
        if seconds is None and megabytes is None:
            return None
        rung = f"segments to step {budget}: " if budget is not None else ""
        return Sizing(seconds, megabytes, f"{PREFIX} {rung}" + "; ".join(said))

    def _time(self, done: list[Peak], grown: float) -> tuple[int | None, list[str]]:
        if "time" not in self.resources.auto or not self.resources.time:
            return None, []
        took = [p.elapsed for p in done if p.elapsed is not None]
        if not took:
            return None, []
        ceiling = slurm_time_seconds(self.resources.time)
        wanted = quantile(took) * MARGIN * grown
        seconds = min(ceiling, max(MIN_TIME_S, math.ceil(wanted / 60) * 60))
        return seconds, [f"time {format_slurm_time(seconds)} (p95 {quantile(took):.0f} s of "
                         f"{len(took)} runs x {MARGIN * grown:g}, ceiling {self.resources.time})"]

    def _mem(self, done: list[Peak], grown: float) -> tuple[int | None, str | None]:
        if "mem" not in self.resources.auto or not self.resources.mem:
            return None, None
        took = [p.max_rss_mb for p in done if p.max_rss_mb is not None]
        if not took:
            return None, ("mem at its ceiling: no peak memory of the runs so far (those on "
                          "a pilot's other nodes run through srun, unseen)" if self.in_pilots
                          else "mem at its ceiling: sacct recorded no MaxRSS of the runs so "
                          "far (a step shorter than the cluster's JobAcctGatherFrequency)")
        ceiling_mb = memory_mb(self.resources.mem)
        megabytes = math.ceil(min(ceiling_mb, max(MIN_MEM_MB, quantile(took) * MARGIN * grown)))
        return megabytes, (f"mem {megabytes}M (p95 {quantile(took):.0f}M of {len(took)} runs "
                           f"x {MARGIN * grown:g}, ceiling {self.resources.mem})")

    @staticmethod
    def at_limit(row: dict, failure: str | None) -> bool:
        """Whether an attempt failed at a limit the scouts set: it runs again at the
        ceiling, not counted as a failure."""
        return scouted(row) and failure in SIZED_FAILURES

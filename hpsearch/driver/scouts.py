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
a failure is known to be the scouts' (also after a restart). Slurm jobs only: pilots hold
their own time limits, and the local executor's limit is executor.timeout.

Promotion segments are sized per rung: a segment to step budget B asks for what the
completed segments to B took (the first `scouts` of them at the ceiling), as each rung of
ASHA runs a different number of steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from hpsearch.driver.retry import format_slurm_time, slurm_time_seconds
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


@dataclass
class Scouts:
    resources: Resources
    store: Store
    slurm: object = None
    peaks: dict[str, Peak] = field(default_factory=dict)  # job id -> what it took
    told: set[str] = field(default_factory=set)  # notes given once

    def __post_init__(self) -> None:
        if self.slurm is None:
            from hpsearch.slurm.commands import Slurm
            self.slurm = Slurm()

    # -- measuring -------------------------------------------------------------------------
    def _rows(self, budget: int | None) -> list[dict]:
        """The attempts measured (completed, or paused: a segment that ended well) or cut
        short at a limit; with `budget`, only the promotion segments to that step budget."""
        return list(self.store.db.query(
            "select trial, attempt, job_id, state, failure, overrides from attempts where "
            "job_id is not null and (state in ('completed', 'paused') or failure in "
            "('timeout', 'out_of_memory'))" + (" and budget = ?" if budget is not None else ""),
            [budget] if budget is not None else []))

    def _measure(self, rows: list[dict]) -> None:
        new = [r["job_id"] for r in rows if r["state"] in ("completed", "paused")
               and r["job_id"] not in self.peaks]
        if not new:
            return
        try:
            found = self.slurm.sacct_peaks(new)  # type: ignore[attr-defined]
        except SlurmError:
            return  # asked again with the next launch
        self.peaks.update(found or {})

    # -- sizing ------------------------------------------------------------------------------
    def options(self, budget: int | None = None) -> tuple[tuple[str, ...], str | None]:
        """The sbatch options and the stored note of a new attempt (with `budget`: of a
        promotion segment to that step budget): the scouted sizes once enough attempts
        (segments to that budget) completed, else ((), None): the ceiling."""
        rows = self._rows(budget)
        self._measure(rows)
        done = [self.peaks[r["job_id"]] for r in rows if r["job_id"] in self.peaks]
        if len(done) < self.resources.scouts:
            return (), None
        grown = {kind: GROWTH ** sum(1 for r in rows if scouted(r)
                                     and SIZED_FAILURES.get(r["failure"]) == kind)
                 for kind in ("time", "mem")}
        options, said = [], []
        if "time" in self.resources.auto and self.resources.time:
            took = [p.elapsed for p in done if p.elapsed is not None]
            if took:
                ceiling = slurm_time_seconds(self.resources.time)
                wanted = quantile(took) * MARGIN * grown["time"]
                seconds = min(ceiling, max(MIN_TIME_S, math.ceil(wanted / 60) * 60))
                options.append(f"--time={format_slurm_time(seconds)}")
                said.append(f"time {format_slurm_time(seconds)} (p95 {quantile(took):.0f} s of "
                            f"{len(took)} runs x {MARGIN * grown['time']:g}, ceiling "
                            f"{self.resources.time})")
        if "mem" in self.resources.auto and self.resources.mem:
            took = [p.max_rss_mb for p in done if p.max_rss_mb is not None]
            if took:
                ceiling_mb = memory_mb(self.resources.mem)
                megabytes = math.ceil(min(ceiling_mb, max(MIN_MEM_MB, quantile(took) * MARGIN
                                                          * grown["mem"])))
                options.append(f"--mem={megabytes}M")
                said.append(f"mem {megabytes}M (p95 {quantile(took):.0f}M of {len(took)} runs "
                            f"x {MARGIN * grown['mem']:g}, ceiling {self.resources.mem})")
            else:
                said.append("mem at its ceiling: sacct recorded no MaxRSS of the runs so far "
                            "(a step shorter than the cluster's JobAcctGatherFrequency)")
        if not options:
            return (), None
        rung = f"segments to step {budget}: " if budget is not None else ""
        return tuple(options), f"{PREFIX} {rung}" + "; ".join(said)

    @staticmethod
    def at_limit(row: dict, failure: str | None) -> bool:
        """Whether an attempt failed at a limit the scouts set: it runs again at the
        ceiling, not counted as a failure."""
        return scouted(row) and failure in SIZED_FAILURES

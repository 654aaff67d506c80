"""What an attempt used, and what a trial cost: the one definition that the report's
resource and budget tables (hpsearch.report.data, .budget) and the cost objectives
(hpsearch.driver.cost) share.

An attempt's node-hours are its nodes x the hours it ran (in a pilot, x the share of each
node it held: `share`), its GPU-hours its GPUs x those hours. The time, nodes and GPUs come
from sacct's record of its job where there is one that says how long it ran (ElapsedRaw,
NNodes, AllocTRES), else from the store: its start and end (or now, while it runs), its
nodes (at least one) and the GPUs the executor gave its trial. A trial's cost sums every
attempt it started (failed, preempted and cancelled ones, and every promotion segment,
included).

An attempt's start-up (hpsearch.ingest.first_call: from its start to its code's first call
of hpsearch.trial) is part of what it held, and of the report's figures; the cost
objectives leave it out (trial_cost(startup=False)): a trial is charged from its first
call on. Timed by sacct, from the job's start, the charge is the job's elapsed time up to
the store's end of the attempt counted from that first call, at most the elapsed time.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hpsearch.spec.model import COST_METRICS

if TYPE_CHECKING:
    from hpsearch.slurm.sacct import JobUsage


@dataclass
class AttemptUsage:
    trial: int
    attempt: int
    kind: str            # how it ended: hpsearch.report.data's CLASSES
    seconds: float
    nodes: int
    gpus: int
    source: str          # "sacct", "store", or "pilot" (the store's times, in a pilot)
    pilot: int | None = None  # the pilot it ran in
    share: float = 1.0   # of each of its nodes: in a pilot, its slots of the node's
    startup: float = 0.0  # of `seconds`, those before its code first called hpsearch.trial

    @property
    def node_hours(self) -> float:
        return self.nodes * self.share * self.seconds / 3600

    @property
    def gpu_hours(self) -> float:
        return self.gpus * self.seconds / 3600

    @property
    def run_seconds(self) -> float:
        """Its seconds from its code's first call of hpsearch.trial on."""
        return max(0.0, self.seconds - self.startup)


def gpu_count(gpus: str | None) -> int:
    """The GPUs of a trial's stored device list ("0,1" -> 2; none -> 0)."""
    return len([g for g in (gpus or "").split(",") if g.strip()])


def attempt_usage(trial: int, attempt: int, kind: str, started: float | None,
                  finished: float | None, now: float, nodes: int, gpus: int,
                  record: JobUsage | None = None, pilot: int | None = None,
                  share: float = 1.0, startup_s: float | None = None) -> AttemptUsage | None:
    """One attempt's usage: from `record` (sacct's, of the attempt's own job) when it says
    how long the job ran, else from the store's `started` and `finished` (`now` while it
    runs), `nodes` (its hosts; at least one), `share` (of each node) and `gpus`. None if it
    never started. startup_s: the store's start-up of the attempt (from `started`), or
    None where the trial never called hpsearch.trial."""
    end = finished if finished is not None else now
    if record is not None and record.elapsed is not None:
        used = AttemptUsage(trial, attempt, kind, record.elapsed, record.nodes or 1,
                            record.gpus, "sacct")
        if startup_s is not None and started is not None:  # `started` may be its submission
            ran = min(record.elapsed, max(0.0, end - (started + startup_s)))
            used.startup = record.elapsed - ran
        return used
    if started is None:
        return None
    seconds = max(0.0, end - started)
    return AttemptUsage(trial, attempt, kind, seconds, max(1, nodes), gpus,
                        "store" if pilot is None else "pilot", pilot, share,
                        min(seconds, startup_s or 0.0))


def trial_cost(usage: Iterable[AttemptUsage], startup: bool = True) -> dict[str, float]:
    """A trial's cost as the objective metrics name it (COST_METRICS): node_hours and
    gpu_hours summed over its attempts, and wall_s, the seconds they ran: with `startup`,
    all they held (the report's); without, from each one's first call of hpsearch.trial
    on (the cost objectives')."""
    items = list(usage)
    seconds = [u.seconds if startup else u.run_seconds for u in items]
    cost = {"node_hours": sum(u.nodes * u.share * s / 3600 for u, s in zip(items, seconds)),
            "gpu_hours": sum(u.gpus * s / 3600 for u, s in zip(items, seconds)),
            "wall_s": sum(seconds)}
    assert tuple(cost) == COST_METRICS
    return cost

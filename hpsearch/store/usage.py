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
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hpsearch.spec.model import COST_METRICS

if TYPE_CHECKING:
    from hpsearch.slurm.parse import JobUsage


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

    @property
    def node_hours(self) -> float:
        return self.nodes * self.share * self.seconds / 3600

    @property
    def gpu_hours(self) -> float:
        return self.gpus * self.seconds / 3600


def gpu_count(gpus: str | None) -> int:
    """The GPUs of a trial's stored device list ("0,1" -> 2; none -> 0)."""
    return len([g for g in (gpus or "").split(",") if g.strip()])


def attempt_usage(trial: int, attempt: int, kind: str, started: float | None,
                  finished: float | None, now: float, nodes: int, gpus: int,
                  record: JobUsage | None = None, pilot: int | None = None,
                  share: float = 1.0) -> AttemptUsage | None:
    """One attempt's usage: from `record` (sacct's, of the attempt's own job) when it says
    how long the job ran, else from the store's `started` and `finished` (`now` while it
    runs), `nodes` (its hosts; at least one), `share` (of each node) and `gpus`. None if it
    never started."""
    if record is not None and record.elapsed is not None:
        return AttemptUsage(trial, attempt, kind, record.elapsed, record.nodes or 1,
                            record.gpus, "sacct")
    if started is None:
        return None
    end = finished if finished is not None else now
    return AttemptUsage(trial, attempt, kind, max(0.0, end - started), max(1, nodes), gpus,
                        "store" if pilot is None else "pilot", pilot, share)


def trial_cost(usage: Iterable[AttemptUsage]) -> dict[str, float]:
    """A trial's cost as the objective metrics name it (COST_METRICS): node_hours and
    gpu_hours summed over its attempts, and wall_s, the seconds they ran."""
    items = list(usage)
    cost = {"node_hours": sum(u.node_hours for u in items),
            "gpu_hours": sum(u.gpu_hours for u in items),
            "wall_s": sum(u.seconds for u in items)}
    assert tuple(cost) == COST_METRICS
    return cost

"""Pilots sized from what the scouts measured (`resources.mem` or `time: auto CEILING`,
issue 40 item 3, docs/brokerage.md#scouts): their slots' memory and their time limit.

A pilot asks Slurm for its slots' memory when it is submitted. Until the scouts have
measured the first trials, a slot has the trials' ceiling. Once they have, each ready attempt
carries its scouted memory (hpsearch.driver.scouts.Sizing.apply: its assignment's `mem`), and
a pilot submitted for them gets slots of the largest a ready attempt asks for (per slot it
takes), never more than the ceiling: a smaller pilot job starts sooner (it fits where a node
has less memory free). An attempt binds only to a pilot whose slots hold it (after a kill at
the scouted limit the estimate grows, and pilots cut smaller no longer take it).

Time likewise: until the scouts have sized the trials, a pilot asks for executor.pilots.time
(the site's own), which must hold a trial at its ceiling. Once they have, a pilot submitted
for sized trials asks for TRIALS_PER_PILOT of the longest one after another (times its retry
factor) plus PILOT_RESERVE, in whole minutes, if that is shorter: a shorter job fits the
backfill windows a long one does not, and it still runs a run of trials for its queue wait.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hpsearch.launch.attempt import Launch
from hpsearch.spec.durations import parse_time_limit
from hpsearch.spec.model import PILOT_RESERVE, SlurmJob, memory_mb, slot_width

TRIALS_PER_PILOT = 10  # sized trials one slot of a time-sized pilot has time for


@dataclass(frozen=True)
class Cut:
    """What a new pilot asks for where the scouts sized it; None: as the spec says."""

    slot_mem_mb: int | None = None
    time: str | None = None  # its time limit, as Slurm writes it
    trial_time: float | None = None  # with `time`: the longest trial it is for, in seconds
    # (the pilot takes no new trial with less time left than that: not the ceiling's)

    def describe(self) -> str:
        said = ([f"slots of {self.slot_mem_mb}M"] if self.slot_mem_mb else []) + (
            [f"time {self.time}"] if self.time else [])
        return ", ".join(said)


AS_SPEC = Cut()  # a pilot as the spec asks for it


def within(cut: Cut, pilot_time: str) -> Cut:
    """The cut at a place whose pilots ask for `pilot_time`: its time only if shorter."""
    shorter = cut.time and (parse_time_limit(cut.time) or 0) < (parse_time_limit(pilot_time)
                                                                 or math.inf)
    return cut if shorter or cut.time is None else Cut(cut.slot_mem_mb)


def cut_for(ready: list[Launch], job: SlurmJob, pilot_time: str) -> Cut:
    """The cut of a pilot submitted now for the `ready` attempts, whose place's pilots ask
    for `pilot_time` (executor.pilots.time, or the site's)."""
    found = time_for(ready, job, pilot_time)
    return Cut(slot_mem_for(ready, job), *(found or (None, None)))


def time_for(ready: list[Launch], job: SlurmJob, pilot_time: str
             ) -> tuple[str, float] | None:
    """(TRIALS_PER_PILOT of the longest sized ready attempt plus PILOT_RESERVE, that
    longest one's seconds) where that is shorter than `pilot_time`; else None."""
    ceiling = parse_time_limit(job.resources.time) if job.resources.time else None
    limit = parse_time_limit(pilot_time)
    if "time" not in job.resources.auto or not ready or not ceiling or not limit:
        return None
    own = [parse_time_limit(launch.resources.time) if launch.resources and
           launch.resources.time else None for launch in ready]
    if any(seconds is None or seconds >= ceiling for seconds in own):
        return None  # one at its ceiling: a scout, or after a kill at its scouted limit
    longest = max((seconds or 0.0) * launch.time_factor for seconds, launch in zip(own, ready))
    minutes = math.ceil((TRIALS_PER_PILOT * longest + PILOT_RESERVE) / 60)
    return (f"{minutes // 60:02d}:{minutes % 60:02d}:00", longest) if minutes * 60 < limit \
        else None


def ceiling_mb(job: SlurmJob) -> float | None:
    """A slot's memory as the spec asks (the smallest trial's share; None: none asked)."""
    return memory_mb(job.slot.mem) if job.slot.mem else None


def per_slot_mb(launch: Launch, job: SlurmJob) -> float | None:
    """The memory an attempt asks for on each slot it takes (its own `mem` over the slots
    it takes on a node), or None where it asks for none of its own (the ceiling)."""
    own = launch.resources
    if own is None or not own.mem or job.resources.mem is None:
        return None
    return memory_mb(own.mem) / max(1, slot_width(own, job.slot))


def slot_mem_for(ready: list[Launch], job: SlurmJob) -> int | None:
    """The slot memory of a pilot submitted now for the `ready` attempts: the largest per
    slot of theirs, where each is sized below the ceiling; else None (the ceiling)."""
    if "mem" not in job.resources.auto or not ready:
        return None
    ceiling = ceiling_mb(job)
    wanted = [per_slot_mb(launch, job) for launch in ready]
    if ceiling is None or any(w is None for w in wanted):
        return None
    largest = math.ceil(max(w for w in wanted if w is not None))
    return largest if largest < ceiling else None


def holds(slot_mem: int | None, launch: Launch, job: SlurmJob) -> bool:
    """Whether a pilot of slots of `slot_mem` (None: the ceiling) holds the attempt."""
    if slot_mem is None:
        return True
    wanted = per_slot_mb(launch, job)
    ceiling = ceiling_mb(job)
    return (wanted if wanted is not None else ceiling or 0.0) <= slot_mem

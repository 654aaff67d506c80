"""Pilot slots cut to the memory the scouts measured (`resources.mem: auto CEILING`, issue 40
item 3, docs/brokerage.md#scouts).

A pilot asks Slurm for its slots' memory when it is submitted. Until the scouts have
measured the first trials, a slot has the trials' ceiling. Once they have, each ready attempt
carries its scouted memory (hpsearch.driver.scouts.Sizing.apply: its assignment's `mem`), and
a pilot submitted for them gets slots of the largest a ready attempt asks for (per slot it
takes), never more than the ceiling: a smaller pilot job starts sooner (it fits where a node
has less memory free). An attempt binds only to a pilot whose slots hold it (after a kill at
the scouted limit the estimate grows, and pilots cut smaller no longer take it).
"""

from __future__ import annotations

import math

from hpsearch.launch.attempt import Launch
from hpsearch.spec.model import SlurmJob, memory_mb, slot_width


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

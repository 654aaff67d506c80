"""A pilot's trial born on its slot's cores: the process that spawns it (the pilot on its own
node, a node agent on another) narrows its own thread to the slot's CPUs around the spawn,
so the trial's shell inherits them from its first instruction.

The slot is HPSEARCH_CPU_FIELDS (1-based positions of the CPUs the pilot holds on the node,
HPSEARCH_NODE_CPUS of them; hpsearch.slurm.environment.for_pilot_trial). As the shell's
CPU_NARROW (hpsearch.launch.base), it narrows only where the spawning process is allowed
exactly the pilot's CPUs on the node; where it is not (Slurm bound nothing, or fewer), the
trial's shell runs CPU_NARROW, which says on its stderr why it could not. Before, every
trial's shell ran CPU_NARROW itself: an awk and a taskset, 3.6 ms and 2.3 CPU-ms a trial
here. A trial's own srun steps still narrow themselves (rank_script).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager


def slot_cpus(env: Mapping[str, str]) -> set[int] | None:
    """The CPUs of the trial's slot on this node, or None where this process cannot tell
    them: no slot named, or its allowed CPUs are not the pilot's on the node."""
    fields, node_cpus = env.get("HPSEARCH_CPU_FIELDS", ""), env.get("HPSEARCH_NODE_CPUS", "")
    try:
        positions = [int(field) for field in fields.split(",")]
        allowed = sorted(os.sched_getaffinity(0))
        if not fields or len(allowed) != int(node_cpus):
            return None
    except ValueError:
        return None
    if any(not 1 <= position <= len(allowed) for position in positions):
        return None
    return {allowed[position - 1] for position in positions}


@contextmanager
def spawning_on(cpus: set[int] | None) -> Iterator[bool]:
    """Run the block (a spawn: the child inherits this thread's CPUs) on `cpus`, then give
    this thread its CPUs back. Yields whether it narrowed (False: `cpus` None, or refused)."""
    if cpus is None:
        yield False
        return
    saved = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, cpus)
    except OSError:
        yield False
        return
    try:
        yield True
    finally:
        os.sched_setaffinity(0, saved)

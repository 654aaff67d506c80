"""A pilot's trial born on its slot's cores: the process that spawns it (the pilot on its own
node, a node agent on another) narrows its own thread to the slot's CPUs around the spawn,
so the trial's shell inherits them from its first instruction.

The slot is HPSEARCH_CPU_FIELDS (1-based positions of the CPUs the pilot holds on the node,
HPSEARCH_NODE_CPUS of them; hpsearch.slurm.environment.for_pilot_trial). As the shell's
CPU_NARROW (hpsearch.launch.base), it narrows only where the spawning process is allowed
exactly the pilot's CPUs on the node; where it is not (Slurm bound nothing, or fewer), the
spawning process writes on the trial's stderr why (not_narrowed: CPU_NARROW's words). The
trial's shell, which inherits the same CPUs and environment, could not narrow either: it
used to try (an awk, a sed and a subshell, 20-35 ms a trial on the loaded emulated cluster,
where no node has the CPUs it claims). Before, every trial's shell ran CPU_NARROW itself: an
awk and a taskset, 3.6 ms and 2.3 CPU-ms a trial here. A trial's own srun steps still
narrow themselves (rank_script).
"""

from __future__ import annotations

import os
import shutil
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


def not_narrowed(env: Mapping[str, str]) -> str:
    """The warning for a trial that could not be narrowed to its slot's CPUs (the words of
    CPU_NARROW's, which a trial's own srun step still prints)."""
    allowed = _ranges(sorted(os.sched_getaffinity(0)))
    taskset = "" if shutil.which("taskset", path=env.get("PATH")) else ", no taskset"
    return (f"hpsearch: warning: this step was not narrowed to the cores of its trial "
            f"(positions {env.get('HPSEARCH_CPU_FIELDS', '')} of the pilot "
            f"{env.get('HPSEARCH_NODE_CPUS', '')} CPUs on the node; it may run on CPUs "
            f"{allowed}{taskset}): it may share cores with other trials\n")


def _ranges(cpus: list[int]) -> str:
    """0,1,2,5 as /proc's Cpus_allowed_list writes it: 0-2,5."""
    runs: list[list[int]] = []
    for cpu in cpus:
        if runs and cpu == runs[-1][1] + 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)

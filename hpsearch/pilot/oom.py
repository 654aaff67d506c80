"""Whether a trial in a pilot was killed for want of memory (docs/brokerage.md#scouts).

A Slurm job of its own that runs out of memory ends OUT_OF_MEMORY in sacct. A trial in a
pilot has no job: the kernel's OOM killer (the pilot job's cgroup is over its --mem) sends
SIGKILL to its largest process, and the pilot sees an exit by SIGKILL. The pilot calls that
out_of_memory (so a trial sized by the scouts runs again at the ceiling, not counted as a
failure) when it died by SIGKILL and either its cgroup counted an OOM kill while it ran
(memory.events' oom_kill, cgroup v2), or its peak memory (its processes' sum at a
sample, or wait4's ru_maxrss) reached
NEAR of its memory share. Emulated test clusters do not confine memory; the second rule
is what can be seen there.
"""

from __future__ import annotations

from pathlib import Path

NEAR = 0.9          # of its share: a peak this close to it, then SIGKILL: out of memory
SIGKILL_EXITS = (137, -9)


def oom_kills(cgroup_root: Path = Path("/sys/fs/cgroup"),
              proc_cgroup: Path = Path("/proc/self/cgroup")) -> int | None:
    """OOM kills counted so far in this process's cgroup (v2), or None where not known."""
    try:
        line = next(x for x in proc_cgroup.read_text().splitlines() if x.startswith("0::"))
        events = (cgroup_root / line[3:].lstrip("/") / "memory.events").read_text()
    except (OSError, StopIteration, ValueError):
        return None
    for row in events.splitlines():
        key, _, value = row.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value)
    return None


def verdict(exit_code: int | None, peak_mb: float | None, share_mb: float | None,
            kills_before: int | None, kills_now: int | None) -> str | None:
    """Why the trial is taken to have run out of memory, or None."""
    if exit_code not in SIGKILL_EXITS:
        return None
    if kills_before is not None and kills_now is not None and kills_now > kills_before:
        return "killed by SIGKILL while its pilot's cgroup counted an OOM kill"
    if peak_mb is not None and share_mb and peak_mb >= NEAR * share_mb:
        return (f"killed by SIGKILL at a peak of {peak_mb:.0f}M of its {share_mb:.0f}M "
                "(out of memory)")
    return None

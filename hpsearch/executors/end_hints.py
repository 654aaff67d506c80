"""A Slurm job's end, seen in its trial dir before the next query would show it.

The executor asks Slurm less often while nothing changes (its back-off: 1, 1.5, 2.25, 3.4 s
... apart), so an end came to the driver 1.0-2.7 s late while trials of 8 s ran
(benchmarks/README.md, brokerage.py's busy scenario), and the node it freed waited that long
for the next trial. The batch script's exit trap writes the attempt's exit code to the trial
dir (launch.attempt.EXIT_TRAP) as the job ends, on the filesystem the driver shares: looking
for that file (a stat and a read of a few bytes a running job, every HINT_EVERY) tells the
executor to ask Slurm now. Slurm's answer stays the end's authority (its state says a
timeout, an out-of-memory kill or a node failure); the file only says when to ask.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from hpsearch.launch.attempt import read_exit_code

HINT_EVERY = 0.5  # seconds between looks at the running jobs' exit_code files


class _RunningJob(Protocol):
    trial_id: int
    attempt: int
    state: str
    trial_dir: Path | None


class EndHints:
    def __init__(self) -> None:
        self.next_look = 0.0
        self.told: set[tuple[int, int]] = set()  # (trial, attempt) whose end was hinted

    def new_end(self, jobs: Iterable[_RunningJob]) -> bool:
        """Whether a running job's attempt wrote its exit code since the last look (each
        attempt's once); looks at most every HINT_EVERY."""
        now = time.monotonic()
        if now < self.next_look:
            return False
        self.next_look = now + HINT_EVERY
        found = False
        for job in jobs:
            key = (job.trial_id, job.attempt)
            if job.state != "RUNNING" or job.trial_dir is None or key in self.told:
                continue
            if read_exit_code(job.trial_dir, job.attempt, lambda _why: None) is not None:
                self.told.add(key)
                found = True
        return found

    def awaited(self, jobs: Iterable[_RunningJob]) -> bool:
        """Whether a job whose end was hinted has not been seen to end yet (ask again
        soon: Slurm may list it running, or completing, a moment longer)."""
        live = {(job.trial_id, job.attempt) for job in jobs}
        self.told &= live
        return bool(self.told)

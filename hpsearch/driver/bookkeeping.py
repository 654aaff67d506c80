"""The driver's own work per trial (its launch plus its finalize, waiting excluded), for the
benchmarks that judge it flat (overhead.py, scale.py, slurm_throughput.py).

One float a trial, indexed by its dense id: a list of (id, seconds) pairs was about 170
bytes a trial of the driver's memory, which grew with every trial run (issue 42 item 5).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator


class Bookkeeping:
    def __init__(self) -> None:
        self.seconds = array("d")  # by trial id; 0.0: none recorded
        self.seen = array("b")     # by trial id; 1 once any was recorded

    def add(self, trial_id: int, seconds: float) -> None:
        if trial_id >= len(self.seconds):
            grow = trial_id + 1 - len(self.seconds)
            self.seconds.extend([0.0] * grow)
            self.seen.extend([0] * grow)
        self.seconds[trial_id] += seconds
        self.seen[trial_id] = 1

    def __iter__(self) -> Iterator[tuple[int, float]]:
        """(trial id, its seconds of driver work so far), for each trial with any."""
        return ((tid, s) for tid, (s, seen) in enumerate(zip(self.seconds, self.seen)) if seen)

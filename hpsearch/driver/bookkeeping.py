"""The driver's own work per trial (its launch plus its finalize, waiting excluded), for the
benchmarks that judge it flat (overhead.py, scale.py, slurm_throughput.py).

One float a trial, indexed by its dense id (NaN: none recorded): a list of (id, seconds)
pairs was about 170 bytes a trial of the driver's memory, which grew with every trial run
(issue 42 item 5).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterator

NONE = math.nan  # a trial with no seconds recorded (0.0 is a recorded value)


class Bookkeeping:
    def __init__(self) -> None:
        self.seconds = array("d")  # by trial id

    def add(self, trial_id: int, seconds: float) -> None:
        if trial_id >= len(self.seconds):
            self.seconds.extend([NONE] * (trial_id + 1 - len(self.seconds)))
        held = self.seconds[trial_id]
        self.seconds[trial_id] = seconds if math.isnan(held) else held + seconds

    def __iter__(self) -> Iterator[tuple[int, float]]:
        """(trial id, its seconds of driver work so far), for each trial with any."""
        return ((tid, s) for tid, s in enumerate(self.seconds) if not math.isnan(s))

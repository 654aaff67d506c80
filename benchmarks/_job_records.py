"""How many job records slurmctld holds while a search runs (benchmarks/scale.py on Slurm).

slurmctld keeps a record per job, and per array task once the task has started, until
MinJobAge seconds after it ended; once MaxJobCount records are held, it refuses every new
job of every user ("Slurm temporarily unable to accept job"). A thread counts the records
every `every` seconds with `squeue -h -t all -o %i` (one line per job or started task; an
array's pending tasks share one line, as they share one record). Other users' jobs count
too: MaxJobCount is the cluster's, not the user's. One squeue per 30 s is noise next to the
driver's own RPCs (benchmarks/slurm_rpc.py).
"""

from __future__ import annotations

import subprocess
import threading
from dataclasses import dataclass, field

from hpsearch.slurm.commands import Slurm


def count_records() -> int:
    out = subprocess.run(["squeue", "-h", "-t", "all", "-o", "%i"], capture_output=True,
                         text=True, check=True).stdout
    return sum(1 for line in out.splitlines() if line.strip())


@dataclass
class JobRecords:
    every: float = 30.0
    samples: list[int] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> JobRecords:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                self.samples.append(count_records())
            except (OSError, subprocess.CalledProcessError):
                pass  # slurmctld busy for a moment: the next sample counts

    def report(self) -> tuple[str, bool]:
        """A line for the benchmark, and whether the peak stayed under half MaxJobCount."""
        peak = max(self.samples, default=0)
        slurm = Slurm()  # its config_value reads `scontrol show config` once
        limit = int(slurm.config_value("MaxJobCount") or 10000)
        age = slurm.config_value("MinJobAge") or "?"
        return (f"slurmctld job records: peak {peak:,} of MaxJobCount {limit:,} (MinJobAge "
                f"{age}; {len(self.samples)} samples, every {self.every:g} s)",
                peak <= limit / 2)

"""Read the GPU samples of a trial (hpsearch.gpu.sampler's gpu.<node>.jsonl files) and add
them up per attempt and node.

The driver reads on from where the last read stopped, as it reads metrics (a Cursor per
file, stored in the same commit as what the lines added up to: a resumed driver adds no
sample twice). Each file is read only if it is a regular file of the experiment's owner,
opened without following a link and without blocking (hpsearch.ingest.lines): a link, a
FIFO or another user's file gives nothing, and `refused` says why, once per file. A line
that is not a sample is skipped without a word: the samples are telemetry, not results.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from hpsearch.ingest.numbered_files import NumberedFiles, SavedState

FILE = "gpu.{node}.jsonl"  # hpsearch.gpu.sampler.FILE
MAX_NODES = 4096


@dataclass
class GpuTally:
    """What the samples of one attempt on one node add up to."""

    attempt: int
    node: int
    gpus: int = 0                  # the most GPUs one sample showed (the node's held GPUs)
    samples: int = 0               # lines
    gpu_samples: int = 0           # (line, GPU) pairs
    util_sum: float = 0.0          # of utilization.gpu (percent) over (line, GPU) pairs
    busy_gpu_seconds: float = 0.0  # sum of util/100 x dt over (line, GPU) pairs
    mem_max_mib: float = 0.0
    first: float | None = None     # time of the first and last sample
    last: float | None = None

    def add(self, when: float, dt: float, util: list[float], mem: list[float]) -> None:
        self.gpus = max(self.gpus, len(util))
        self.samples += 1
        self.gpu_samples += len(util)
        self.util_sum += sum(util)
        self.busy_gpu_seconds += sum(u / 100 for u in util) * dt
        self.mem_max_mib = max(self.mem_max_mib, *mem)
        self.first = when if self.first is None else min(self.first, when)
        self.last = when if self.last is None else max(self.last, when)


def parse(data: bytes) -> tuple[int, float, float, list[float], list[float]] | None:
    """(attempt, time, dt, util, mem_mib) of one sample line; None if it is not one."""
    try:
        rec = json.loads(data)
        attempt, when, dt = rec["attempt"], float(rec["time"]), float(rec["dt"])
        util = [float(u) for u in rec["util"]]
        mem = [float(m) for m in rec["mem_mib"]]
    except (ValueError, TypeError, KeyError, AttributeError):  # UnicodeDecodeError included
        return None
    if (not isinstance(attempt, int) or isinstance(attempt, bool) or not util
            or len(mem) != len(util) or not 0 < dt <= 86400
            or not all(0 <= u <= 100 for u in util)
            or not all(math.isfinite(x) and x >= 0 for x in (when, *mem))):
        return None
    return attempt, when, dt, util, mem


class GpuSamples(SavedState):
    """The sample files of one trial, and where reading them stands."""

    def __init__(self, trial_dir: Path, state: object = None) -> None:
        """`state`: what state() returned when it was last stored (None: from the start)."""
        self.trial_dir = Path(trial_dir)
        self.nodes = NumberedFiles(self.trial_dir, FILE.replace("{node}", "{}"), MAX_NODES,
                                   state)
        self.refused: list[str] = []  # why a file was not read (each said once)
        self._said: set[str] = set()
        self.mark_saved()

    def state(self) -> dict:
        return self.nodes.cursors()

    def read_new(self, final: bool = False) -> list[GpuTally]:
        """What the lines written since the last call add up to, per attempt and node. Node
        files are looked for from gpu.0.jsonl up to the first that is not there."""
        tallies: dict[tuple[int, int], GpuTally] = {}
        for node, source in self.nodes.sources():
            for line in source.lines(final):
                found = None if line.too_long else parse(line.data)
                if found is not None:
                    attempt, when, dt, util, mem = found
                    tally = tallies.setdefault((attempt, node), GpuTally(attempt, node))
                    tally.add(when, dt, util, mem)
            told = source.refused and f"{source.path.name}: {source.refused}; not read"
            if told and told not in self._said:
                self._said.add(told)
                self.refused.append(told)
        return list(tallies.values())

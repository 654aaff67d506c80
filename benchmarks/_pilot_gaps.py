"""The idle gap between consecutive trials on one pilot slot, read back from the files a
pilot search leaves (benchmarks/slurm_throughput.py prints it).

A pilot does not write which slot a trial held, only its nodes. The slot is recovered by
replaying the pilot's own rule (hpsearch.pilot.slots.Slots.take: the lowest slot index free
on the trial's nodes) over the times in its started/ and ended/ files, ends before starts at
equal times. For each pair of consecutive trials on a slot, four moments are known, all
from this host's clock (driver, pilots and trials share it on the emulated cluster):

    prev.t1     the trial's command wrote its end stamp (`date` after its sleep)
    prev.ended  the pilot wrote ended/T.A.json (it saw the process exit)
    next.assigned  the driver wrote the next assignment into the pilot's inbox
    next.started   the pilot wrote started/T.A.json (claimed, process spawned)
    next.t0     the next trial's command wrote its start stamp (before its sleep)

The file gap is next.started - prev.ended (what the protocol costs); the command gap is
next.t0 - prev.t1 (how long the slot's CPU really had no trial command running, including
the start of a trial on a pilot's other nodes: through its agent there, or an srun
step of its own). Pure functions over dicts, plus
one reader of the pilot dirs.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Run:
    """One attempt as its pilot saw it."""

    pilot: str
    name: str  # T.A.json
    nodes: tuple[str, ...]
    started: float
    ended: float
    assigned: float | None = None
    t0: float | None = None  # the command's own start and end stamps, when it wrote them
    t1: float | None = None
    via: str = "pilot"  # how it started: on the pilot's node (pilot), through the agent on
    # another node (agent), through an `srun --overlap` step of its own there (step)


@dataclass(frozen=True)
class Gap:
    file: float  # next.started - prev.ended
    command: float | None  # next.t0 - prev.t1
    driver: float | None  # next.assigned - prev.ended
    claim: float | None  # next.started - next.assigned
    launch: float | None  # next.t0 - next.started
    via: str  # how the next trial started (Run.via)


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _stamp(path: Path) -> float | None:
    try:
        return float(path.read_text().strip())
    except (OSError, ValueError):
        return None


def read_runs(pilots_dir: Path, trial_dirs: dict[int, Path]) -> list[Run]:
    """Every attempt that started and ended in a pilot under `pilots_dir`. trial_dirs: trial
    id -> its dir, where the command left its stamps `t0` and `t1`."""
    runs = []
    for pilot in sorted(d for d in pilots_dir.iterdir() if d.name.isdigit()):
        for ended_file in sorted([*(pilot / "ended").glob("*.json"),
                                  *(pilot / "done" / "ended").glob("*.json")]):
            name = ended_file.name  # started/ and ended/, or done/ once the driver stored it
            started, ended = _read(ended_file.parent.parent / "started" / name), \
                _read(ended_file)
            if "time" not in started or "time" not in ended:
                continue
            trial_dir = trial_dirs.get(int(name.split(".")[0]))
            nodes = tuple(_expand(started.get("nodes", "")))
            runs.append(Run(pilot.name, name, nodes, float(started["time"]),
                            float(ended["time"]),
                            _read(pilot / "claimed" / name).get("assigned"),
                            _stamp(trial_dir / "t0") if trial_dir else None,
                            _stamp(trial_dir / "t1") if trial_dir else None,
                            str(started.get("via") or ("step" if nodes and nodes[0]
                                                        != started.get("host") else "pilot"))))
    return runs


def _expand(nodes: str) -> list[str]:
    from hpsearch.slurm.hostlist import expand
    return expand(nodes) if nodes else []


def by_slot(runs: list[Run]) -> dict[tuple, list[Run]]:
    """(pilot, nodes, slot index) -> its runs in order, by replaying the pilot's slot rule."""
    events = sorted([(r.ended, 0, i) for i, r in enumerate(runs)]
                    + [(r.started, 1, i) for i, r in enumerate(runs)])
    busy: dict[tuple[str, str], int] = {}  # (pilot, node) -> bitmask of slots held
    held: dict[int, int] = {}
    slots: dict[tuple, list[Run]] = {}
    for _, is_start, i in events:
        run = runs[i]
        keys = [(run.pilot, node) for node in run.nodes]
        if not is_start:
            if i in held:
                for key in keys:
                    busy[key] &= ~(1 << held[i])
            continue
        index = 0
        while any(busy.get(key, 0) >> index & 1 for key in keys):
            index += 1
        held[i] = index
        for key in keys:
            busy[key] = busy.get(key, 0) | 1 << index
        slots.setdefault((run.pilot, run.nodes, index), []).append(run)
    return slots


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def gaps(runs: list[Run]) -> list[Gap]:
    """One Gap per pair of consecutive runs on a slot."""
    found = []
    for sequence in by_slot(runs).values():
        for prev, nxt in zip(sequence, sequence[1:]):
            found.append(Gap(nxt.started - prev.ended, _diff(nxt.t0, prev.t1),
                             _diff(nxt.assigned, prev.ended), _diff(nxt.started, nxt.assigned),
                             _diff(nxt.t0, nxt.started), nxt.via))
    return found


def median_p95(values: list[float]) -> tuple[float, float] | None:
    """Median and 95th percentile (nearest rank); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return statistics.median(ordered), ordered[math.ceil(0.95 * len(ordered)) - 1]

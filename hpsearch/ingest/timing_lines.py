"""Read the per-rank step timings of a trial (hpsearch.trial.report_timing's
timing.<rank>.jsonl files) and add them up per attempt and rank (docs/scaling.md).

Like the GPU samples (hpsearch.ingest.gpu_samples), each file is read on from where the last
read stopped (a Cursor per file, stored in the same commit as the sums the lines gave: a
resumed driver adds no line twice), only if it is a regular file of the experiment's owner,
opened without following a link and without blocking (hpsearch.ingest.lines). The rank is
the file's, never the line's. A line that is not a timing is skipped with a warning naming
the file, the line and why (at most MAX_WARNINGS per file and trial).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from hpsearch.ingest.lines import Line, excerpt, limited
from hpsearch.ingest.numbered_files import NumberedFiles, SavedState

FILE = "timing.{rank}.jsonl"  # hpsearch.trial.TIMING_FILE
MAX_RANKS = 1 << 16
MAX_SECONDS = 7 * 86400.0  # one step longer than a week is not a step


@dataclass
class RankTally:
    """What the timing lines of one attempt on one rank add up to."""

    attempt: int
    rank: int
    steps: int = 0
    step_s: float = 0.0       # sums over the steps
    compute_s: float = 0.0
    items: float = 0.0        # of the steps that said how many items they processed
    item_steps: int = 0
    first: float | None = None  # time of the first and last line
    last: float | None = None

    def add(self, when: float, step_s: float, compute_s: float, items: float | None) -> None:
        self.steps += 1
        self.step_s += step_s
        self.compute_s += compute_s
        if items is not None:
            self.items += items
            self.item_steps += 1
        self.first = when if self.first is None else min(self.first, when)
        self.last = when if self.last is None else max(self.last, when)


def parse(data: bytes) -> tuple[int, float, float, float, float | None]:
    """(attempt, time, step_s, compute_s, items) of one line; ValueError saying why not."""
    try:
        rec = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError included
        raise ValueError("not UTF-8" if isinstance(exc, UnicodeDecodeError)
                         else "not a JSON object") from None
    if not isinstance(rec, dict):
        raise ValueError("not a JSON object")
    attempt, step = rec.get("attempt", 1), rec.get("step")
    for name, value in (("attempt", attempt), ("step", step)):
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2 ** 63:
            raise ValueError(f"{name}: expected an integer from 0 to 2^63 - 1")
    values: dict[str, float | None] = {}
    for name in ("time", "step_s", "compute_s", "items"):
        value = rec.get(name)
        if value is None and name in ("items", "time"):
            values[name] = None
            continue
        if (not isinstance(value, (int, float)) or isinstance(value, bool)
                or not math.isfinite(value) or value < 0
                or (name in ("step_s", "compute_s") and value > MAX_SECONDS)):
            raise ValueError(f"{name}: expected a finite number >= 0"
                             + (f" and at most {MAX_SECONDS:g} s" if name != "items" else ""))
        values[name] = float(value)
    step_s, compute_s = values["step_s"], values["compute_s"]
    assert step_s is not None and compute_s is not None
    return attempt, values["time"] or 0.0, step_s, min(compute_s, step_s), values["items"]


class TimingFiles(SavedState):
    """The timing files of one trial, and where reading them stands."""

    def __init__(self, trial_dir: Path, state: object = None) -> None:
        """`state`: what state() returned when it was last stored (None: from the start)."""
        self.trial_dir = Path(trial_dir)
        saved = state if isinstance(state, dict) else {}
        warned = saved.get("warned") if isinstance(saved.get("warned"), dict) else {}
        self.ranks = NumberedFiles(self.trial_dir, FILE.replace("{rank}", "{}"), MAX_RANKS,
                                   saved.get("cursors"))
        self.warned = {k: v for k, v in (warned or {}).items()
                       if isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)}
        self.warnings: list[str] = []
        self.mark_saved()

    def state(self) -> dict:
        return {"cursors": self.ranks.cursors(), "warned": dict(self.warned)}

    def read_new(self, final: bool = False) -> list[RankTally]:
        """What the lines written since the last call add up to, per attempt and rank. Rank
        files are looked for from timing.0.jsonl up to the first that is not there."""
        tallies: dict[tuple[int, int], RankTally] = {}
        for rank, source in self.ranks.sources():
            for line in source.lines(final):
                if not line.data.strip():
                    continue
                try:
                    if line.too_long:
                        raise ValueError("longer than 1 MiB; skipped to its end")
                    attempt, when, step_s, compute_s, items = parse(line.data)
                except ValueError as exc:
                    self._warn(source.path.name, line, str(exc))
                    continue
                tally = tallies.setdefault((attempt, rank), RankTally(attempt, rank))
                tally.add(when, step_s, compute_s, items)
            if source.refused and self.warned.get(source.path.name, 0) == 0:
                self._warn(source.path.name, None, f"{source.refused}; not read")
        return list(tallies.values())

    def _warn(self, name: str, line: Line | None, reason: str) -> None:
        message = (f"{name}: ignored: {reason}" if line is None else
                   f"{name} line {line.number}: skipped malformed timing line: "
                   f"{excerpt(line)} ({reason})")
        shown = limited(self.warned, name, message)
        if shown:
            self.warnings.append(shown)

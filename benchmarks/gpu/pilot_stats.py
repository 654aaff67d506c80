"""What pilot_loop.py measured: one TrialRecord per trial in, a table of seconds out.

Pure functions, no I/O. All times are wall-clock seconds (time.time()) on the one host that
ran the driver side, the pilot and the trials, so they compare directly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class TrialRecord:
    """One trial's life, from the protocol's files and the trial's own timing.json.

    assigned: the driver wrote its inbox file; claimed: the pilot renamed it to claimed/
    (that file's ctime); started / ended: the times in the pilot's started/ and ended/
    files; replaces: the trial whose end freed the slot this one was assigned to (None for
    the first wave); gpus: the GPU ids the pilot granted; timing: the trial's own record
    (pilot_trial.py), None if it wrote none."""

    trial_id: int
    assigned: float
    claimed: float | None
    started: float | None
    ended: float | None
    exit_code: int | None
    replaces: int | None
    gpus: str = ""
    timing: dict = field(default_factory=dict)


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation between closest ranks."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("percentile of no values")
    pos = (len(ordered) - 1) * q / 100.0
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def _t(record: TrialRecord, name: str) -> float | None:
    """A moment of the trial: a protocol time or one of its timing.json keys."""
    value = getattr(record, name, None) if name in ("assigned", "claimed", "started",
                                                    "ended") else record.timing.get(name)
    return float(value) if value is not None else None


# (label, from, to): the time from assignment to the first training step, phase by phase
PHASES: tuple[tuple[str, str, str], ...] = (
    ("assign -> claim (pilot's inbox look)", "assigned", "claimed"),
    ("claim -> process start (pilot's started/)", "claimed", "started"),
    ("process start -> script's first line", "started", "script_start"),
    ("script start -> torch imported", "script_start", "imports_done"),
    ("torch imported -> device ready", "imports_done", "device_ready"),
    ("device ready -> model and data on it", "device_ready", "model_ready"),
    ("model ready -> optimizer built", "model_ready", "optimizer_ready"),
    ("optimizer built -> first step done", "optimizer_ready", "first_step"),
    ("process start -> first step", "started", "first_step"),
    ("assign -> first step", "assigned", "first_step"),
)

# (label, from, to) between two trials of one slot: "prev." the earlier one, "next." the
# one that took the slot after it
GAPS: tuple[tuple[str, str, str], ...] = (
    ("slot refill: ended/ -> next started/", "prev.ended", "next.started"),
    ("  driver: ended/ -> next assigned", "prev.ended", "next.assigned"),
    ("  pilot: next assigned -> next started/", "next.assigned", "next.started"),
    ("trial's last step -> pilot's ended/", "prev.last_step", "prev.ended"),
    ("training idle: last step -> next first step", "prev.last_step", "next.first_step"),
)


def _spans(pairs: list[tuple[TrialRecord, TrialRecord]], start: str, end: str) -> list[float]:
    """end - start for each (prev, next) pair that has both; a moment named "prev.X" or
    "next.X" is X of that trial, a bare "X" is X of prev."""
    def moment(pair: tuple[TrialRecord, TrialRecord], name: str) -> float | None:
        which, _, key = name.rpartition(".")
        return _t(pair[1] if which == "next" else pair[0], key)

    found = []
    for pair in pairs:
        t0, t1 = moment(pair, start), moment(pair, end)
        if t0 is not None and t1 is not None:
            found.append(t1 - t0)
    return found


def phase_spans(records: list[TrialRecord]) -> dict[str, list[float]]:
    """Seconds of each PHASES entry, over the trials that have both ends of it."""
    return {label: _spans([(r, r) for r in records], a, b) for label, a, b in PHASES}


def slot_pairs(records: list[TrialRecord]) -> list[tuple[TrialRecord, TrialRecord]]:
    """(one trial, the next trial on the same slot). With GPU slots the slot is the GPU set
    the pilot granted; without, the next trial is the one assigned because this one ended."""
    if records and all(r.gpus for r in records):
        by_slot: dict[str, list[TrialRecord]] = {}
        for r in records:
            by_slot.setdefault(r.gpus, []).append(r)
        pairs = []
        for runs in by_slot.values():
            runs.sort(key=lambda r: r.started or r.assigned)
            pairs += list(zip(runs, runs[1:]))
        return pairs
    by_id = {r.trial_id: r for r in records}
    return [(by_id[r.replaces], r) for r in records if r.replaces in by_id]


def gap_spans(records: list[TrialRecord]) -> dict[str, list[float]]:
    """Seconds of each GAPS entry, between consecutive trials of one slot."""
    pairs = slot_pairs(records)
    return {label: _spans(pairs, a, b) for label, a, b in GAPS}


def device_of(record: TrialRecord) -> str:
    """The physical device a trial used: the GPU's UUID, else what it saw as visible."""
    t = record.timing
    return str(t.get("device_uuid") or t.get("cuda_visible_devices") or t.get("device", "?"))


def concurrent_devices(records: list[TrialRecord]) -> tuple[int, int]:
    """(pairs of trials whose training overlapped in time, those of them that shared a
    device). With GPU slots the second number must be 0."""
    timed = [r for r in records if _t(r, "first_step") is not None]
    overlapping = shared = 0
    for i, a in enumerate(timed):
        for b in timed[i + 1:]:
            if _t(a, "device_ready") < _t(b, "last_step") and \
                    _t(b, "device_ready") < _t(a, "last_step"):
                overlapping += 1
                shared += device_of(a) == device_of(b)
    return overlapping, shared


def table(spans: dict[str, list[float]], fmt: Callable[[float], str] = "{:.3f}".format) -> str:
    """Markdown rows: label | median | p95 | n (seconds)."""
    lines = ["| seconds | median | p95 | n |", "|---|---|---|---|"]
    for label, values in spans.items():
        if values:
            lines.append(f"| {label.strip()} | {fmt(percentile(values, 50))} | "
                         f"{fmt(percentile(values, 95))} | {len(values)} |")
        else:
            lines.append(f"| {label.strip()} | - | - | 0 |")
    return "\n".join(lines)

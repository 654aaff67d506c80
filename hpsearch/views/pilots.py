"""Pilots as `hpsearch status` and the live view show them: one `PilotLine` per pilot job.

Read from the store (the pilots table, and the attempts running with a pilot's job id: a
trial that runs in a pilot carries the pilot's Slurm job id) and from each live pilot's
heartbeat file, `<exp>/pilots/<n>/heartbeat.json`, which tells the time the pilot has left
as of when it was written. Nothing here writes, and nothing asks Slurm.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TypeGuard

from hpsearch.store.rows import PILOT_ENDED, PILOT_RUNNING, RUNNING, PilotRow

EXITED = "exited"  # the pilot's last heartbeat: it left (its end may not be in the store yet)


@dataclass(frozen=True)
class PilotLine:
    """One pilot job, now."""

    id: int
    job_id: str | None
    state: str             # the store's state; while it runs, its heartbeat's word
                           # (running, draining: takes no new work, exited: left)
    nodes: str | None      # hostlist of its allocation, once it runs
    leaves: tuple[str, ...]
    trials: tuple[int, ...]  # trials whose running attempt is in it
    age: float             # running: since it started; waiting: since submitted;
                           # ended or exited: how long it held its nodes (0: never ran)
    remaining: float | None  # seconds of its time limit left (live, with a heartbeat)
    reason: str | None     # why it ended
    site: str | None = None  # executor.sites: the site it went to

    @property
    def live(self) -> bool:
        """Holds or waits for nodes (not ended, and its heartbeat does not say it left)."""
        return self.state not in (PILOT_ENDED, EXITED)


def running_by_job(reader) -> dict[str, list[int]]:
    """job id -> trials whose running attempt has that job id (bounded by the trials in
    flight)."""
    found: dict[str, list[int]] = {}
    for trial, job_id in reader.db.execute(
            "select trial, job_id from attempts where state = ? and job_id is not null "
            "order by trial", (RUNNING,)).fetchall():
        found.setdefault(job_id, []).append(trial)
    return found


def remaining_of(beat: dict | None, now: float) -> float | None:
    """Seconds left of a pilot's time limit now, from its heartbeat ("remaining" as of
    "time"); None without a readable one."""
    if not beat or _number(beat.get("remaining"), -1.0) < 0:
        return None
    return max(0.0, float(beat["remaining"]) - max(0.0, now - _number(beat.get("time"), now)))


def _number(value, default: float) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


def left(beat: dict | None) -> TypeGuard[dict]:
    """Whether a pilot's heartbeat says it left."""
    return bool(beat and beat.get("state") == EXITED)


def end_of(row: PilotRow, beat: dict | None, now: float) -> float:
    """When the pilot stopped holding its nodes: its recorded end; else the time of its
    last heartbeat if that says it left (the driver stopped before recording it); else now."""
    if row.ended is not None:
        return row.ended
    return _number(beat.get("time"), now) if left(beat) else now


def reason_of(row: PilotRow, beat: dict | None) -> str | None:
    """Why it ended: the store's reason, else the one its last heartbeat gave."""
    if row.reason:
        return row.reason
    return str(beat["reason"]) if left(beat) and beat.get("reason") else None


def pilot_line(row: PilotRow, running: list[int], beat: dict | None,
               now: float) -> PilotLine:
    """What is shown of one pilot: pure, from its row, the trials running in it and its
    heartbeat (None: unread or not written)."""
    state = row.state
    if state == PILOT_RUNNING and beat and beat.get("state") in ("draining", EXITED):
        state = str(beat["state"])
    if row.started is not None:
        age = end_of(row, beat, now) - row.started
    else:
        age = 0.0 if row.state == PILOT_ENDED else now - row.submitted
    remaining = remaining_of(beat, now) if state in (PILOT_RUNNING, "draining") else None
    return PilotLine(id=row.id, job_id=row.job_id, state=state, nodes=row.nodes,
                     leaves=tuple(x for x in (row.leaves or "").split(",") if x),
                     trials=tuple(running), age=max(0.0, age), remaining=remaining,
                     reason=reason_of(row, beat), site=row.site)


def heartbeat_of(exp_dir: Path, row: PilotRow) -> dict | None:
    """The pilot's heartbeat file where the store has not recorded its end (None there,
    or when it is missing or unreadable)."""
    if row.state == PILOT_ENDED:
        return None
    from hpsearch.pilot import protocol
    return protocol.read_json(protocol.PilotPaths(protocol.pilots_dir(Path(exp_dir))
                                                  / str(row.id)).heartbeat)


def pilot_lines(reader, exp_dir: Path, live_only: bool = False,
                now: float | None = None) -> tuple[PilotLine, ...]:
    """The experiment's pilots, oldest first (live_only: those not ended); reads the
    heartbeat file of each live one."""
    if not reader.db["pilots"].exists():
        return ()
    now = time.time() if now is None else now
    rows = reader.pilots(live_only=live_only)
    running = running_by_job(reader) if rows else {}
    lines = []
    for row in rows:
        lines.append(pilot_line(row, running.get(row.job_id, []) if row.job_id else [],
                                heartbeat_of(exp_dir, row), now))
    return tuple(lines)


def ended_count(reader) -> int:
    if not reader.db["pilots"].exists():
        return 0
    return reader.db.execute("select count(*) from pilots where state = ?",
                             (PILOT_ENDED,)).fetchone()[0]

"""How the Slurm executor rides out a Slurm that cannot answer, or will not take more jobs.

The executor asks SlurmHealth before it queries or submits, and tells it each outcome. A
failed query (slurmctld or slurmdbd down or overloaded, whatever the kind) backs the next
query off (capped exponential, with jitter); a submit refused for a transient reason or by
a limit holds the launch until the submit back-off has passed, and an end of one of our jobs
(which may have made room under a limit) lets it try again at once. The driver never sees
these errors: it sees Notes, which it records as events, once when the trouble begins and
once when it ends (`slurm_unreachable` / `slurm_reachable`, `slurm_limit` / `slurm_accepts`),
and `hpsearch status` and `watch` show the open one.
"""

from __future__ import annotations

import time

from hpsearch.executors.base import Note
from hpsearch.slurm.failures import LIMIT, Backoff, SlurmError

MAX_WAIT = 60.0  # seconds: the longest back-off between two tries

UNREACHABLE, REACHABLE = "slurm_unreachable", "slurm_reachable"
LIMITED, ACCEPTS = "slurm_limit", "slurm_accepts"


def _first_line(exc: Exception) -> str:
    """One line that says why: a SlurmError's summary (the command's name and what Slurm
    printed, which ends with the reason), whatever the length of its command line; else
    the exception's first line."""
    if isinstance(exc, SlurmError):
        return exc.summary
    return str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__


def _clock(when: float | None) -> str:
    """Local time of `when` (a back-off's `since`); None, which a failed() back-off never
    has, reads as now, as time.localtime(None) does."""
    if when is None:
        when = time.time()
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when))


class SlurmHealth:
    def __init__(self, interval: float) -> None:
        self.queries = Backoff(base=max(1.0, interval), cap=MAX_WAIT)
        self.submits = Backoff(base=max(1.0, interval), cap=MAX_WAIT)
        self.submit_kind: str | None = None
        self.submit_at = 0.0  # monotonic time before which no sbatch is tried
        self.notes: list[Note] = []

    # -- queries ---------------------------------------------------------------------------
    def query_failed(self, exc: Exception) -> float:
        """Seconds to wait before the next query."""
        first = self.queries.since is None
        delay = self.queries.failed()
        if first:
            self.notes.append(Note(None, UNREACHABLE, f"Slurm unreachable since "
                                   f"{_clock(self.queries.since)}: {_first_line(exc)}; "
                                   f"asking again with back-off (at most {MAX_WAIT:g} s)"))
        return delay

    def query_ok(self) -> bool:
        """True if this ends an outage (the caller then treats every job as just seen)."""
        lasted = self.queries.ok()
        if lasted is not None:
            self.notes.append(Note(None, REACHABLE, f"Slurm answers again after {lasted:.0f} s"))
        return lasted is not None

    @property
    def unreachable(self) -> bool:
        return self.queries.since is not None

    # -- submits ---------------------------------------------------------------------------
    def may_submit(self) -> bool:
        return time.monotonic() >= self.submit_at

    def submit_failed(self, exc: Exception, kind: str) -> None:
        """A transient or limit failure of sbatch: hold submits for a back-off."""
        first = self.submits.since is None
        delay = self.submits.failed()
        self.submit_at = time.monotonic() + delay
        if first or kind != self.submit_kind:
            self.submit_kind = kind
            what = ("sbatch refused by a limit" if kind == LIMIT else "sbatch failed")
            self.notes.append(Note(None, LIMITED if kind == LIMIT else UNREACHABLE,
                                   f"{what} since {_clock(self.submits.since)}: "
                                   f"{_first_line(exc)}; the trial waits and is submitted "
                                   f"again later (back-off up to {MAX_WAIT:g} s)"))

    def submit_ok(self) -> None:
        lasted = self.submits.ok()
        if lasted is not None:
            kind, self.submit_kind = self.submit_kind, None
            self.notes.append(Note(None, ACCEPTS if kind == LIMIT else REACHABLE,
                                   f"sbatch accepts jobs again after {lasted:.0f} s"))

    def room_freed(self) -> None:
        """One of our jobs ended: a limit on jobs may let the next submit through."""
        if self.submit_kind == LIMIT:
            self.submit_at = 0.0

    def take_notes(self) -> list[Note]:
        notes, self.notes = self.notes, []
        return notes

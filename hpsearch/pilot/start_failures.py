"""Pilots that never start: back off, then stop the search and say why.

A pilot that ends before it ran a trial, and that the driver did not stop, failed at start:
Slurm could not run its batch step (slurmstepd could not open its output file: the runs dir
is not reachable from the compute nodes by the job's user and group), its node failed at
boot, sbatch refused it. The next pilot would most likely fail the same way; without a limit
the driver would submit one every poll, for ever. So, as Harvester backs a failing queue off
apart from how it submits a worker: each start failure in a row puts the next submission
off (1, 2, 4 ... s, at most 60 s), pilots then go one at a time, and after `limit` in a row
the search stops, naming the last pilot's job, its Slurm state and what its output file
says (or why there is none). A pilot that runs a trial ends the run of failures.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hpsearch.slurm.failures import Backoff
from hpsearch.store.trusted import Untrusted, open_trusted

LIMIT = 5  # start failures in a row, with no pilot having run a trial, that stop the search
FIRST_WAIT, LONGEST_WAIT = 1.0, 60.0  # seconds between submissions after a start failure
TAIL_BYTES, TAIL_LINES = 2048, 5


@dataclass(frozen=True)
class StartFailure:
    """What one pilot that failed at start left to tell."""

    pilot_id: int
    job_id: str | None
    why: str  # the fleet's reason ("Slurm job 12 FAILED", "sbatch refused the pilot: ...")
    exit: str | None = None  # Slurm's ExitCode, "0:53"
    slurm_reason: str | None = None  # sacct's Reason, where it says more than None
    output: Path | None = None  # the pilot job's Slurm output file


class StartFailures:
    """Counts pilots that failed at start in a row; says when the next may be submitted
    and when to give up. `clock`: monotonic seconds (a test's own)."""

    def __init__(self, limit: int = LIMIT, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit, self.clock = limit, clock
        self.backoff = Backoff(base=FIRST_WAIT, cap=LONGEST_WAIT, jitter=0.0)
        self.not_before = 0.0
        self.last: StartFailure | None = None

    @property
    def in_a_row(self) -> int:
        return self.backoff.failures

    def ran(self) -> None:
        """A pilot ran a trial: pilots can start here, the run of failures ends."""
        self.backoff.ok()
        self.not_before, self.last = 0.0, None

    def failed(self, failure: StartFailure) -> float:
        """A pilot failed at start; returns the seconds until the next may be submitted."""
        self.last = failure
        delay = self.backoff.failed()
        self.not_before = self.clock() + delay
        return delay

    def may_submit(self) -> bool:
        return not self.gave_up and self.clock() >= self.not_before

    def to_submit(self, wanted: int, unstarted: int) -> int:
        """Of the `wanted` pilots (hpsearch.pilot.supply), how many to submit now, with
        `unstarted` live pilots not yet running: all while pilots start; after a failure,
        once its wait is over, one at a time, as a probe (none while one is on its way)."""
        if not self.may_submit():
            return 0
        return wanted if self.in_a_row == 0 else min(wanted, max(0, 1 - unstarted))

    @property
    def gave_up(self) -> bool:
        return self.in_a_row >= self.limit

    def message(self, experiment: str, experiment_dir: Path) -> str:
        """Why the search stops (once gave_up): the last pilot's job, its end, its output,
        and what to check."""
        last = self.last
        assert last is not None
        end = last.why + (f", exit {last.exit}" if last.exit else "") + (
            f", reason {last.slurm_reason}" if last.slurm_reason else "")
        said = ""
        if last.output is not None:
            said = f"; its output {last.output}: {output_tail(last.output)}"
        return (f"search stopped: {self.in_a_row} pilots in a row ended without running a "
                f"trial (at most {self.limit}); the last, pilot {last.pilot_id} (Slurm job "
                f"{last.job_id or 'none'}): {end}{said}. Check that the runs dir "
                f"({experiment_dir}) is reachable, searchable and writable, from the compute "
                "nodes by the job's user and group, not only by a group of your login session "
                "(`sacct -j JOB`, slurmd's log); then continue with: "
                f"hpsearch resume {experiment}")


def output_tail(path: Path) -> str:
    """The last lines of a pilot job's output file, or why there are none to show."""
    try:
        opened = open_trusted(path)
    except (Untrusted, OSError) as exc:
        return f"not read ({exc})"
    if opened is None:
        return ("there is none (Slurm could not create it: slurmstepd runs as the job's user "
                "and group on the node)")
    fd, info = opened
    with os.fdopen(fd, "rb") as fh:
        fh.seek(max(0, info.st_size - TAIL_BYTES))
        lines = fh.read(TAIL_BYTES).decode("utf-8", "replace").splitlines()[-TAIL_LINES:]
    return " | ".join(line.strip() for line in lines if line.strip()) or "empty"

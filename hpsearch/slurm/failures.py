"""What a failed Slurm command means, decided once for every caller (docs/slurm.md, "When
Slurm fails", shows what each kind gets).

Three kinds:

- transient: slurmctld or slurmdbd did not answer (down, restarting, overloaded, rate
  limiting RPCs), or the command timed out. Nothing is wrong with the request: ask again
  later, with back-off. A transient sbatch may have submitted the job all the same (the
  answer was lost), so its caller looks the job up by name before submitting again.
- limit: sbatch was refused by an association or QOS limit (MaxSubmitJobs, MaxJobs, ...).
  The request is fine and will be accepted once some of the user's jobs end: hold it.
- permanent: the request itself is wrong (invalid partition, account, node count) or Slurm
  is not installed: asking again gives the same answer.

The patterns are Slurm 22.05's messages, seen on the test cluster (slurmdbd stopped,
slurmctld stopped, `sacctmgr ... MaxSubmitJobs=1` with AccountingStorageEnforce=limits,
the second cluster's slurmctld stopped or killed under `--clusters`, an unknown cluster),
plus those of the same errors that other versions and sites print.
"""

from __future__ import annotations

import random
import shlex
import time
from collections.abc import Sequence

from hpsearch.errors import EXIT_INCOMPLETE, HpsearchError

TRANSIENT, LIMIT, PERMANENT = "transient", "limit", "permanent"

_TRANSIENT = (
    "unable to contact slurm controller",  # slurmctld down: squeue, sbatch, scancel, sinfo
    "socket timed out",                    # slurmctld overloaded: "on send/recv operation"
    "connection refused",                  # slurmdbd down: sacct ("Problem talking to the
    "problem talking to the database",     # database: Connection refused")
    "slurm_persist_conn_open",
    "connection timed out",
    "connection reset",
    "zero bytes were transmitted or received",
    "transport endpoint is not connected",
    "resource temporarily unavailable",
    "slurm temporarily unable to accept job",
    "rate limit",                          # RPC rate limiting (slurmctld rl_enable)
    "too many rpc",
    "slurmctld(primary) at",               # `scontrol ping`: "... is DOWN"
    "slurm backup controller in standby mode",
    "communication connection failure",
    "unable to establish connection",
    "slurmdbd is not responding",
    "error sending msg",
    "insane message length",
    # -M NAME: NAME's slurmctld is down (slurmdbd then has no address for it), or slurmdbd
    # is; a name slurmdbd does not know prints this too, after a permanent line (below).
    "can't be reached now",
)
_LIMIT = (
    "maxsubmitjob",              # AssocMaxSubmitJobLimit, QOSMaxSubmitJobPerUserLimit...
    "grpsubmitjob",              # AssocGrpSubmitJobsLimit, QOSGrpSubmitJobsLimit
    "maxjobs",
    "required partition not available",  # partition inactive or drained (maintenance)
    "violates accounting/qos policy",    # the generic line; its reason may say more
)
# Limits a job can never get under, however long it waits: its own size or time; and a
# cluster (-M) that slurmdbd does not know ("No cluster 'x' known by database.").
_FOR_GOOD = ("perjob", "maxwall", "minjob", "invalid qos", "invalid account",
             "known by database")


def classify(returncode: int | None, text: str) -> str:
    """The kind of a failed Slurm command: TRANSIENT, LIMIT or PERMANENT. `returncode` None
    means it timed out (transient); `text` is what it printed (stderr, else stdout)."""
    low = text.lower()
    if any(pattern in low for pattern in _FOR_GOOD):
        return PERMANENT
    if any(pattern in low for pattern in _LIMIT):
        return LIMIT
    if returncode is None or any(pattern in low for pattern in _TRANSIENT):
        return TRANSIENT
    return PERMANENT


class Backoff:
    """Capped exponential back-off with full jitter, and when the trouble began.

    failed() after each failed attempt returns the seconds to wait before the next (between
    base * 2**(n-1) * (1 - jitter) and that, capped at `cap`); ok() ends the trouble.
    `since` is the wall-clock time of the first failure in a row, None while all is well.
    """

    def __init__(self, base: float = 2.0, cap: float = 60.0, jitter: float = 0.5,
                 rng: random.Random | None = None) -> None:
        self.base, self.cap, self.jitter = base, cap, jitter
        self.failures = 0
        self.since: float | None = None
        self._rng = rng or random.Random()

    def failed(self) -> float:
        self.failures += 1
        if self.since is None:
            self.since = time.time()
        delay = min(self.cap, self.base * 2 ** (self.failures - 1))
        return delay * (1 - self.jitter * self._rng.random())

    def ok(self) -> float | None:
        """Ends the trouble; returns how long it lasted (seconds), or None if there was none."""
        lasted = None if self.since is None else time.time() - self.since
        self.failures, self.since = 0, None
        return lasted


def retrying(call, attempts: int = 6, backoff: Backoff | None = None,
             on_retry=lambda exc, delay: None):
    """call() again after a transient SlurmError (back-off between tries), at most
    `attempts` times in all; a limit or permanent error, or the last transient one, is
    raised. For commands a person waits on (cancel, status): they must not hang forever."""
    backoff = backoff or Backoff(base=1.0, cap=15.0)
    for left in range(attempts - 1, -1, -1):
        try:
            return call()
        except SlurmError as exc:
            if exc.kind != TRANSIENT or left == 0:
                raise
            delay = backoff.failed()
            on_retry(exc, delay)
            time.sleep(delay)
    raise AssertionError("unreachable")


_STDERR_TAIL_CHARS = 600
_COMMAND_CHARS = 300  # of the command line, in an error message
_SUMMARY_REASON_CHARS = 300  # of what Slurm printed, in SlurmError.summary


class SlurmError(HpsearchError):
    """A Slurm command failed: exited non-zero (for a reason not handled), timed out, or is
    not installed. The message names the command, its exit code and the tail of what it
    printed on stderr (on stdout where stderr was empty). `kind` says what to do about it
    (below): transient (ask again later), limit (a submit refused by an
    association/QOS limit: hold it) or permanent."""

    exit_code = EXIT_INCOMPLETE

    def __init__(self, argv: Sequence[str], returncode: int | None, stderr: str,
                 problem: str | None = None, kind: str | None = None) -> None:
        self.argv, self.returncode, self.stderr = list(argv), returncode, stderr
        self.kind = kind or classify(returncode, stderr)
        line = shlex.join(self.argv)
        if len(line) > _COMMAND_CHARS:
            line = line[:_COMMAND_CHARS] + "..."
        problem = problem or f"exited {returncode}"
        tail = stderr.strip()[-_STDERR_TAIL_CHARS:]
        super().__init__(f"Slurm command `{line}` {problem}" + (f": {tail}" if tail else ""))
        self.summary = _summary(self.argv[0] if self.argv else "?", problem, tail)


def _summary(program: str, problem: str, stderr: str) -> str:
    """One line for a note: the command's name (not its line, long with many job ids), what
    went wrong and every line it printed, joined with '; ', each without its `PROGRAM:
    error: ` prefix; cut from the front where too long, since Slurm's tools end with the
    reason (`sacct`: "... Problem talking to the database: Connection refused"; `sbatch`:
    "AssocMaxSubmitJobLimit; Batch job submission failed: ...")."""
    prefix = f"{program}: error: "
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    said = "; ".join(line[len(prefix):] if line.startswith(prefix) else line for line in lines)
    if len(said) > _SUMMARY_REASON_CHARS:
        said = "..." + said[-_SUMMARY_REASON_CHARS:]
    return f"`{program}` {problem}" + (f": {said}" if said else "")

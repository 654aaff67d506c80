"""The Executor seam: the driver hands it launches and polls it for ends.

An executor may push (a process or Slurm job per trial) or pull (pilots taking trials from a
queue); the driver sees only this interface. The driver records every state change in the
store *before* acting on it, so an executor never needs a store of its own.
"""

from __future__ import annotations

import select
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, get_args

from hpsearch.launch.attempt import Launch

if TYPE_CHECKING:
    from hpsearch.spec.model import FailureClass, Spec
    from hpsearch.store.store import Store


@dataclass(frozen=True)
class Started:
    trial_id: int
    attempt: int
    host: str
    pid: int | None = None
    pid_start: int | None = None  # process start time (clock ticks since boot): pid identity
    gpus: str | None = None
    job_id: str | None = None
    # When the executor started it (time.time()); None: when the driver stores it. A start
    # seen with the attempt's end is stored in the end's commit, which may come later.
    at: float | None = None
    site: str | None = None  # executor.sites: the site it was sent to


# Why an attempt ended, as the executors say it (driver/retry.classify turns it into a failure
# class): its command exited (with the exit code); it was cancelled on request; nobody knows
# how it ended (its process, job or pilot vanished); its time limit; it never started (the
# launch failed); Slurm ended it in one of its final states (failed: cancelled by someone
# else, or a state hpsearch has no word for; out_of_memory, node_fail, preempted,
# boot_fail, deadline, revoked, special_exit) or requeued it; the trial dir could not be
# written (storage_error: the driver stops, the attempt is not counted).
EndReason = Literal["exited", "cancelled", "lost", "timeout", "launch_error", "failed",
                    "out_of_memory", "node_fail", "preempted", "boot_fail", "deadline",
                    "revoked", "special_exit", "requeued", "storage_error"]
END_REASONS: tuple[EndReason, ...] = get_args(EndReason)


def end_reason(word: object, otherwise: EndReason) -> EndReason:
    """`word` (read from a file or another process) if it is an end reason, else `otherwise`."""
    return next((r for r in END_REASONS if r == word), otherwise)


@dataclass(frozen=True)
class Ended:
    trial_id: int
    attempt: int
    exit_code: int | None   # None when unknown (the process ended while nobody watched)
    reason: EndReason
    detail: str = ""
    nodes: str | None = None  # hostlist it ran on, where the executor knows it
    leaves: str | None = None  # leaf switches of those nodes, comma-separated, where known
    job_id: str | None = None  # the scheduler's job id, where there is one
    # Set when the trial was stopped from outside while it ran (its pilot given up by the
    # driver, or sent away by Slurm): an exit 0 without a final result (result.json or an
    # `@hpsearch result` line) then is that stop, not the trial's end, even where it
    # reported steps; the failure class it counts as (lost, preempted), `detail` saying why.
    stopped_as: FailureClass | None = None
    # When the executor saw it end (time.time()); None: when the driver records it. With the
    # start's `at`, the attempt's stored run time is the process's, however late the poll.
    at: float | None = None
    # Its peak resident memory in MiB: the most its processes held together at a sample
    # (each second), or its largest process's (wait4's ru_maxrss) where more, where the
    # executor ran it: the local executor, and a pilot for the trials on its own node.
    # None: not known.
    peak_rss_mb: float | None = None


@dataclass(frozen=True)
class Requeued:
    """The scheduler ended an attempt and runs the same job again under the same id (Slurm's
    requeue: `scontrol requeue`, preemption with PreemptMode=REQUEUE, a node failure with
    JobRequeue): attempt `attempt` ended with `reason` (requeued, preempted, node_fail), and
    the job's next run is the trial's attempt `attempt + 1`. Nothing is submitted for it."""

    trial_id: int
    attempt: int
    job_id: str
    reason: EndReason  # requeued, preempted or node_fail
    detail: str = ""
    nodes: str | None = None   # where the ended run ran
    leaves: str | None = None


@dataclass(frozen=True)
class Update:
    """News of an attempt that has not ended: the scheduler's state, why it waits, its nodes."""

    trial_id: int
    attempt: int
    sched_state: str
    pending_reason: str | None = None
    nodes: str | None = None
    leaves: str | None = None


@dataclass(frozen=True)
class Note:
    """Something the executor decided that the store should tell (e.g. placement), of one
    trial or (trial_id None) of the whole search (e.g. Slurm unreachable)."""

    trial_id: int | None
    kind: str
    message: str


@dataclass(frozen=True)
class GaveUp:
    """The executor cannot run trials at all (every pilot it submits fails at start): the
    search stops, `failed`, with this message; trials that never started wait, as after
    Ctrl-C, for `hpsearch resume`."""

    message: str


@dataclass
class Adoptable:
    """What the store knows of an attempt in flight when a driver resumes."""

    trial_id: int
    attempt: int
    trial_dir: Path
    pid: int | None = None
    pid_start: int | None = None
    gpus: str | None = None
    job_id: str | None = None
    extra: dict = field(default_factory=dict)
    job_runs: int = 1  # attempts the store holds under job_id (more after Slurm requeued it)
    site: str | None = None  # executor.sites: the site the store says it was sent to


class Executor(ABC):
    """One executor; each is registered in executors/registry.py by name, with its facts."""

    wake_fd: int | None = None  # wake_on()

    @classmethod
    @abstractmethod
    def from_spec(cls, spec: Spec, store: Store | None, ask_ahead: bool) -> Executor:
        """The executor a spec asks for. `store`: None for the check before anything is
        created (an executor that keeps its jobs in the store then builds what it can);
        `ask_ahead`: the driver may ask the next trial while every slot is busy
        (driver/session.asks_ahead)."""

    @abstractmethod
    def free_slots(self) -> int:
        """How many more trials may start now."""

    @abstractmethod
    def submit(self, launch: Launch) -> Started | None:
        """Start one attempt. Called only after the store holds it as `submitting`. The
        executor lays out the trial dir first (hpsearch.launch.attempt.prepare_trial_dir), where
        and when it suits it. Returns Started if it started synchronously, or None if poll()
        will report it."""

    @abstractmethod
    def poll(self, timeout: float
             ) -> Sequence[Started | Update | Requeued | Ended | Note | GaveUp]:
        """Wait up to `timeout` seconds for news; return attempts that started (if submit
        returned None for them), were requeued by the scheduler, or ended, Notes for the
        store, and GaveUp when the search cannot go on. A trial's Started always comes
        before its Ended. (A Sequence: an executor may return a list of fewer kinds, e.g.
        the local executor's Started and Ended.)"""

    def wake_on(self, fd: int | None) -> None:
        """poll() returns early, with what news it has (maybe none), once `fd` is readable:
        the driver's watch on trial output (hpsearch.ingest.output_watch) has a report to
        read now. The driver empties `fd` after each poll()."""
        self.wake_fd = fd

    @abstractmethod
    def cancel(self, trial_id: int) -> None:
        """Stop a running attempt; poll() reports it with reason `cancelled`."""

    def stop(self, trial_id: int) -> None:
        """End a running attempt early (early stopping; the driver has written the trial's
        STOP file): as cancel(), whose grace period lets the trial save and exit. poll()
        reports its end, with whatever reason it ended with."""
        self.cancel(trial_id)

    def withdraw(self) -> list[int]:
        """Take back every attempt submitted but not started (it waits for a slot): the
        driver is stopping. They are never started, and poll() tells nothing of them; the
        store has them wait (Store.withdraw), so a resumed driver launches that attempt."""
        return []

    def abandon(self, trial_id: int) -> None:
        """Cancel a requeued job whose trial has no retry left, and forget it: poll() tells
        nothing more of it. Only executors that report Requeued need it."""
        raise NotImplementedError(f"{type(self).__name__} reports no requeues")

    @abstractmethod
    def adopt(self, known: Adoptable) -> Started | Ended | None:
        """After a driver restart: watch an attempt that is still running (Started), report
        one that ended meanwhile (Ended), or None if it never started."""

    def release(self) -> None:
        """Nothing more will be launched (the search ended or was stopped): let go of what
        is held for future attempts (pilot jobs). Running attempts are left alone."""

    def close(self) -> None:
        """Release resources; running attempts are left alone."""


def nap(wake_fd: int | None, seconds: float) -> bool:
    """Sleep `seconds`, or less if `wake_fd` becomes readable first (Executor.wake_on):
    True if it did."""
    if wake_fd is None:
        time.sleep(max(0.0, seconds))
        return False
    poller = select.poll()
    poller.register(wake_fd, select.POLLIN)
    return bool(poller.poll(max(0.0, seconds) * 1000))

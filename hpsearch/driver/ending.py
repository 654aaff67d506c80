"""How a driver's run ends: the signals that stop it, the experiment's final status and exit
code, or leaving its trials running for the next driver (a driver job near its time limit,
or preempted)."""

from __future__ import annotations

import dataclasses
import signal
from collections.abc import Callable

from hpsearch.errors import EXIT_INCOMPLETE, EXIT_OK
from hpsearch.executors.base import Ended
from hpsearch.store import rows
from hpsearch.store.store import Store


def leave(store: Store, why: str, running: int, on_event: Callable[[str], None]) -> int:
    """Exit with every trial left running, as they are in the store: the next driver
    adopts them. Nothing is cancelled."""
    message = (f"driver leaves ({why}); {running} trial(s) keep running and "
               "the next driver adopts them")
    store.add_event("driver_left", message)
    store.set_experiment_status("running", message)
    on_event(message)
    return EXIT_OK


def finish(store: Store, done_at: int, timed_out: bool, gave_up: str | None,
           stopped_by: str | None) -> int:
    """Record how the search ended, from the store's counts; return the exit code: `failed`
    when search.max_failures gave up or every trial that ended failed, `cancelled` when
    stopped, else `completed` (`incomplete` where trials are missing).

    done_at: the number of finished (or paused) trials that completes the search;
    timed_out: its time budget ran out; gave_up: why search.max_failures stopped it;
    stopped_by: the signal or request that stopped it."""
    counts = store.state_counts()
    done = sum(counts.get(s, 0) for s in rows.DONE)
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    if gave_up:
        store.set_experiment_status("failed", f"{gave_up} ({summary})")
        return EXIT_INCOMPLETE
    if stopped_by:
        store.set_experiment_status("cancelled", f"stopped by {stopped_by}: {summary}")
        return EXIT_INCOMPLETE
    if done and counts.get(rows.FAILED, 0) == done:  # not one trial gave a value
        store.set_experiment_status("failed", f"every trial failed ({summary})")
        return EXIT_INCOMPLETE
    status = "completed" if done >= done_at or timed_out else "incomplete"
    store.set_experiment_status(status, summary)
    return EXIT_OK if status == "completed" and not counts.get(rows.FAILED) else EXIT_INCOMPLETE


def handle_signals(handler: Callable[[int], None], leave: bool) -> dict:
    """Send SIGINT and SIGTERM (and SIGUSR1 where the driver may leave) to handler(signum);
    returns the handlers they had, for restore_signals."""
    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM) + ((signal.SIGUSR1,) if leave else ()):
        try:
            previous[sig] = signal.signal(sig, lambda s, f: handler(s))
        except ValueError:  # not the main thread (tests drive it from threads)
            pass
    return previous


def stopped_with(ended: Ended, signum: int | None) -> Ended:
    """An attempt that exited by the very signal that stopped the driver (signum) was stopped
    with it, not failed: it is recorded as cancelled, and resume runs it again.

    Trials run in sessions of their own, out of reach of the terminal's Ctrl-C; but a trial's
    shell forked at the instant Ctrl-C came is still in the driver's process group until it
    calls setsid, and the signal, pending, outlives exec: it dies by SIGINT at once (exit
    130), while its driver stops. Seen in CI's Snakemake resume test, about 1 run in 20 under
    load."""
    if signum is None or ended.reason != "exited" or ended.exit_code not in (128 + signum,
                                                                             -signum):
        return ended
    name = signal.Signals(signum).name
    return dataclasses.replace(ended, reason="cancelled",
                               detail=f"{name} came as it started; stopped with the driver")


def restore_signals(previous: dict) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)

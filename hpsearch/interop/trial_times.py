"""A trial's times over all its attempts (retries, requeues, promotion segments).

The store's trial row holds its last attempt's start and end only: a trial promoted twice
has three segments, and paused (or queued) time between them. What export and the Optuna
conversion give instead:

  started       the first attempt's start (when the trial first ran)
  finished      the last attempt's end; None while an attempt is in flight
  duration      finished - started (while in flight: now - started): wall-clock time,
                pauses and waits between attempts included
  run_seconds   the time it actually ran: the sum over its attempts of end - start (the
                attempt in flight counts until now; one that never started, nothing)
  last_started  the last attempt's start (what the trial row holds; None while the
                next attempt waits to start)
  startup_s     the part of run_seconds before each attempt's code first called
                hpsearch.trial (hpsearch.ingest.first_call), summed; None where no attempt's
                is known (a trial that never calls it, an attempt that has not yet)
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from hpsearch.interop.store_view import AttemptRow
from hpsearch.store import rows


@dataclass(frozen=True)
class TrialTimes:
    started: float | None
    finished: float | None
    duration: float | None
    run_seconds: float | None
    last_started: float | None
    startup_s: float | None = None


def trial_times(trial: rows.TrialRow, attempts: Iterable[AttemptRow],
                now: float | None = None) -> TrialTimes:
    """`trial`'s times from its attempt rows (see the module docstring). A store without
    attempt rows for it falls back to the trial row's own start and end."""
    now = time.time() if now is None else now
    counted = [a for a in attempts if a.started is not None
               and not (a.finished is None and a.attempt != trial.attempt)]  # an end never seen
    spans: list[tuple[float, float | None]] = [(a.started, a.finished) for a in counted
                                               if a.started is not None]
    known = [a.startup_s for a in counted if a.startup_s is not None]
    if not spans and trial.started is not None:
        spans = [(trial.started, trial.finished)]
    if not spans:
        return TrialTimes(None, None, None, None, trial.started)
    first, finished = min(start for start, _ in spans), trial.finished
    run = sum(max(0.0, (end if end is not None else finished or now) - start)
              for start, end in spans)
    return TrialTimes(first, finished, (finished or now) - first, run, trial.started,
                      min(run, sum(known)) if known else None)

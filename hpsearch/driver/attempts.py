"""An attempt that failed, and the next one: the driver's side of the retry rules.

hpsearch.driver.retry decides from a trial's history (pure); this module reads that history from
the store, records the decision (write-ahead, like every state change) and builds the next
attempt's launch. The driver keeps what is its own: its queue, its live trials, and telling
the pruner, the promoter and the failure budget.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hpsearch.driver import retry
from hpsearch.driver.scouts import Scouts, Sizing
from hpsearch.executors.base import Ended, Requeued
from hpsearch.faults import fault_point
from hpsearch.ingest.outcome import cause
from hpsearch.ingest.trial_files import rotate_logs
from hpsearch.launch.attempt import Launch
from hpsearch.search.base import Search
from hpsearch.spec.model import FailureClass, Resources, Retries
from hpsearch.store import rows
from hpsearch.store.store import Store

Launches = Callable[[int, int, dict], Launch]  # (trial id, attempt, params) -> Launch


@dataclass
class Verdict:
    retry: bool
    message: str  # for the driver's event line


class Attempts:
    def __init__(self, retries: Retries, resources: Resources, launches: Launches, store: Store,
                 search: Search, scouts: Scouts | None = None) -> None:
        """retries, resources: the spec's sections; launches: builds an attempt's Launch
        (trial id, attempt, params), as hpsearch.launch.attempt.build_launch does; scouts:
        sizes attempts from the first ones (resources.time or mem `auto`), or None."""
        self.retries, self.resources, self.launches = retries, resources, launches
        self.store, self.search, self.scouts = store, search, scouts
        self.sized: dict[int | None, str] = {}  # the scouts' last sizing told, per budget

    def first(self, launch: Launch, budget: int | None = None) -> tuple[Launch, str | None]:
        """A new trial's first attempt (with `budget`: a promotion segment to that step
        budget) with the scouts' sizes, and what to store of them."""
        if self.scouts is None:
            return launch, None
        sizing = self.scouts.sizing(budget)
        if sizing is None:
            return launch, None
        note = sizing.note
        if note != self.sized.get(budget):  # say each new sizing once (`events`)
            who = (f"trial {launch.trial_id}'s segment and later ones" if budget is not None
                   else f"trials from {launch.trial_id} on")
            self.store.add_event("scouts", f"{who} ask for {note}")
            self.sized[budget] = note
        return sizing.apply(launch, self.resources, self.scouts.in_pilots), note

    def _decide(self, tid: int, this: retry.Attempt) -> retry.Decision:
        earlier = [retry.Attempt.from_row(a) for a in self.store.attempts(tid)
                   if a["attempt"] != this.number and not Scouts.at_limit(a, a["failure"])]
        return retry.decide(self.retries, this, earlier, self.store.checkpoint_steps(tid))

    def failed(self, ended: Ended, error: str, failure: FailureClass) -> Verdict:
        """Store the attempt's end: retried if the trial's rule for this failure class
        allows (the driver queues it), else the trial failed and the search is told. One
        killed at a limit the scouts set runs again at the ceiling, not counted."""
        tid, attempt = ended.trial_id, ended.attempt
        first = cause(error)
        row = next((a for a in self.store.attempts(tid) if a["attempt"] == attempt), {})
        if self.scouts is not None and Scouts.at_limit(row, failure):
            self.store.finish_attempt(tid, attempt, rows.FAILED, ended.exit_code, error,
                                      requeue=True, failure=failure)
            return Verdict(True, f"trial {tid} {failure} at the scouts' limit ({first}): "
                                 "runs again at the ceiling, not counted as a failure")
        decision = self._decide(tid, retry.Attempt(attempt, failure, ended.exit_code,
                                                   ended.nodes))
        if decision.retry:
            state = "lost" if failure == "lost" else rows.FAILED
            self.store.finish_attempt(tid, attempt, state, ended.exit_code, error, requeue=True,
                                      failure=failure)
            return Verdict(True, f"trial {tid} {failure} ({first}); {decision.describe()}")
        attrs = self.search.tell(tid, rows.FAILED, None)
        self.store.finish_attempt(tid, attempt, rows.FAILED, ended.exit_code, error,
                                  sampler_attrs=attrs, failure=failure)
        return Verdict(False, f"trial {tid} failed: {first} ({failure}; "
                              f"{decision.describe()})")

    def requeued(self, event: Requeued, ingest: Callable[[], object]) -> Verdict:
        """The scheduler requeued the job of a trial's attempt (same job id): that attempt
        ended, and the job's next run is a new attempt, stored before it is watched (no job
        is submitted). Without a retry left for this class the trial failed: the driver
        cancels the job. `ingest` reads the trial's files (not final: the next run appends
        to them) inside the same commit."""
        fault_point("before_requeue")
        tid, attempt = event.trial_id, event.attempt
        failure = retry.classify(Ended(tid, attempt, None, event.reason, event.detail,
                                       event.nodes, event.leaves))
        with self.store.batch():  # the ended attempt and the next: one commit
            ingest()
            if event.nodes:
                self.store.update_placement(tid, attempt, None, None, event.nodes,
                                            event.leaves)
            decision = self._decide(tid, retry.Attempt(attempt, failure, None, event.nodes))
            if not decision.retry:
                attrs = self.search.tell(tid, rows.FAILED, None)
                self.store.finish_attempt(tid, attempt, rows.FAILED, None, event.detail,
                                          sampler_attrs=attrs, failure=failure)
                return Verdict(False, f"trial {tid} failed: {event.detail} ({failure}; "
                                      f"{decision.describe()}); job {event.job_id} cancelled")
            self.store.finish_attempt(tid, attempt, rows.FAILED, None, event.detail,
                                      requeue=True, failure=failure)
            self.store.begin_attempt(tid, attempt + 1, f"Slurm requeued job "
                                                       f"{event.job_id} ({event.reason})")
            self.store.mark_running(tid, attempt + 1, "", None, None, None, event.job_id)
        return Verdict(True, f"trial {tid} {failure} ({event.detail}); {decision.describe()}: "
                             f"attempt {attempt + 1} runs in the same job")

    def again(self, trial_id: int, unlaunched: bool) -> Launch:
        """The next attempt of a queued trial, stored before it is launched: a retry (with
        the overrides its history earns), or, `unlaunched`, the stored attempt a stopped
        or killed driver never launched."""
        row = self.store.trial(trial_id)
        attempt = row.attempt if unlaunched else row.attempt + 1
        before = [a for a in self.store.attempts(trial_id) if a["attempt"] < attempt]
        history = [retry.Attempt.from_row(a) for a in before  # killed at the scouts'
                   if not Scouts.at_limit(a, a["failure"])]   # limit: not the trial's own
        # the factors apply to the trial's own memory and time (per-trial resources)
        plan = retry.next_overrides(self.retries, self.resources.for_params(row.params),
                                    history, self.store.checkpoint_steps(trial_id))
        failure = before[-1]["failure"] if before else None
        reason = ("launched again: the driver stopped before it was" if unlaunched else
                  "re-run after interruption" if row.state != rows.QUEUED else
                  f"at the ceiling after {failure} at the scouts' limit (not counted)"
                  if Scouts.at_limit(before[-1], failure) else
                  f"retry after {failure}" if failure else "retry")
        sizing = self._scouted(trial_id, attempt)
        note = sizing.note if sizing else None
        if not unlaunched:  # before the attempt is stored: the last one's exit_code must
            rotate_logs(Path(row.trial_dir), row.attempt)  # not pass for the new one's
        said = "; ".join(n for n in (note, plan.describe()) if n) or None
        self.store.begin_attempt(trial_id, attempt, reason, said)
        fault_point("after_retry_stored")
        launch = dataclasses.replace(self.launches(trial_id, attempt, row.params),
                                     sbatch_extra=plan.sbatch_extra,
                                     time_factor=plan.time_factor)
        return sizing.apply(launch, self.resources, self.scouts.in_pilots) \
            if sizing and self.scouts else launch

    def _scouted(self, trial_id: int, attempt: int) -> Sizing | None:
        """The scouts' sizes for a trial's next attempt: none (the ceiling) after one killed
        at them."""
        if self.scouts is None:
            return None
        before = [a for a in self.store.attempts(trial_id) if a["attempt"] < attempt]
        if before and Scouts.at_limit(before[-1], before[-1]["failure"]):
            return None
        return self.scouts.sizing()

    def withdrawn(self, row: rows.TrialRow) -> bool:
        """A queued trial whose attempt was stored but never started (Store.withdraw)."""
        return any(a["attempt"] == row.attempt and a["state"] == rows.SUBMITTING
                   for a in self.store.attempts(row.id))

"""The driver: asks the search for trials, launches them, ingests what they write, and
records every step in the store before acting on it (write-ahead).

It is the store's only writer. Killed at any instant (even SIGKILL), a later `resume` finds
each trial's state in the store and adopts, re-runs or finishes it: no trial is lost,
duplicated or launched twice.
"""

from __future__ import annotations

import dataclasses
import signal
import time
from collections.abc import Callable, Sequence

from hpsearch.driver import recovery
from hpsearch.driver.bookkeeping import Bookkeeping
from hpsearch.driver.ending import finish, handle_signals, leave, restore_signals, stopped_with
from hpsearch.driver.extent import ENQUEUED
from hpsearch.driver.live import LiveTrial, LiveTrials
from hpsearch.driver.policies import Policies
from hpsearch.errors import StorageError
from hpsearch.executors.base import Ended, Executor, GaveUp, Note, Requeued, Started, Update
from hpsearch.faults import fault_point
from hpsearch.ingest.trial_files import exit_time, rotate_logs, with_stderr_tail
from hpsearch.launch.attempt import Launch
from hpsearch.search.base import Search
from hpsearch.spec.model import FailureClass
from hpsearch.store import rows
from hpsearch.store.store import Store

INGEST_INTERVAL = 1.0  # seconds between reads of every running trial's files


class Driver:
    def __init__(self, store: Store, executor: Executor, search: Search, policies: Policies,
                 on_event: Callable[[str], None] = lambda line: None,
                 leave_on: Callable[[int], str | None] | None = None) -> None:
        """policies: what the driver asks, each built from its own part of the spec
        (hpsearch.driver.policies). leave_on: for a driver that runs as a Slurm job
        (hpsearch.driver.slurm_job), given a signal, why the driver should leave its trials
        running and exit (its time limit is near, it is preempted), or None when the signal
        means stop and cancel them."""
        self.store, self.executor, self.search = store, executor, search
        self.on_event = on_event
        self.leave_on = leave_on
        self.left: str | None = None  # why it left its trials running (leave_on)
        self.name, self.metrics, self.launches = policies.name, policies.metrics, policies.launches
        self.live: dict[int, LiveTrial] = {}
        self.queue: list[int] = []  # trials waiting for a new attempt
        # trials whose command could not start, their retry held back until a trial ends
        # well (the command can run) or nothing else is left to launch (FailFast)
        self.deferred: list[int] = []
        self.unlaunched: set[int] = set()  # stored attempts that never reached the executor
        self.stop_reason: str | None = None
        self.stop_now = False  # a second Ctrl-C/SIGTERM: stop without waiting for trials
        self.stop_signal: int | None = None  # the signal that stopped it (ending.stopped_with)
        self.bookkeeping = Bookkeeping()  # seconds of driver work, by trial
        self.unsaved_starts: list[Started] = []  # stored with the next end (_handle)
        self.checkpoints, self.attempts = policies.checkpoints, policies.attempts
        self.stopper, self.promoter = policies.stopper, policies.promoter
        self.extent, self.failfast, self.costs = policies.extent, policies.failfast, policies.costs
        self.trials = LiveTrials(store, self.metrics[0], self.checkpoints, self.stopper,
                                 on_event, policies.watch, (policies.reading, INGEST_INTERVAL))
        self.gave_up: str | None = None  # why search.max_failures (or the executor) stopped it
        self.began = time.time()

    # -- entry -----------------------------------------------------------------------------
    def run(self) -> int:
        """Drive the search to its end (or until stopped). Returns the exit code."""
        previous = handle_signals(self.on_signal, leave=self.leave_on is not None)
        try:
            self.recover()
            self.loop()
            if self.left:
                return self._leave()
            self.executor.release()
            return self.finish()
        finally:
            restore_signals(previous)
            self.executor.close()
            self.trials.close()

    def request_stop(self, reason: str) -> None:
        self.stop_reason = self.stop_reason or reason

    # -- resume ----------------------------------------------------------------------------
    def recover(self) -> None:
        """Rebuild the search from the store and take charge of every trial in flight."""
        recovery.recover(self)

    # -- main loop -------------------------------------------------------------------------
    def loop(self) -> None:
        next_ingest = time.monotonic() + INGEST_INTERVAL
        while True:
            if self.left:
                return
            if self.stop_reason:
                self._stop_all()
                return
            self._fill_slots()
            if not self.live:
                self.extent.take()  # a request that came at the end (resume --trials)
                self._fill_slots()
                # nothing running, nothing left to launch; unless the executor has no room
                # yet for what is (pilots at their maximum, winding down): wait for it
                if not self.live and self.executor.free_slots() > 0:
                    return
            self._handle(self.executor.poll(timeout=max(0.0, next_ingest - time.monotonic())))
            self.trials.reported(self.live)  # the poll woke for a report: read it now
            if time.monotonic() >= next_ingest:
                self.trials.ingest_all(self.live)
                next_ingest = time.monotonic() + INGEST_INTERVAL
                self.extent.take()

    def _handle(self, events: Sequence[Started | Update | Requeued | Ended | Note | GaveUp]
                ) -> None:
        # Starts seen with an end are stored in the first end's commit (finalize), wherever
        # they are in the list (the local executor reports a trial's exit, then the start of
        # the trial asked ahead): one commit fewer per trial.
        defer = any(isinstance(e, Ended) and e.reason != "storage_error" for e in events)
        for event in events:
            if isinstance(event, Started) and defer:
                fault_point("after_launch")  # the process runs; its pid is not stored yet
                self.unsaved_starts.append(event)
        for event in events:
            if isinstance(event, Started):
                if not defer:
                    self._record_started(event)
            elif isinstance(event, Requeued):
                self._requeued(event)
            elif isinstance(event, Update):
                self.store.update_placement(event.trial_id, event.attempt, event.sched_state,
                                            event.pending_reason, event.nodes, event.leaves)
            elif isinstance(event, Note):
                self.store.add_event(event.kind, event.message, event.trial_id)
                self.on_event(event.message if event.trial_id is None
                              else f"trial {event.trial_id}: {event.message}")
            elif isinstance(event, GaveUp):
                self.store.add_event("gave_up", event.message)
                self._give_up("the executor gave up", event.message)
            elif event.reason == "storage_error":  # not the trial's fault: stop, count nothing
                raise StorageError(f"trial {event.trial_id}: {event.detail}. The store is "
                                   "intact; free space or fix permissions, then `hpsearch "
                                   f"resume {self.name}`")
            else:
                self.finalize(stopped_with(event, self.stop_signal))
        for started in self.unsaved_starts:  # none of the ends took them (not expected)
            self._record_started(started, launched=False)
        self.unsaved_starts.clear()

    def _fill_slots(self) -> None:
        while self.executor.free_slots() > 0 and not self.stop_reason:
            began = time.perf_counter()
            launch = self._again() if self.queue else self._promoted() or self._new()
            if launch is None and self.deferred:  # nothing else to run: retry them now
                self.queue.append(self.deferred.pop(0))
                launch = self._again()
            if launch is None:
                return
            self._launch(launch, began)

    def _again(self) -> Launch:
        """The next attempt of a queued trial (a retry, or one a crash kept from launching)."""
        trial_id = self.queue.pop(0)
        launch = self.attempts.again(trial_id, trial_id in self.unlaunched)
        self.unlaunched.discard(trial_id)
        if self.promoter:  # the same segment again
            launch = _with_env(launch, self.promoter.env(
                self.promoter.again(trial_id, launch.attempt)))
        return launch

    def _promoted(self, end_game: bool = False) -> Launch | None:
        """Promotion mode: the next segment of a paused trial that earned one (end_game:
        every trial has been asked and nothing runs, hpsearch.pruning.promotion)."""
        if self.promoter is None:
            return None
        found = self.promoter.promote(end_game, rotate_logs)
        if found is None:
            return None
        segment, attempt = found
        row = self.store.trial(segment.trial_id)
        return self._sized(_with_env(self.launches(segment.trial_id, attempt, row.params),
                                     self.promoter.env(segment)), segment.budget)

    def _sized(self, launch: Launch, budget: int) -> Launch:
        """A promotion segment with the scouts' sizes for its step budget, stored with its
        attempt (a driver killed before the store learns them relaunches it at the ceiling)."""
        launch, sized = self.attempts.first(launch, budget)
        if sized:
            self.store.set_overrides(launch.trial_id, launch.attempt, sized)
        return launch

    def _new(self) -> Launch | None:
        """A new trial from the search, stored before it is launched."""
        point = self.extent.next_point()  # an enqueued point first
        asked = None if point is None and self.extent.out_of_time() else \
            self.search.ask(point.params if point else None,
                            {ENQUEUED: point.id} if point else None)
        if asked is None:
            return self._promoted(end_game=True) if not self.live else None
        launch, sized = self.launches(asked.trial_id, 1, asked.params), None
        if not self.promoter:
            launch, sized = self.attempts.first(launch)
        with self.store.batch():  # the trial, and its first segment: one commit
            self.store.insert_trial(asked.trial_id, asked.params, str(launch.trial_dir),
                                    asked.sampler_attrs, asked.study_attrs, sized)
            segment = self.promoter.first(asked.trial_id) if self.promoter else None
        if self.promoter and segment is not None:  # sized for its rung (self._sized)
            launch = self._sized(_with_env(launch, self.promoter.env(segment)), segment.budget)
        if self.stopper:
            self.stopper.added(asked.trial_id)
        fault_point("after_insert")
        if point is not None:  # its request file goes now: the trial says it was asked
            self.extent.asked(point)
        return launch

    def _launch(self, launch: Launch, began: float) -> None:
        self.live[launch.trial_id] = self.trials.open(launch.trial_id, launch.attempt,
                                                launch.trial_dir)
        started = self.executor.submit(launch)
        self.trials.watch(self.live[launch.trial_id])  # submit() made its trial dir
        if started is not None:
            self._record_started(started)
        self.bookkeeping.add(launch.trial_id, time.perf_counter() - began)
        self.on_event(f"trial {launch.trial_id} started (attempt {launch.attempt}): "
                      + " ".join(f"{k}={v}" for k, v in launch.params.items()))

    def _record_started(self, started: Started, launched: bool = True) -> None:
        if launched:
            fault_point("after_launch")  # the process runs; its pid is not stored yet
        self._store_start(started)
        fault_point("after_running")

    def _store_start(self, started: Started) -> None:
        self.store.mark_running(started.trial_id, started.attempt, started.host, started.pid,
                                started.pid_start, started.gpus, started.job_id, started.at,
                                started.site)

    # -- an attempt ended ------------------------------------------------------------------
    def finalize(self, ended: Ended) -> None:
        # An end before this driver began went unseen: its exit_code file's time is its end.
        # One seen while it ran: when the executor saw it end (Ended.at; the local executor
        # stamps its start and end so), else when recorded, as its start was.
        live = self.live[ended.trial_id]
        ended_at = exit_time(live.trial_dir) if live.adopted else None
        unseen = ended_at if ended_at is not None and ended_at < self.began else None
        starts, self.unsaved_starts = self.unsaved_starts, []
        with self.store.batch():  # starts seen with this end, its last metrics, its outcome
            for started in starts:  # its own start first; the others after its end, so
                if started.trial_id == ended.trial_id:  # their recorded start follows it
                    self._store_start(started)
            with self.store.ending_at(unseen if unseen is not None else ended.at):
                self._finalize(ended)
            for started in starts:
                if started.trial_id != ended.trial_id:
                    self._store_start(started)
            if self.checkpoints.policy.keep_trials is not None:
                self.checkpoints.doomed += self.checkpoints.mark(None)
        for _ in starts:
            fault_point("after_running")
        fault_point("after_finish")
        self.checkpoints.remove_marked()

    def _finalize(self, ended: Ended) -> None:
        began = time.perf_counter()
        live = self.live.pop(ended.trial_id)
        self.trials.ingest(live, final=True)
        fault_point("mid_ingest")
        tid, attempt = ended.trial_id, ended.attempt
        if ended.nodes:
            self.store.update_placement(tid, attempt, None, None, ended.nodes, ended.leaves)
        if ended.peak_rss_mb is not None:
            self.store.set_peak_memory(tid, attempt, ended.peak_rss_mb)
        if live.ckpts.seen:
            self.store.fill_checkpoint_metrics(tid, self.metrics[0], exact=False)
        if self.stopper and self.stopper.finished(ended, live.last.get(self.metrics[0])):
            return
        if ended.reason == "cancelled":
            self.store.finish_attempt(tid, attempt, rows.CANCELLED, ended.exit_code, "cancelled")
            self.on_event(f"trial {tid} cancelled")
            return
        values, error, failure = live.verdict(ended, self.metrics, self.costs.measurer(tid))
        if error is None and self.deferred:  # the command runs: retry those it could not
            self.queue += self.deferred
            self.deferred.clear()
        if error is None and self.promoter:
            assert values is not None  # verdict: no error, the objective values
            last = live.last.get(self.metrics[0])
            if self.promoter.paused(ended, last and (last[0], values[0])):
                return
            self.promoter.finished(tid)
        if error is None:
            assert values is not None
            attrs = self.search.tell(tid, rows.COMPLETED, values)
            self.store.finish_attempt(tid, attempt, rows.COMPLETED, ended.exit_code, None, values,
                                      sampler_attrs=attrs)
            if self.stopper:
                self.stopper.ended(tid, rows.COMPLETED, values[0])
            self.on_event(f"trial {tid} completed: " + ", ".join(
                f"{m}={v:.6g}" for m, v in zip(self.metrics, values)))
        else:
            if failure != "lost":
                error = with_stderr_tail(error, live.trial_dir)
            self._failed(ended, error, failure or "other")
        self.checkpoints.doomed += self.checkpoints.mark(tid)
        self.bookkeeping.add(tid, time.perf_counter() - began)

    def _requeued(self, event: Requeued) -> None:
        """The scheduler requeued a trial's job: its next run is the next attempt, or the
        trial failed and its job is cancelled (Attempts.requeued)."""
        live = self.live[event.trial_id]
        verdict = self.attempts.requeued(event, lambda: self.trials.ingest(live))
        if verdict.retry:
            live.attempt = event.attempt + 1
        else:
            del self.live[event.trial_id]
            self.executor.abandon(event.trial_id)
        self.on_event(verdict.message)

    def _failed(self, ended: Ended, error: str, failure: FailureClass) -> None:
        """Retry the trial if its rule for this failure class allows, else give up and tell
        the search, the pruner and the promoter it failed (so none waits for it)."""
        verdict = self.attempts.failed(ended, error, failure)
        held = (" (left queued: the search is stopping)" if self.stop_reason else
                " (held back until a trial runs its command, or nothing else is left)"
                if failure == "launch_error" else "")
        self.on_event(verdict.message + (held if verdict.retry else ""))
        if verdict.retry:
            if failure == "launch_error":  # counted now (FailFast), its retry held back
                self.deferred.append(ended.trial_id)
                self._judge_failures(ended.trial_id, error)
            else:
                self.queue.append(ended.trial_id)
            return
        if self.stopper:
            self.stopper.ended(ended.trial_id, rows.FAILED, None)
        if self.promoter:
            self.promoter.finished(ended.trial_id)
        self._judge_failures(ended.trial_id)

    def _judge_failures(self, trial_id: int, launch_error: str | None = None) -> None:
        if self.gave_up is None and (why := self.failfast.after_failure(
                self.store, trial_id, launch_error)):
            self._give_up("search.max_failures", why)

    def _give_up(self, rule: str, why: str) -> None:
        """Stop the search as failed, for `why` (the `rule` that decided it)."""
        if self.gave_up is not None:
            return
        self.gave_up = why
        self.on_event(why)
        self.request_stop(rule)

    # -- stopping and the end --------------------------------------------------------------
    def on_signal(self, signum: int) -> None:
        leave = self.leave_on(signum) if self.leave_on else None
        if leave:
            self.left = self.left or leave
            return
        if self.stop_reason:  # asked twice: the user will not wait for the cancellations
            self.stop_now = True
        self.stop_signal = self.stop_signal or signum
        self.request_stop(signal.Signals(signum).name)

    def _stop_all(self) -> None:
        withdrawn = self.executor.withdraw()  # never started: resume launches them
        self.store.withdraw(withdrawn)
        for trial_id in withdrawn:
            del self.live[trial_id]
        self.on_event(f"stopping ({self.stop_reason}): cancelling "
                      f"{len(self.live)} running trial(s); press Ctrl-C again to exit "
                      f"without waiting")
        for trial_id in list(self.live):
            self.executor.cancel(trial_id)
        while self.live and not self.stop_now:
            self._handle(self.executor.poll(timeout=0.5))
            self.trials.reported(self.live)
        if self.live:
            left = ", ".join(str(t) for t in sorted(self.live))
            message = (f"stopped without waiting: trial(s) {left} may still run, asked to "
                       f"stop; `hpsearch resume` adopts them, `hpsearch cancel` stops them")
            self.store.add_event("stopped", message)
            self.on_event(message)

    def _leave(self) -> int:
        return leave(self.store, self.left or "", len(self.live), self.on_event)

    def finish(self) -> int:
        return finish(self.store, done_at=self.search.total, timed_out=self.extent.timed_out,
                      gave_up=self.gave_up, stopped_by=self.stop_reason)

def _with_env(launch: Launch, env: dict[str, str]) -> Launch:
    return dataclasses.replace(launch, env={**launch.env, **env})

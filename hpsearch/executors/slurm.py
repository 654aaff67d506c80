"""Slurm executor: one batch job per trial attempt, watched by one batched query per poll.

submit() runs sbatch and returns the job id (the driver stores it at once). poll() asks
sacct about every job in flight in one call, backing off while nothing changes; pending
jobs get their reason from one squeue call. Without accounting (sacct says it is disabled)
squeue and `scontrol show job` stand in. A job whose id was never stored (the driver died
between sbatch and the store) is found again by its unique job name.

Why not submitit: its jobs run a pickled Python function through `python -m submitit...`,
which needs submitit and the driver's Python on every compute node and hides the command a
trial runs. hpsearch trials are shell commands (possibly in a container, under a launcher),
so the batch script is ours: a pure function (hpsearch.slurm.sbatch) with golden files, as
submitit itself does for its own script.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hpsearch.executors.base import (
    Adoptable,
    Ended,
    EndReason,
    Executor,
    Note,
    Requeued,
    Started,
    Update,
    nap,
)
from hpsearch.executors.end_hints import HINT_EVERY, EndHints
from hpsearch.executors.slurm_health import SlurmHealth
from hpsearch.executors.slurm_submit import Submitter
from hpsearch.launch.attempt import Launch, prepare_trial_dir
from hpsearch.placement.planner import Planner
from hpsearch.slurm import parse, sbatch
from hpsearch.slurm.failures import TRANSIENT, Backoff, SlurmError, retrying
from hpsearch.slurm.hostlist import compress
from hpsearch.spec.model import SlurmJob

if TYPE_CHECKING:
    from hpsearch.spec.model import Spec
    from hpsearch.store.store import Store

MAX_BACKOFF = 30.0  # seconds between queries when nothing changes
ADOPT_TRIES = 20  # Slurm queries tried while adopting a job on resume (back-off up to 60 s)
CTLD_PROBE = 20.0  # seconds: sacct answers from slurmdbd, so while every job runs squeue
                   # asks slurmctld at least this often (its outage is seen, and shown)
SHORT_READS_FOR = 15.0  # seconds to wait for a final record that lists all the job's nodes

# Final Slurm states and how the driver sees them.
_ENDED_AS: dict[str, EndReason] = {
    "COMPLETED": "exited", "FAILED": "exited", "CANCELLED": "cancelled",
    "TIMEOUT": "timeout", "OUT_OF_MEMORY": "out_of_memory", "NODE_FAIL": "node_fail",
    "PREEMPTED": "preempted", "BOOT_FAIL": "boot_fail", "DEADLINE": "deadline",
    "REVOKED": "revoked", "SPECIAL_EXIT": "special_exit"}
# How a run that Slurm requeued ended (the state of its own record in `sacct -D`).
_REQUEUED_AS: dict[str, EndReason] = {"NODE_FAIL": "node_fail", "PREEMPTED": "preempted",
                                      "REQUEUED": "requeued"}
# Final states after which Slurm may requeue the same job (JobRequeue, PreemptMode=REQUEUE):
# while squeue still holds the job, it is not over.
_MAY_REQUEUE = frozenset({"NODE_FAIL", "PREEMPTED"})


@dataclass
class _Job:
    trial_id: int
    attempt: int
    job_id: str
    submitted: float
    state: str = "PENDING"
    reason: str | None = None
    nodes: str | None = None
    cancel_requested: bool = False
    last_seen: float = 0.0
    short_since: float | None = None  # when a final record first listed too few nodes
    runs: int = 1  # runs of this job id known as attempts (Slurm requeues keep the id)
    trial_dir: Path | None = None  # its files are the trial's heartbeat
    node_count: int | None = None  # the nodes it asked for; None: not known (adopted)


class SlurmExecutor(Executor):
    @classmethod
    def from_spec(cls, spec: Spec, store: Store | None, ask_ahead: bool) -> SlurmExecutor:
        return cls(spec.slurm_job())

    def __init__(self, job: SlurmJob, slurm=None) -> None:
        if slurm is None:
            from hpsearch.slurm.commands import Slurm
            slurm = Slurm()
        self.job, self.slurm = job, slurm
        self.parallel = job.parallel
        self.interval = job.executor.poll_interval
        self.wait = self.interval
        self.next_query = 0.0
        self.jobs: dict[int, _Job] = {}  # trial id -> its job in flight
        self.waiting: list[Launch] = []  # single-node launches to submit as one array
        self.unsubmitted: list[Ended] = []  # cancelled while waiting to go in an array
        self.planner = Planner(job, slurm)
        self.held: list[Launch] = []  # multi-node launches waiting for a leaf to free up
        self.notes: list[Note] = []
        self.pending: list = []  # events found while adopting, for the next poll()
        self.health = SlurmHealth(self.interval)
        self.hints = EndHints()  # ends its jobs' trial dirs show: ask Slurm at once
        self.submitter = Submitter(job, slurm, self.health)
        self.to_cancel: list[tuple[str, bool]] = []  # (job id or name, by name): scancel
                                                    # failed, sent again by poll()
        self.query_after = 0.0  # monotonic time of the next query after a failed one
        self.ctld_asked = time.monotonic()  # when squeue last answered

    def free_slots(self) -> int:
        return max(0, self.parallel - len(self.jobs) - len(self.waiting) - len(self.held))

    def submit(self, launch: Launch) -> Started | None:
        prepare_trial_dir(launch)
        if self.job.executor.array and self._resources(launch).nodes == 1 \
                and not launch.sbatch_extra:  # a retry with its own options goes alone
            self.waiting.append(launch)  # poll() submits the ready ones: an array per size
            return None
        return self._place_and_submit(launch)

    def _place_and_submit(self, launch: Launch) -> Started | None:
        """sbatch with the planner's options, or hold the launch while it waits for a leaf,
        or while Slurm cannot take it (poll() asks again). If Slurm rejects the nodes named,
        the job goes without them; if it rejects the job itself, the attempt fails."""
        if not self.health.may_submit():
            self._hold(launch)
            return None
        try:
            placement = self.planner.choose(launch.trial_id, launch.attempt, (
                *self.job.resources.sbatch_extra, *launch.sbatch_extra),
                self._resources(launch).nodes)
        except SlurmError as exc:  # sinfo or scontrol did not answer
            self.health.submit_failed(exc, TRANSIENT)
            self._hold(launch)
            return None
        if placement.wait:
            if launch not in self.held:
                self.notes.append(Note(launch.trial_id, "placement", f"waiting up to "
                                       f"{self.job.placement.max_wait:g} s for "
                                       f"{self._resources(launch).nodes} free nodes under "
                                       "one leaf"))
            self._hold(launch)
            return None
        name = self.submitter.job_name(launch.trial_id, launch.attempt)
        try:
            job_id = self.submitter.sbatch(name, sbatch.batch_script(self.job, launch,
                                                            placement.options))
            if job_id is None:
                self._hold(launch)
                return None
        except SlurmError as exc:
            if not placement.options:
                self._cannot_submit([launch], exc)
                return None
            self.planner.started(launch.trial_id, launch.attempt)
            self.notes.append(Note(launch.trial_id, "placement", f"sbatch refused "
                                   f"{' '.join(placement.options)} ({exc}); submitted "
                                   "without placement"))
            try:
                job_id = self.submitter.sbatch(name, sbatch.batch_script(self.job, launch))
            except SlurmError as again:
                self._cannot_submit([launch], again)
                return None
            if job_id is None:
                self._hold(launch)
                return None
        else:
            if placement.options:
                self.notes.append(Note(launch.trial_id, "placement", " ".join(
                    placement.options) + (f" (leaf {', '.join(placement.leaves)})"
                                          if placement.leaves else "")))
        if launch in self.held:
            self.held.remove(launch)
        self._track(launch, job_id)
        return Started(launch.trial_id, launch.attempt, host="", job_id=job_id)

    def _resources(self, launch: Launch):
        """The trial's own resources (per-trial resources), else the spec's."""
        return launch.resources or self.job.resources

    def _hold(self, launch: Launch) -> None:
        """poll() tries it again each time (the planner's node state is cached: sinfo at
        most once per poll_interval); it asks nothing of sacct or squeue sooner."""
        if launch not in self.held:
            self.held.append(launch)

    def _cannot_submit(self, launches: list[Launch], exc: SlurmError) -> None:
        """Slurm refused these jobs for good (invalid partition, account...): each attempt
        ends as a launch error, with Slurm's message."""
        for launch in launches:
            if launch in self.held:
                self.held.remove(launch)
            self.planner.started(launch.trial_id, launch.attempt)
            self.unsubmitted.append(Ended(launch.trial_id, launch.attempt, None,
                                          "launch_error", f"sbatch refused the job: {exc}"))
        self._soon()

    def _track(self, launch: Launch, job_id: str) -> None:
        now = time.monotonic()
        self.jobs[launch.trial_id] = _Job(launch.trial_id, launch.attempt, job_id, now,
                                          last_seen=now, trial_dir=launch.trial_dir,
                                          node_count=self._resources(launch).nodes)
        self._soon()

    def _submit_waiting(self) -> list[Started]:
        """Submit the buffered single-node launches: one job array per size (trials of one
        size, their resources alike) and MaxArraySize chunk (a lone launch goes as a plain
        job). A manifest written before sbatch maps each
        task to its trial, so a restarted driver can find them by the array's name."""
        started = []
        while self.waiting and self.health.may_submit():
            try:
                chunk = self.submitter.next_chunk(self.waiting)
            except SlurmError as exc:
                self.health.submit_failed(exc, TRANSIENT)
                break
            try:
                chunk, job_ids, strays = self.submitter.submit_chunk(chunk, self.waiting)
            except SlurmError as exc:  # refused for good
                self.waiting = [la for la in self.waiting if la not in chunk]
                self._cannot_submit(chunk, exc)
                continue
            self._scancel(strays)
            if not job_ids:  # held: try again after the back-off
                break
            self.waiting = [la for la in self.waiting if la not in chunk]
            for launch, job_id in zip(chunk, job_ids):
                self._track(launch, job_id)
                started.append(Started(launch.trial_id, launch.attempt, host="",
                                       job_id=job_id))
        return started

    def adopt(self, known: Adoptable) -> Started | Ended | None:
        """As Executor.adopt. While Slurm does not answer, it asks again with back-off (for
        up to about ADOPT_TRIES minutes; then SlurmError: the store is untouched)."""
        return retrying(lambda: self._adopt(known), attempts=ADOPT_TRIES,
                        backoff=Backoff(base=2.0, cap=60.0),
                        on_retry=lambda exc, delay: self.notes.append(Note(
                            known.trial_id, "slurm_unreachable", f"adopting its job: {exc}; "
                            f"asking again in {delay:.0f} s")))

    def _adopt(self, known: Adoptable) -> Started | Ended | None:
        job_id = known.job_id or self.submitter.find_by_name(known)
        if job_id is None:
            return None
        job = _Job(known.trial_id, known.attempt, job_id, time.monotonic(),
                   last_seen=time.monotonic(), runs=known.job_runs if known.job_id else 1,
                   trial_dir=known.trial_dir)
        self.jobs[known.trial_id] = job
        events = self._query([job])
        if any(isinstance(event, Requeued) for event in events):
            # Requeued while no driver ran: the store learns of each run first (poll()).
            self.pending.extend(events)
            return Started(known.trial_id, known.attempt, host="", job_id=job_id)
        for event in events:
            if isinstance(event, Ended):
                return event
        self._soon()
        return Started(known.trial_id, known.attempt, host=job.nodes or "", job_id=job_id)

    def cancel(self, trial_id: int) -> None:
        for queue in (self.waiting, self.held):
            self._cancel_unsubmitted(queue, trial_id)
        job = self.jobs.get(trial_id)
        if job is not None and not job.cancel_requested:
            job.cancel_requested = True  # poll() cancels all asked for at once
            if (job.job_id, False) not in self.to_cancel:
                self.to_cancel.append((job.job_id, False))
            self._soon()

    def abandon(self, trial_id: int) -> None:
        job = self.jobs.pop(trial_id, None)
        if job is not None:
            self._scancel([job.job_id])

    def _scancel(self, job_ids: list[str], by_name: bool = False) -> None:
        """scancel now; if Slurm does not answer, poll() sends it again until it does."""
        pending = [(job_id, by_name) for job_id in job_ids]
        if not pending:
            return
        try:
            for job_id, named in pending:
                if named:
                    self.slurm.scancel_by_name(job_id)
            self.slurm.scancel([job_id for job_id, named in pending if not named])
        except SlurmError:
            self.to_cancel.extend(p for p in pending if p not in self.to_cancel)

    def _retry_cancels(self) -> None:
        """One scancel for every job asked to stop since the last poll; an array whose every
        task we track is being cancelled goes by its id, one RPC instead of one per task."""
        pending, self.to_cancel = self.to_cancel, []
        self._scancel(self._by_array([job_id for job_id, named in pending if not named]))
        for job_id, named in pending:
            if named:
                self._scancel([job_id], by_name=True)

    def _by_array(self, job_ids: list[str]) -> list[str]:
        arrays: dict[str, list[_Job]] = {}
        for job in self.jobs.values():
            if (task := parse.array_task(job.job_id)) is not None:
                arrays.setdefault(task[0], []).append(job)
        whole = {array for array, jobs in arrays.items()
                 if all(job.cancel_requested for job in jobs)}
        ids = []
        for job_id in job_ids:
            task = parse.array_task(job_id)
            ids.append(task[0] if task is not None and task[0] in whole else job_id)
        return list(dict.fromkeys(ids))

    def _cancel_unsubmitted(self, queue: list[Launch], trial_id: int) -> None:
        for launch in queue:  # not submitted yet: it never runs
            if launch.trial_id == trial_id:
                queue.remove(launch)
                # ...unless an sbatch whose answer was lost did submit it
                first = next((la for la in queue  # who leads its size's array
                              if self._resources(la) == self._resources(launch)), None)
                for name in self.submitter.unsure_names(launch, first):
                    self._scancel([name], by_name=True)
                self.planner.started(trial_id, launch.attempt)
                self.unsubmitted.append(Ended(trial_id, launch.attempt, None, "cancelled",
                                              "cancelled before it was submitted"))
                return

    def poll(self, timeout: float) -> Sequence[Started | Update | Requeued | Ended | Note]:
        if self.pending:
            events, self.pending = self.pending, []
            return events
        if self.to_cancel and time.monotonic() >= self.query_after:
            self._retry_cancels()  # every cancel() since the last poll, in one scancel
        news: list[Started | Ended] = list(self.unsubmitted)
        self.unsubmitted = []
        if self.waiting and self.health.may_submit():
            news += self._submit_waiting()
        if self.held and self.health.may_submit():
            news += [started for launch in list(self.held)
                     if (started := self._place_and_submit(launch)) is not None]
        events = [*self.notes, *self.health.take_notes(), *news, *self.unsubmitted]
        self.notes, self.unsubmitted = [], []
        if events:
            return events
        now = time.monotonic()
        next_query = max(self.next_query, self.query_after)
        if now < next_query:  # a trial's report wakes it; an end its trial dir shows
            nap(self.wake_fd, min(timeout, next_query - now, HINT_EVERY))  # asks now
            hinted = time.monotonic() >= self.query_after and self.hints.new_end(
                self.jobs.values())
            if not hinted and time.monotonic() < next_query:
                return []
        try:
            self._retry_cancels()
            events = self._query(list(self.jobs.values())) if self.jobs else []
        except SlurmError as exc:  # never the trials' fault: ask again later
            self.query_after = time.monotonic() + self.health.query_failed(exc)
            return self.health.take_notes()
        if time.monotonic() >= self.query_after and self.health.query_ok():
            for job in self.jobs.values():  # after an outage nothing was seen for a while
                job.last_seen = time.monotonic()
        # Back off while nothing happens; come back quickly after a change, and while a job
        # we cancelled has yet to show its end (sacct can list it pending for seconds more).
        waiting_end = any(job.cancel_requested for job in self.jobs.values()) \
            or self.hints.awaited(self.jobs.values())
        self.wait = self.interval if events or waiting_end else min(self.wait * 1.5,
                                                                    MAX_BACKOFF)
        self.next_query = min(time.monotonic() + self.wait, self.ctld_asked + CTLD_PROBE)
        return self.health.take_notes() + events

    # -- helpers ---------------------------------------------------------------------------
    def _soon(self) -> None:
        self.wait = self.interval
        self.next_query = min(self.next_query, time.monotonic() + min(1.0, self.interval))

    def _ask(self, job_ids: list[str]) -> tuple[dict[str, list[parse.JobRecord]] | None,
                                                dict[str, parse.JobRecord],
                                                dict[str, parse.QueueRecord]]:
        """What Slurm says of `job_ids`: sacct's runs of each (None: no accounting), the
        newest run of each, and squeue's record of those sacct does not show finished (of
        all of them every CTLD_PROBE seconds)."""
        runs = self.slurm.sacct_runs(job_ids)  # every run: a requeue keeps the job id
        wanted = set(job_ids)
        seen: dict[str, parse.JobRecord] = {} if runs is None else {
            found[-1].job_id: found[-1] for found in runs.values() if found[-1].job_id in wanted}
        waiting = [jid for jid in job_ids if jid not in seen or seen[jid].state == "PENDING"
                   or seen[jid].state in _MAY_REQUEUE]
        if time.monotonic() - self.ctld_asked >= CTLD_PROBE:
            waiting = list(job_ids)
        queue = {rec.job_id: rec for rec in self.slurm.squeue(waiting)} if waiting else {}
        if waiting:
            self.ctld_asked = time.monotonic()
        return runs, seen, queue

    def _query(self, jobs: list[_Job]) -> list[Update | Requeued | Ended | Note]:
        by_id = {job.job_id: job for job in jobs}
        runs, seen, queue = self._ask(list(by_id))
        events: list[Update | Requeued | Ended | Note] = []
        # array id -> its sacct records, asked once per query
        arrays: dict[str, list[parse.JobRecord]] = {}
        now = time.monotonic()
        for job_id, job in by_id.items():
            rec = seen.get(job_id)
            queued = queue.get(job_id)
            if self._requeued(job, runs, rec, queued, events):
                continue
            try:  # a failure here must not lose the requeues found above: ask next time
                if rec is None and queued is None and runs is None:
                    rec = self.slurm.job_record(job_id)  # no accounting: ask scontrol
                split = rec is None and queued is None and job.cancel_requested \
                    and self._cancelled_before_it_split(job_id, arrays)
            except SlurmError as exc:
                self.query_after = time.monotonic() + self.health.query_failed(exc)
                continue
            if split:
                events.append(self._end(job, None, "cancelled", f"Slurm job {job_id} "
                                        "cancelled while its array was pending"))
                continue
            if rec is None and queued is None and job.cancel_requested \
                    and job.state in ("RUNNING", "COMPLETING"):
                # it ran, we scancelled it, and Slurm no longer lists it: it has ended, its
                # processes gone. sacct can take seconds more to list it (an array's tasks:
                # 4 s on the test cluster), and its slot should not wait for that
                events.append(self._end(job, None, "cancelled", f"Slurm job {job_id} "
                                        "cancelled (no longer queued; its accounting record "
                                        "not written yet)"))
                continue
            if rec is None and queued is None:
                lost_after = self.job.executor.lost_after
                if now - job.last_seen > lost_after and _quiet_for(job.trial_dir) > lost_after:
                    events.append(self._end(job, None, "lost", f"Slurm no longer knows job "
                                            f"{job_id}, and its trial dir has been quiet for "
                                            f"{lost_after:g} s"))
                continue
            job.last_seen = now
            if queued is not None and (rec is None or not rec.finished):
                state, reason, nodes = queued.state, queued.reason, queued.nodes
            elif rec is not None:
                state, reason, nodes = rec.state, None, rec.nodes
            else:  # not reached: without rec and queued it went on above
                continue
            asked = job.node_count or (1 if self.job.resources.per_trial
                                       else self.job.resources.nodes)
            if state == "PENDING" or (state == "COMPLETING" and len(nodes) < asked):
                nodes = ()  # squeue shows a pending job's planned nodes, and a completing
                            # one's still busy ones: keep the nodes it ran on
            nodelist = compress(list(nodes)) if nodes else job.nodes
            if state != "PENDING" or (rec is not None and rec.finished):
                self.planner.started(job.trial_id, job.attempt)
            never_ran = rec is not None and rec.state == "CANCELLED" and not nodes \
                and job.cancel_requested and job.state == "PENDING"  # we cancelled it there
            if rec is not None and rec.finished and len(nodes) < asked and not never_ran \
                    and not job.nodes and now - (job.short_since or now) < SHORT_READS_FOR:
                job.short_since = job.short_since or now  # sacct drops nodes while they
                self._soon()                              # finish the job: ask again
                continue
            if rec is not None and rec.finished:
                events.append(self._ended(job, rec, nodelist))
            elif (state, reason, nodelist) != (job.state, job.reason, job.nodes):
                job.state, job.reason, job.nodes = state, reason, nodelist
                events.append(Update(job.trial_id, job.attempt, state,
                                     reason if state == "PENDING" else None, nodelist,
                                     self.planner.leaves(nodelist)))
            if state == "PENDING":
                events.extend(self._replan(job))
        return events

    def _cancelled_before_it_split(self, job_id: str,
                                   arrays: dict[str, list[parse.JobRecord]]) -> bool:
        """Is `job_id` a task of an array whose every task we cancelled while it was still
        pending as a whole? Slurm then keeps one record for the array, cancelled and never
        on a node, under the bare id ("2148") or its range ("2664_[0-2%3]"), and
        `sacct -j ID_N` prints nothing (both seen on 22.05)."""
        task = parse.array_task(job_id)
        if task is None:
            return False
        if task[0] not in arrays:
            arrays[task[0]] = self.slurm.sacct([task[0]]) or []
        return any(rec.job_id in (task[0], job_id) and rec.state == "CANCELLED"
                   and not rec.nodes for rec in arrays[task[0]])

    def _requeued(self, job: _Job, runs: dict[str, list[parse.JobRecord]] | None,
                  rec: parse.JobRecord | None, queued: parse.QueueRecord | None,
                  events: list) -> bool:
        """Adds to `events` the job's runs that Slurm requeued since the last look; True
        where nothing more is to be read of the job now: Slurm is requeuing it (its next
        run's record is on its way), or it was cancelled instead (_resubmit)."""
        if runs:
            events.extend(self._requeues(job, runs.get(job.job_id, [])))
            if job.trial_id not in self.jobs:  # a node failure's requeue, cancelled
                return True
        if rec is not None and rec.state in _MAY_REQUEUE and queued is not None \
                and queued.state != "COMPLETING":
            if rec.state == "NODE_FAIL":
                events.append(self._resubmit(job, rec))
            else:
                self._soon()
            return True
        return False

    def _requeues(self, job: _Job, runs: list[parse.JobRecord]) -> list[Requeued | Ended]:
        """A Requeued for each run of the job that ended since the last look, the job moved
        on to the attempt of its newest run. `runs`: its sacct records, oldest first."""
        events: list[Requeued | Ended] = []
        for run in runs[job.runs - 1:-1]:
            if run is runs[-2] and run.state == "NODE_FAIL" and runs[-1].state == "PENDING":
                events.append(self._resubmit(job, run))
                return events
            nodelist = compress(list(run.nodes)) if run.nodes else job.nodes
            detail = (f"Slurm job {job.job_id} {run.raw_state}"
                      + (f" on {nodelist}" if nodelist else "") + ", requeued by Slurm")
            events.append(Requeued(job.trial_id, job.attempt, job.job_id,
                                   _REQUEUED_AS.get(run.state, "requeued"), detail, nodelist,
                                   self.planner.leaves(nodelist)))
            job.attempt += 1
        if events:
            job.runs = len(runs)
            job.state, job.reason, job.nodes, job.short_since = "PENDING", None, None, None
            self._soon()
        return events

    def _resubmit(self, job: _Job, run: parse.JobRecord) -> Ended:
        """A run that ended NODE_FAIL, which Slurm requeues (JobRequeue=1, its default): the
        requeued job waits out a BeginTime (cred_expire: 120 s by default, 30 s on the test
        cluster) before it may start, and on the same nodes if they come back. It is
        cancelled instead and its attempt ends node_fail, so that the retry rules submit a
        new job at once, away from the failed node (issue 42: after a node crash a job per
        trial reached the target 30 s late, waiting for its requeue)."""
        job.nodes = (compress(list(run.nodes)) if run.nodes else None) or job.nodes
        self._scancel([job.job_id])
        return self._end(job, None, "node_fail", f"Slurm job {job.job_id} {run.raw_state}"
                         + (f" on {job.nodes}" if job.nodes else "") + "; Slurm would "
                         "requeue it to wait out its BeginTime: cancelled, to run again now "
                         "as a new job")

    def _replan(self, job: _Job) -> list[Note]:
        placement = self.planner.replan(job.trial_id, job.attempt)
        if placement is None:
            return []
        nodelist = placement.options[0].split("=", 1)[1]
        try:
            self.slurm.set_nodelist(job.job_id, nodelist)
        except SlurmError as exc:
            return [Note(job.trial_id, "placement", f"could not move pending job "
                                                    f"{job.job_id} to {nodelist}: {exc}")]
        return [Note(job.trial_id, "placement", f"job {job.job_id} pended past "
                     f"{self.job.placement.replan_after:g} s: nodes re-chosen, {nodelist} "
                     f"(leaf {', '.join(placement.leaves)})")]

    def _ended(self, job: _Job, rec: parse.JobRecord, nodelist: str | None) -> Ended:
        # The nodes seen while it ran: at its end sacct lists only those still completing.
        job.nodes = job.nodes or nodelist
        kind = _ENDED_AS.get(rec.state, "failed")  # no other final state: raw_state says
        code = rec.exit_code
        if rec.signal and not code:
            code = 128 + rec.signal
        if kind == "cancelled" and not job.cancel_requested:
            kind = "failed"
        detail = f"Slurm job {job.job_id} {rec.raw_state}" + (f" on {job.nodes}" if job.nodes
                                                               else "")
        return self._end(job, code, kind, detail)

    def _end(self, job: _Job, code: int | None, kind: EndReason, detail: str) -> Ended:
        del self.jobs[job.trial_id]
        self.health.room_freed()
        return Ended(job.trial_id, job.attempt, code, kind, detail, job.nodes,
                     self.planner.leaves(job.nodes), job.job_id)


def _quiet_for(trial_dir: Path | None) -> float:
    """Seconds since anything in the trial dir (output, metrics, checkpoints list) changed;
    inf if it has no files."""
    newest = 0.0
    for path in (trial_dir.iterdir() if trial_dir and trial_dir.is_dir() else ()):
        try:
            newest = max(newest, path.stat().st_mtime)
        except OSError:
            continue
    return time.time() - newest if newest else float("inf")

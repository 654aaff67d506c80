"""Several Slurm sites for one search (`executor.sites`, issue 40, docs/brokerage.md).

A site is a partition, and optionally another cluster (`sbatch -M`), account and qos. Each
site has a Slurm executor of its own (hpsearch.executors.slurm: its jobs, arrays, placement
within the site's partition, requeues, health); this one hands each launch to the site the
broker (hpsearch.executors.brokerage) weighs best at that moment, and routes cancels,
adoptions and polls to the site that holds each trial. Every Started it reports names its
site (Started.site), which the store keeps with the attempt, so a resumed driver adopts each
job through its own site (its own cluster) and `status` counts trials per site.

What it measures per site, to weigh it: its running and pending jobs (from the site's own
executor, as Slurm reported them), each job's queue wait (submit to the first poll that saw
it run) and the attempts the site itself failed (brokerage.SITE_FAILURES). A Note of kind
`brokerage` says where each trial went and the weights then (`hpsearch events`).

Moving (JEDI reassigns jobs that wait too long at a queue; Slurm's multi-partition job
starts wherever a node is idle): a job pending at a site with no idle node for it while
another has idle nodes for it (after brokerage.QUICK_MOVE seconds), or pending for
`executor.move_after` seconds while another site starts what it gets (nothing of ours
pending there, room under its `max`, not skipped), is cancelled and its attempt sent there;
the cancel's end is not the driver's news, the new job's Started is (the same attempt, a new
job id and site). At most MAX_MOVES a trial. A site whose Slurm does not answer (its
controller down) is skipped by the broker, and the launches it holds unsubmitted (sbatch
failed) go to another site at once: nothing of them reached that Slurm to wait for. If the
job started before the cancel reached it, it ran a few seconds for nothing, and its attempt
runs again at the other site. A driver killed between the cancel and the store learning the
new job finds that job by its name when it resumes (adopt asks every cluster); one killed
before the new sbatch finds the old job cancelled, which fails that attempt (retried as any
failure is).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from hpsearch.executors import brokerage, late_binding
from hpsearch.executors.base import (
    Adoptable,
    Ended,
    Executor,
    GaveUp,
    Note,
    Requeued,
    Started,
    Update,
)
from hpsearch.executors.slurm import SlurmExecutor
from hpsearch.launch.attempt import Launch
from hpsearch.slurm.failures import LIMIT
from hpsearch.slurm.hostlist import expand
from hpsearch.spec.model import Site
from hpsearch.store.site_speeds import SpeedTracker

if TYPE_CHECKING:
    from hpsearch.spec.model import Resources, SlurmJob, Spec
    from hpsearch.store.store import Store

RUNNING_STATES = frozenset({"RUNNING", "COMPLETING"})
LOOK_EVERY = 2.0  # seconds: how stale a site's idle nodes and others' pending jobs may be
MAX_MOVES = 3  # moves of one trial's attempt between sites


def site_resources(res: Resources, site: Site) -> Resources:
    """A trial's resources as sent to `site`: its partition, account and qos, where set."""
    return replace(res, **{k: getattr(site, k) for k in ("partition", "account", "qos")
                           if getattr(site, k) is not None})


def sent_resources(res: Resources, site: Site, others: Sequence[Site]) -> Resources:
    """A trial's resources as its job asks for them: its site's, and with `others` (bind:
    late, late_binding.partners) their partitions after the site's own."""
    own = site_resources(res, site)
    return replace(own, partition=late_binding.partition_list(site, others)) if others \
        else own


def unreachable(ex: SlurmExecutor) -> str | None:
    """Why a site's Slurm does not answer now (its queries fail, or sbatch failed for a
    reason other than a limit and its back-off has not passed), or None."""
    health = ex.health
    if health.unreachable:
        return "its queries fail"
    if health.submit_kind is not None and health.submit_kind != LIMIT \
            and not health.may_submit():
        return "sbatch failed"
    return None


def look(load: brokerage.SiteLoad, slurm, partition: str | None, ours: set[str]) -> None:
    """Ask the site's Slurm for its partition's idle nodes and every job pending there:
    those not in `ours` (this search's job ids at the site) are the others'. Unknown (idle
    None) where Slurm does not answer."""
    from hpsearch.slurm.failures import SlurmError
    try:
        idle, pending = slurm.partition_load(partition)
    except SlurmError:
        load.idle = None
        return
    load.idle, load.others = idle, len(pending - ours)


def site_job(job: SlurmJob, site: Site) -> SlurmJob:
    """The part of the spec one site's executor (or its pilots) is made of: the site's
    partition (its placement plans within it), at most `max` jobs in flight, and its own
    pilot settings (time limit, nodes, slots per node) where it sets them."""
    pilots = job.executor.pilots
    executor = replace(job.executor, pilots=site.pilots.over(pilots)) \
        if pilots is not None and site.pilots else job.executor
    return replace(job, resources=site_resources(job.resources, site),
                   parallel=min(job.parallel, site.max or job.parallel), executor=executor,
                   slot_shape=site_resources(job.slot_shape, site) if job.slot_shape else None)


class SitesExecutor(Executor):
    @classmethod
    def from_spec(cls, spec: Spec, store: Store | None, ask_ahead: bool) -> SitesExecutor:
        return cls(spec.slurm_job(), speeds=SpeedTracker(store.db) if store else None)

    def __init__(self, job: SlurmJob, slurms: dict[str, object] | None = None,
                 speeds: SpeedTracker | None = None) -> None:
        """speeds: the sites' trial speeds from the store, which the broker weighs."""
        from hpsearch.slurm.commands import Slurm
        self.job = job
        self.sites = job.executor.sites
        self.parallel = job.parallel
        self.executors: dict[str, SlurmExecutor] = {}
        for site in self.sites:
            slurm = (slurms or {}).get(site.name) or Slurm(cluster=site.cluster)
            self.executors[site.name] = SlurmExecutor(site_job(job, site), slurm)
        self.loads = {site.name: brokerage.SiteLoad() for site in self.sites}
        self.where: dict[int, str] = {}  # trial id -> the site holding its attempt
        self.submitted: dict[int, float] = {}  # trial id -> when its job was handed over
        self.launches: dict[int, Launch] = {}  # trial id -> its attempt's launch, as given
        self.moving: dict[int, str] = {}  # trial id -> the site it goes to once cancelled
        self.moves: dict[int, int] = {}  # trial id -> how often its attempt was moved
        self.notes: list[Note] = []
        self.looked = -LOOK_EVERY  # monotonic: when the sites' queues were last asked
        self.speeds = speeds
        # bind: late (hpsearch.executors.late_binding): the other sites each trial's job
        # may start at, the site it ran at where not the one that holds it, and each
        # cluster's node -> partitions
        self.spread: dict[int, list[Site]] = {}
        self.ran_at: dict[int, str] = {}
        self.sent: dict[int, Started] = {}
        self.node_maps: dict[str | None, late_binding.NodePartitions] = {}

    # -- the broker's view -----------------------------------------------------------------
    def _count(self) -> None:
        """Each site's running and pending jobs now, from its executor."""
        for load in self.loads.values():
            load.running = 0
        for name, ex in self.executors.items():
            load = self.loads[name]
            for job in ex.jobs.values():  # bound late: running where it runs
                if job.state in RUNNING_STATES:
                    self.loads[self.ran_at.get(job.trial_id, name)].running += 1
            load.pending = sum(1 for j in ex.jobs.values() if j.state not in RUNNING_STATES) \
                + len(ex.waiting) + len(ex.held)
            load.unreachable = unreachable(ex)
        for target in self.moving.values():  # cancelled to move there: soon pending there
            self.loads[target].pending += 1
        if time.monotonic() >= self.looked + LOOK_EVERY:
            self.looked = time.monotonic()
            if self.speeds is not None:
                self.speeds.update(self.loads)
            ours = {j.job_id for ex in self.executors.values() for j in ex.jobs.values()}
            for site in self.sites:  # (a job of ours may wait in several partitions)
                ex = self.executors[site.name]
                if self.loads[site.name].unreachable is None:
                    look(self.loads[site.name], ex.slurm, site.partition, ours)

    def verdicts(self) -> list[brokerage.Verdict]:
        self._count()
        return brokerage.verdicts(self.sites, self.loads, time.time())

    def free_slots(self) -> int:
        self._count()
        in_flight = sum(load.in_flight for load in self.loads.values())
        if brokerage.choose(self.sites, self.loads, time.time()) is None:
            return 0
        return max(0, self.parallel - in_flight)

    # -- launching ---------------------------------------------------------------------------
    def submit(self, launch: Launch) -> Started | None:
        self._count()
        now = time.time()
        site = brokerage.choose(self.sites, self.loads, now,
                                (launch.resources or self.job.resources).nodes)
        if site is None:  # free_slots() said there was room; a retry came meanwhile
            site = max(brokerage.verdicts(self.sites, self.loads, now),
                       key=lambda v: v.weight).site
        self.launches[launch.trial_id] = launch
        self.moves.pop(launch.trial_id, None)
        self.notes.append(Note(launch.trial_id, "brokerage", f"attempt {launch.attempt} to "
                               f"site {site.name} (weights: {self._weights(now)})"))
        return self._send(launch, site)

    def _weights(self, now: float) -> str:
        return ", ".join(f"{v.site.name} {v.weight:.3g}" + (" (skipped)" if v.skipped else "")
                         for v in brokerage.verdicts(self.sites, self.loads, now))

    def _send(self, launch: Launch, site: Site) -> Started | None:
        tid = launch.trial_id
        self.where[tid] = site.name
        self.submitted[tid] = time.time()
        self.loads[site.name].pending += 1
        self.ran_at.pop(tid, None)
        resources = launch.resources or self.job.resources
        others = self._partners(site, resources.nodes)
        if others:
            self.spread[tid] = others
        else:
            self.spread.pop(tid, None)
        started = self.executors[site.name].submit(replace(
            launch, resources=sent_resources(resources, site, others)))
        if started is None:
            return None
        # kept to tell the store where it runs, its start (the submit: its queue wait counts
        # from there) unchanged
        self.sent[tid] = replace(self._named(started, site.name),
                                 at=started.at or self.submitted[tid])
        return self._named(started, site.name)

    def _partners(self, site: Site, nodes: int) -> list[Site]:
        """bind: late: the other open sites a single-node job sent to `site` names too."""
        if self.job.executor.bind != "late" or nodes != 1:
            return []
        open_ = [v.site for v in brokerage.verdicts(self.sites, self.loads, time.time())
                 if v.skipped is None]
        return late_binding.partners(site, open_)

    def _bound(self, name: str, event: Update | Ended) -> Started | None:
        """A job named several sites' partitions runs (or ran) on a node of another site's
        partition than the one that holds it: the attempt's site becomes that one (a
        Started the store keeps, its start unchanged). None: nothing to tell."""
        tid = event.trial_id
        if tid not in self.spread or tid not in self.sent or not event.nodes \
                or tid in self.ran_at:
            return None
        node = expand(event.nodes)[0]
        home = next(s for s in self.sites if s.name == name)
        cluster_map = self.node_maps.setdefault(
            home.cluster, late_binding.NodePartitions(self.executors[name].slurm))
        site = cluster_map.site_of(node, home, self.spread[tid])
        if site is None or site.name == name:
            return None
        self.ran_at[tid] = site.name
        self.notes.append(Note(tid, "brokerage", f"job {self.sent[tid].job_id}, sent to "
                               f"{'/'.join([name] + [s.name for s in self.spread[tid]])}, "
                               f"started at site {site.name} (node {node})"))
        return replace(self.sent[tid], site=site.name)

    def _move_stuck(self) -> None:
        """Cancel jobs pending where another site would start them (brokerage.move_target:
        at once where it has idle nodes, after move_after where nothing of ours waits)."""
        after = self.job.executor.move_after
        if after is None or len(self.sites) < 2:
            return
        self._count()
        now = time.time()
        self._move_held([v.site for v in brokerage.verdicts(self.sites, self.loads, now)
                         if v.skipped is None])
        for name, ex in self.executors.items():
            for job in list(ex.jobs.values()):
                tid = job.trial_id
                if job.state != "PENDING" or tid in self.moving or tid not in self.launches \
                        or self.moves.get(tid, 0) >= MAX_MOVES:
                    continue
                waited = now - self.submitted.get(tid, now)
                nodes = (self.launches[tid].resources or self.job.resources).nodes
                target = brokerage.move_target(self.sites, self.loads, now, name, waited,
                                               after, nodes)
                if target is None or target in self.spread.get(tid, ()):
                    continue  # (a job that waits there too starts there without a move)
                why = ("has idle nodes for it" if self.loads[target.name].starts_now(nodes)
                       else "starts what it gets")
                self.moving[tid] = target.name
                self.loads[target.name].pending += 1  # what it holds once the job moves
                ex.cancel(tid)
                self.notes.append(Note(tid, "brokerage", f"job {job.job_id} pending at site "
                                       f"{name} for {waited:.0f} s "
                                       f"({job.reason or 'no reason given'}) while site "
                                       f"{target.name} {why}: moved there"))

    def _move_held(self, open_: list[Site]) -> None:
        """Send the launches held unsubmitted at a site whose Slurm does not answer to the
        open site of the highest weight (open_ is in the sites' order; the broker's choice
        among them)."""
        for name, ex in self.executors.items():
            why = self.loads[name].unreachable
            targets = [s for s in open_ if s.name != name]
            if why is None or not targets:
                continue
            for launch in list(ex.held):
                tid = launch.trial_id
                if tid in self.moving or tid not in self.launches \
                        or self.moves.get(tid, 0) >= MAX_MOVES:
                    continue
                target = brokerage.choose(targets, self.loads, time.time()) or targets[0]
                self.moving[tid] = target.name
                ex.cancel(tid)  # its end (cancelled before it was submitted) moves it
                self.notes.append(Note(tid, "brokerage", f"held at site {name}, whose Slurm "
                                       f"does not answer ({why}): moved to site "
                                       f"{target.name}"))

    @staticmethod
    def _named(started: Started, site: str) -> Started:
        return replace(started, site=site)

    def poll(self, timeout: float
             ) -> Sequence[Started | Update | Requeued | Ended | Note | GaveUp]:
        events: list[Started | Update | Requeued | Ended | Note | GaveUp] = []
        share = timeout / max(1, len(self.executors))
        for name, ex in self.executors.items():
            for event in ex.poll(0.0 if events else share):
                if isinstance(event, Ended) and event.trial_id in self.moving:
                    moved = self._moved(name, event)
                    if moved is not None:
                        events.append(moved)
                    continue
                if isinstance(event, (Update, Ended)) and (
                        isinstance(event, Ended) or event.sched_state in RUNNING_STATES):
                    bound = self._bound(name, event)
                    if bound is not None:
                        events.append(bound)
                events.append(self._seen(name, event))
        self._move_stuck()
        events[:0], self.notes = self.notes, []
        return events

    def _moved(self, name: str, ended: Ended) -> Started | Ended | None:
        """The end of a job cancelled to move its attempt: the attempt goes to its new site
        (a Started when that site's executor starts it at once, else later from its poll).
        A job that ended otherwise (it ran, and failed or finished, before the cancel) is
        the driver's news as it is."""
        target = self.moving.pop(ended.trial_id)
        if ended.reason != "cancelled":
            return self._seen(name, ended)
        self.loads[name].pending = max(0, self.loads[name].pending - 1)
        self.moves[ended.trial_id] = self.moves.get(ended.trial_id, 0) + 1
        site = next(s for s in self.sites if s.name == target)
        return self._send(self.launches[ended.trial_id], site)

    def _seen(self, name: str, event):
        """Learn from one site's event (a start's queue wait, a site failure)."""
        tid = getattr(event, "trial_id", None)
        load = self.loads[self.ran_at.get(tid, name) if tid is not None else name]
        ran = isinstance(event, Update) and event.sched_state in RUNNING_STATES
        if tid is not None and (ran or isinstance(event, Ended)) and tid in self.submitted:
            if ran or (isinstance(event, Ended) and event.nodes):
                load.waits.append(time.time() - self.submitted[tid])
            del self.submitted[tid]
        if isinstance(event, Ended):
            load.ended += 1
            if event.reason in brokerage.SITE_FAILURES:
                load.failures.append(time.time())
            for kept in (self.where, self.launches, self.spread, self.ran_at, self.sent):
                kept.pop(event.trial_id, None)
        if isinstance(event, Requeued) and event.reason == "node_fail":
            load.failures.append(time.time())
        if isinstance(event, Requeued):  # its next run may start in another partition
            self.ran_at.pop(event.trial_id, None)
        if isinstance(event, Started):
            return self._named(event, name)
        return event

    def wake_on(self, fd: int | None) -> None:
        self.wake_fd = fd
        for ex in self.executors.values():
            ex.wake_on(fd)

    # -- one trial's site ------------------------------------------------------------------
    def _site_of(self, trial_id: int) -> SlurmExecutor | None:
        name = self.where.get(trial_id)
        return self.executors.get(name) if name is not None else None

    def cancel(self, trial_id: int) -> None:
        self.moving.pop(trial_id, None)  # its cancelled job's end is the driver's news
        ex = self._site_of(trial_id)
        if ex is not None:
            ex.cancel(trial_id)

    def abandon(self, trial_id: int) -> None:
        ex = self._site_of(trial_id)
        if ex is not None:
            ex.abandon(trial_id)
        self.where.pop(trial_id, None)

    def adopt(self, known: Adoptable) -> Started | Ended | None:
        """Through the site the store names (Adoptable.site; a site no longer in the spec,
        or none stored, through the first site). A job found cancelled, not by this
        driver, may have been moved by a driver killed before the store learnt the new
        job: the attempt's newest job by name on each cluster of the sites is adopted
        instead, if there is one."""
        name = known.site if known.site in self.executors else self.sites[0].name
        outcome = self._adopt_at(name, known)
        if isinstance(outcome, Ended) and "CANCELLED" in outcome.detail and known.job_id:
            for site_name, job_id in self._newer_jobs(known):
                found = self._adopt_at(site_name, replace(known, job_id=job_id, job_runs=1))
                if found is not None:
                    self.notes.append(Note(known.trial_id, "brokerage", f"job {known.job_id} "
                                           f"was cancelled to move it: adopted job {job_id} "
                                           f"at site {site_name} instead"))
                    return found
        return outcome

    def _adopt_at(self, name: str, known: Adoptable) -> Started | Ended | None:
        self.where[known.trial_id] = name
        outcome = self.executors[name].adopt(known)
        if isinstance(outcome, Ended) or outcome is None:
            self.where.pop(known.trial_id, None)
        if not isinstance(outcome, Started):
            return outcome
        site = next((s for s in self.sites if s.name == name), None)
        others = self._partners(site, 1) if site is not None else []
        if others:  # it may wait in their partitions too (bound late before the restart)
            self.spread[known.trial_id] = others
            self.sent[known.trial_id] = self._named(outcome, name)
        return self._named(outcome, name)

    def _newer_jobs(self, known: Adoptable) -> list[tuple[str, str]]:
        """(site, job id) of a job of this attempt other than the stored one, on each
        cluster the sites use (its first site there)."""
        found, clusters = [], set()
        for site in self.sites:
            if site.cluster in clusters:
                continue
            clusters.add(site.cluster)
            job_id = self.executors[site.name].submitter.find_by_name(replace(known,
                                                                              job_id=None))
            if job_id is not None and job_id != known.job_id:
                found.append((site.name, job_id))
        return found

    def withdraw(self) -> list[int]:
        return [tid for ex in self.executors.values() for tid in ex.withdraw()]

    def release(self) -> None:
        for ex in self.executors.values():
            ex.release()

    def close(self) -> None:
        for ex in self.executors.values():
            ex.close()

"""The driver's pilots: submitting them (write-ahead), watching them, knowing when one ended.

A pilot is stored `submitting` before its sbatch, with its job id right after; its name
(`hps.<experiment>.<tag>.pilot.<n>`) finds it again if the driver died in between. It is
`running` once its heartbeat comes, and `ended` when it wrote its exit, or when Slurm says its
job ended: sacct's state is final AND squeue no longer lists it (a job COMPLETING during
KillWait still has processes writing). A pilot whose heartbeat has been silent for
`lost_after` is cancelled but not ended: scancel may fail, and a silent pilot may only be
slow (a stopped process, a hung file system), its trials still running. Its trials are
retried only once Slurm confirms the job gone, so one trial dir never has two attempts
writing it (issue 22).
How many pilots to have is hpsearch.pilot.supply's business, and where each goes (the
search's partition, or one of its sites) hpsearch.pilot.places's, not this file's: each
pilot is submitted, asked about and cancelled through its place's Slurm (its cluster).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hpsearch.executors.base import EndReason, Note
from hpsearch.pilot import protocol
from hpsearch.pilot.places import Broker, Place, make_places
from hpsearch.pilot.sizing import AS_SPEC, Cut, within
from hpsearch.slurm import sbatch as scripts
from hpsearch.slurm.failures import TRANSIENT, Backoff, SlurmError, retrying
from hpsearch.slurm.parse import JobRecord
from hpsearch.spec.durations import parse_time_limit
from hpsearch.spec.model import Pilots, SlurmJob, memory_mb
from hpsearch.store import rows
from hpsearch.store.site_speeds import SpeedTracker

# Slurm's end of a pilot's job -> the reason its unfinished trials ended (hpsearch.driver.retry).
TRIAL_END_BY_PILOT_STATE: dict[str, EndReason] = {
    "NODE_FAIL": "node_fail", "PREEMPTED": "preempted", "TIMEOUT": "preempted",
    "BOOT_FAIL": "boot_fail"}


def pilot_job_parameters(job: SlurmJob, name: str, options: tuple[str, ...] = (),
                         cut: Cut = AS_SPEC) -> dict:
    """submitit's parameters for a pilot job of `job` named `name`: per node, the CPUs, GPUs
    and memory of slots_per_node trials (a slot's memory and the time limit as `cut`, where
    the scouts sized them); the spec's partition, account and qos; then `options`
    (placement's --switches and --nodelist, chosen at submit time), which win. Pure:
    `hpsearch plan` prints its script."""
    from hpsearch.slurm.pilot_jobs import pilot_parameters
    res, cfg = job.slot, _pilots(job)  # a slot: the smallest trial's share of a node
    slots = cfg.slots_per_node
    per_slot = cut.slot_mem_mb or (memory_mb(res.mem) if res.mem else None)
    mem = f"{int(per_slot * slots)}M" if per_slot else None
    queue = {key: value for key, value in (("partition", res.partition),
                                           ("account", res.account), ("qos", res.qos))
             if value is not None}
    extra = dict(o.removeprefix("--").split("=", 1) for o in options)
    return pilot_parameters(name, cfg.nodes, cut.time or cfg.time,
                            res.tasks_per_node * res.cpus_per_task * slots,
                            res.gpus_per_node * slots, mem, {**queue, **extra})


def _pilots(job: SlurmJob) -> Pilots:
    """The spec's executor.pilots: set wherever pilots are made (ValueError if not)."""
    cfg = job.executor.pilots
    if cfg is None:
        raise ValueError(f"experiment {job.name}: pilot jobs need executor.pilots in the "
                         "spec; it has none")
    return cfg


@dataclass
class PilotJob:
    id: int
    name: str
    paths: protocol.PilotPaths
    job_id: str | None = None
    state: str = rows.PILOT_SUBMITTING
    nodes: str | None = None
    watch: protocol.Watch = field(init=False)
    stop_sent: bool = False
    ended_as: str | None = None  # Slurm's final state, once known
    lost: str | None = None  # why the driver gave it up; it ends once Slurm confirms it gone
    ran: bool = False  # it started a trial (a pilot that ends without is a start failure)
    left: bool = False  # it wrote its exit: it ran, and went of its own accord
    why: str | None = None  # why it ended
    record: JobRecord | None = None  # sacct's record of its job, once it ended
    site: str | None = None  # executor.sites: the site it was sent to
    submitted: float = field(default_factory=time.time)
    cut: Cut = AS_SPEC  # its slots' memory and time limit, where the scouts sized them

    @property
    def slot_mem_mb(self) -> int | None:
        return self.cut.slot_mem_mb

    def __post_init__(self) -> None:
        self.watch = protocol.Watch(self.paths.heartbeat)

    @property
    def heartbeat(self) -> dict:
        return self.watch.data or {}

    def accepting(self) -> bool:
        """May trials still be bound to it (now, or once it runs)?"""
        return (self.state in (rows.PILOT_SUBMITTING, rows.PILOT_PENDING, rows.PILOT_RUNNING)
                and not self.stop_sent and self.lost is None
                and self.heartbeat.get("state", "running") == "running")

    def remaining(self) -> float:
        """Seconds the pilot has left, as its last heartbeat said, less the time since."""
        if not self.watch.data:
            return float("inf")
        return float(self.heartbeat.get("remaining", 0.0)) - self.watch.silent_for()


class Fleet:
    def __init__(self, job: SlurmJob, store, slurm, slurms: dict | None = None) -> None:
        self.job, self.store = job, store
        self.cfg = _pilots(job)
        self.root = protocol.pilots_dir(job.experiment_dir)
        self.places = make_places(job, slurm, slurms)
        self.broker = Broker(self.places, job.executor.move_after, SpeedTracker(store.db))
        self.planner = self.places[0].planner  # the search's own, or its first site's
        self.pilots: dict[int, PilotJob] = {}
        self.notes: list[Note] = []
        self.refused: list[PilotJob] = []  # ended by sbatch's refusal, for the next watch()
        self.next_id = 1 + max((row.id for row in store.pilots()), default=0)
        self.next_query = 0.0
        self.lost_after = max(job.executor.lost_after, 10 * self.cfg.heartbeat)
        for row in store.pilots(live_only=True):
            self._reattach(row)

    # -- where -------------------------------------------------------------------------------
    def place(self, pilot: PilotJob) -> Place:
        return self.broker.place_of(pilot.site)

    def may_submit(self) -> bool:
        """Does the Slurm of some place take submits now (not backing off)?"""
        return any(place.health.may_submit() for place in self.places)

    def leaves(self, pilot: PilotJob, nodes: str | None) -> str | None:
        return self.place(pilot).planner.leaves(nodes)

    # -- submitting -------------------------------------------------------------------------
    def submit(self, place: Place | None = None,
               cut: Callable[[Place], Cut] | Cut = AS_SPEC) -> PilotJob | None:
        """Submit one more pilot, to `place` or where the broker says, cut as the scouts
        sized it (hpsearch.pilot.sizing; a function of the place chosen); None when no
        Slurm can take it now or the placement waits for a leaf (asked again later)."""
        place = place or self.broker.choose(self.pilots.values())
        if place is None:
            return None
        pilot_id = self.next_id
        try:
            placement = place.planner.choose(-pilot_id, 0, self.job.resources.sbatch_extra)
            if placement.wait:
                return None
            options = self._leaves_for_pilot(place, placement.options)
        except SlurmError as exc:  # sinfo or scontrol did not answer: back off, ask again
            place.health.submit_failed(exc, TRANSIENT)
            return None
        self.next_id += 1
        name = scripts.pilot_name(self.job.name, pilot_id, self.job.instance)
        own = cut(place) if callable(cut) else cut
        pilot = PilotJob(pilot_id, name, protocol.PilotPaths(self.root / str(pilot_id)),
                         site=place.name, cut=own)
        pilot.paths.make()
        protocol.write_json(pilot.paths.config, self._config(pilot_id, place, own))
        self.store.add_pilot(pilot_id, name, place.name, own.slot_mem_mb)  # write-ahead
        if own.describe():
            self.notes.append(Note(None, "scouts", f"pilot {pilot_id} asks for what the "
                                                   f"scouts measured: {own.describe()}"))
        if place.name is not None:
            self.notes.append(Note(None, "brokerage", f"pilot {pilot_id} to site {place.name} "
                                                      f"(weights: {self.broker.weights()})"))
        self.pilots[pilot_id] = pilot
        self._sbatch(pilot, options)
        return pilot

    def _leaves_for_pilot(self, place: Place, options: tuple[str, ...]) -> tuple[str, ...]:
        """Slurm's tree plugin counts leaves with --switches=N: a pilot larger than a leaf
        asks for the fewest leaves that can hold it, not 1 (which would only make it wait
        max_wait for nothing). The pilots learn the topology, to keep each trial in a leaf
        (one topology: with sites on several clusters, that of the first pilot's)."""
        topology = place.planner.topology
        if topology is None:
            return options
        if not (self.root / protocol.TOPOLOGY).exists():
            protocol.write_json(self.root / protocol.TOPOLOGY, {leaf: list(nodes) for leaf, nodes
                                                                in topology.leaves.items()})
        largest = max((len(nodes) for nodes in topology.leaves.values()), default=0)
        if not largest or place.pilots.nodes <= largest:
            return options
        count = -(-place.pilots.nodes // largest)
        return tuple(f"--switches={count}@{o.split('@', 1)[1]}"
                     if o.startswith("--switches=") and "@" in o else o for o in options)

    def _sbatch(self, pilot: PilotJob, options: tuple[str, ...] = ()) -> None:
        from hpsearch.pilot.program import main
        from hpsearch.slurm.pilot_jobs import Held, submit_pilot
        place = self.place(pilot)
        try:
            job_id = submit_pilot(place.folder(self.root),
                                  pilot_job_parameters(place.job, pilot.name, options,
                                                       pilot.cut),
                                  lambda text: place.submitter.sbatch(pilot.name, text), main,
                                  pilot.paths.root)
        except Held:
            return  # still `submitting`: poll() tries again after the back-off
        except SlurmError as exc:
            self.broker.failed(pilot)
            self.refused.append(self._ended(pilot, None, f"sbatch refused the pilot: {exc}"))
            self.notes.append(Note(None, "pilot", f"pilot {pilot.id}: sbatch refused it: {exc}"))
            return
        pilot.job_id, pilot.state = job_id, rows.PILOT_PENDING
        self.store.update_pilot(pilot.id, job_id=job_id, state=rows.PILOT_PENDING)
        self.notes.append(Note(None, "pilot", f"pilot {pilot.id} submitted as job {job_id}"
                               + (f" at site {pilot.site}" if pilot.site else "")
                               + (f" ({' '.join(options)})" if options else "")))

    def _config(self, pilot_id: int, place: Place | None = None, cut: Cut = AS_SPEC) -> dict:
        # a slot's shape: the smallest trial's; an assignment says its own trial's size
        res, ck = self.job.slot, self.job.checkpoints
        own = (place or self.places[0]).pilots  # a site's own time, nodes and slots
        trial_time = cut.trial_time or (parse_time_limit(res.time) if res.time else None)
        return {"pilot": pilot_id, "experiment": self.job.name,
                "time_limit": parse_time_limit(cut.time or own.time), "nodes": own.nodes,
                "slots_per_node": own.slots_per_node,
                "trial_nodes": self.job.resources.nodes,
                "trial_tasks_per_node": res.tasks_per_node,
                "trial_cpus": res.tasks_per_node * res.cpus_per_task,
                "trial_cpus_per_task": res.cpus_per_task,
                "trial_mem_mb": cut.slot_mem_mb or (int(memory_mb(res.mem)) if res.mem
                                                    else None),
                "trial_gpus": res.gpus_per_node, "trial_time": trial_time,
                "idle_timeout": self.cfg.idle_timeout, "grace": self.cfg.grace,
                "heartbeat": self.cfg.heartbeat, "signal": ck.signal,
                # trials on its other nodes start through an agent there (pilot.agents)
                "agents": self.cfg.agents,
                # the scouts size memory: a trial on another node is measured there
                # (hpsearch.pilot.tree_watch)
                "measure_memory": "mem" in self.job.resources.auto,
                "signal_before": ck.signal_before, "kill_grace": self.job.executor.grace,
                # its warm servers, one per node (hpsearch.pilot.warm_servers)
                "warm": None if self.job.executor.warm is None
                else list(self.job.executor.warm)}

    def retry_held(self) -> None:
        for pilot in list(self.pilots.values()):
            if pilot.state == rows.PILOT_SUBMITTING and self.place(pilot).health.may_submit():
                self._sbatch(pilot)

    # -- resuming ---------------------------------------------------------------------------
    def _reattach(self, row: rows.PilotRow) -> None:
        pilot = PilotJob(row.id, row.job_name, protocol.PilotPaths(self.root / str(row.id)),
                         row.job_id, row.state, row.nodes, site=row.site,
                         submitted=row.submitted, cut=Cut(row.slot_mem_mb))
        pilot.ran = row.state == rows.PILOT_RUNNING  # it may have run trials before the restart
        self.pilots[row.id] = pilot
        slurm = self.place(pilot).slurm
        if pilot.job_id is None:  # the driver died around its sbatch: did Slurm take it?
            found = retrying(lambda: slurm.job_id_by_name(pilot.name, self.job.created),
                             attempts=20, backoff=Backoff(base=2.0, cap=60.0))
            if found is None:
                self._ended(pilot, None, "its sbatch never ran (the driver stopped first)")
                return
            pilot.job_id, pilot.state = found, rows.PILOT_PENDING
            self.store.update_pilot(pilot.id, job_id=found, state=rows.PILOT_PENDING)
        self.notes.append(Note(None, "pilot", f"pilot {pilot.id} (job {pilot.job_id}) "
                                              "re-attached"))

    # -- watching ---------------------------------------------------------------------------
    def watch(self) -> list[PilotJob]:
        """Read heartbeats; ask Slurm about the pilots' jobs every poll_interval. Returns
        the pilots that ended since the last call (their trials are the caller's)."""
        ended, self.refused = self.refused, []
        for pilot in list(self.pilots.values()):
            beat = pilot.watch.read()
            if beat and pilot.state in (rows.PILOT_SUBMITTING, rows.PILOT_PENDING):
                pilot.state, pilot.nodes = rows.PILOT_RUNNING, beat.get("nodes")
                self.store.update_pilot(pilot.id, state=rows.PILOT_RUNNING, nodes=pilot.nodes,
                                        leaves=self.leaves(pilot, pilot.nodes),
                                        started=time.time())
                self.broker.started(pilot)
                self.notes.append(Note(None, "pilot", f"pilot {pilot.id} (job {pilot.job_id}) "
                                                      f"runs on {pilot.nodes}"
                                                      + (f" at site {pilot.site}" if pilot.site
                                                         else "")))
            gone = protocol.read_json(pilot.paths.exit)
            if gone is not None:
                pilot.left = True
                ended.append(self._ended(pilot, None, f"it left: {gone.get('reason')}"))
            elif (pilot.state == rows.PILOT_RUNNING and pilot.lost is None
                  and pilot.watch.silent_for() > self.lost_after):
                self._give_up(pilot)
        if time.monotonic() >= self.next_query:
            self.next_query = time.monotonic() + self.job.executor.poll_interval
            for place in self.places:
                ended += self._query(place)
        return ended

    def _give_up(self, pilot: PilotJob) -> None:
        pilot.lost = f"its heartbeat was silent for {self.lost_after:g} s"
        self._scancel(pilot)
        self.next_query = 0.0  # ask Slurm at once
        self.notes.append(Note(None, "pilot", f"pilot {pilot.id} (job {pilot.job_id}): "
                                              f"{pilot.lost}; cancelled; its trials run again "
                                              "once Slurm confirms the job ended"))

    def _query(self, place: Place) -> list[PilotJob]:
        """Ask the place's Slurm which of its pilots' jobs ended (job ids are the cluster's
        own: two clusters may both have a job 30)."""
        if time.monotonic() < place.query_after:  # its Slurm failed to answer: backing off
            return []
        jobs = {pilot.job_id: pilot for pilot in self.pilots.values()
                if pilot.job_id and self.place(pilot) is place}
        if not jobs:
            return []
        final: dict[str, JobRecord | None]
        try:
            records = place.slurm.sacct(list(jobs))
            if records is None:  # no accounting: a lost pilot ends when squeue drops it
                final = {job_id: None for job_id, pilot in jobs.items() if pilot.lost}
            else:
                final = {rec.job_id: rec for rec in records
                         if rec.finished and rec.job_id in jobs}
            queued = {q.job_id for q in place.slurm.squeue(final)} if final else set()
            place.health.query_ok()
        except SlurmError as exc:
            place.query_after = time.monotonic() + place.health.query_failed(exc)
            return []
        ended = []
        for job_id, rec in final.items():
            pilot = jobs[job_id]
            if job_id in queued or pilot.id not in self.pilots:
                continue  # COMPLETING: its processes may still write
            why = f"Slurm job {job_id} {rec.raw_state}" if rec else f"Slurm job {job_id} gone"
            pilot.record = rec
            ended.append(self._ended(pilot, rec.state if rec else None,
                                     f"{pilot.lost}; {why}" if pilot.lost else why))
        for pilot in jobs.values():
            if pilot.lost and pilot.id in self.pilots:
                self._scancel(pilot)  # again: the last one may have failed
        return ended

    def _ended(self, pilot: PilotJob, slurm_state: str | None, why: str) -> PilotJob:
        pilot.state, pilot.ended_as, pilot.why = rows.PILOT_ENDED, slurm_state, why
        self.pilots.pop(pilot.id, None)
        self.broker.ended(pilot)
        self.place(pilot).planner.started(-pilot.id, 0)
        self.store.update_pilot(pilot.id, state=rows.PILOT_ENDED, ended=time.time(), reason=why)
        self.notes.append(Note(None, "pilot", f"pilot {pilot.id} ended: {why}"))
        return pilot

    # -- stopping ---------------------------------------------------------------------------
    def stop(self, pilot: PilotJob) -> None:
        """Ask a pilot to take no more work and leave; a pending one is cancelled."""
        if pilot.stop_sent:
            return
        pilot.stop_sent = True
        pilot.paths.stop.touch()
        if pilot.state != rows.PILOT_RUNNING:
            self._scancel(pilot)

    def _scancel(self, pilot: PilotJob) -> None:
        place = self.place(pilot)
        try:
            if pilot.job_id:
                place.slurm.scancel([pilot.job_id])
            else:
                place.slurm.scancel_by_name(pilot.name)
        except SlurmError as exc:
            place.health.query_failed(exc)

    def output(self, pilot: PilotJob) -> Path | None:
        """Its job's Slurm output file (stdout and stderr), where it has a job."""
        from hpsearch.slurm.pilot_jobs import pilot_output
        return pilot_output(self.place(pilot).folder(self.root), pilot.job_id) \
            if pilot.job_id else None

    def move_stuck(self) -> None:
        """Cancel pilots pending past move_after at one site while another takes pilots,
        and submit one at that other site for each (hpsearch.pilot.places)."""
        moves = self.broker.stuck(list(self.pilots.values()))
        if not moves:
            return
        waiting = self._pending_in_slurm([pilot for pilot, _ in moves])
        for pilot, target in moves:
            if pilot.job_id not in waiting:  # started, its first heartbeat yet to come
                continue
            waited = time.time() - pilot.submitted
            self.broker.load_of(pilot).waits.append(waited)  # at least: the site's measure
            self.notes.append(Note(None, "brokerage", f"pilot {pilot.id} (job {pilot.job_id}) "
                                   f"pending at site {pilot.site} for {waited:.0f} s "
                                   f"({waiting[pilot.job_id]}) while site {target.name} takes "
                                   "pilots: cancelled, one sent there"))
            self.stop(pilot)
            self.submit(target, within(pilot.cut, target.pilots.time))

    def _pending_in_slurm(self, pilots: list[PilotJob]) -> dict[str, str]:
        """Job id -> why it waits, of those of `pilots` their site's Slurm says PENDING (a
        pilot without its first heartbeat may be running: starting Python takes a while)."""
        waiting: dict[str, str] = {}
        for place in self.places:
            jobs = [p.job_id for p in pilots if p.job_id and self.place(p) is place]
            if not jobs or time.monotonic() < place.query_after:
                continue
            try:
                queued = place.slurm.squeue(jobs)
            except SlurmError as exc:
                place.query_after = time.monotonic() + place.health.query_failed(exc)
                continue
            waiting.update({q.job_id: q.reason or "no reason given" for q in queued
                            if q.state == "PENDING"})
        return waiting

    def take_notes(self) -> list[Note]:
        notes = self.notes + [note for place in self.places for note in place.health.take_notes()]
        self.notes = []
        return notes

"""Pilot executor (driver side): trials run inside pilot jobs, bound late to a free slot.

submit() keeps the attempt ready; it is bound to a pilot only when a running pilot has a
free slot (and the time for it): its assignment is written into that pilot's inbox
(hpsearch.pilot.protocol). The pilot claims it by rename, runs it, and writes when it started
and how it ended; poll() turns those files into Started and Ended. The driver asks the
search for a new trial only when free_slots() says so: the slots of pilots that take work,
and of pilots it may still submit (hpsearch.pilot.supply), less the attempts in flight.

A pilot that ends (it left, sacct says its job ended, or its heartbeat stopped) takes back
its unclaimed assignments (withdrawn: they run in another pilot as the same attempt) and ends
its running attempts as Slurm ended it (node_fail, preempted) or as lost; the retry rules do
the rest. After a driver restart, adopt() finds each attempt's assignment in the pilot dirs.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hpsearch.executors.base import (
    Adoptable,
    Ended,
    Executor,
    GaveUp,
    Note,
    Started,
    Update,
    end_reason,
    nap,
)
from hpsearch.executors.slurm import SlurmExecutor
from hpsearch.launch.attempt import Launch, prepare_trial_dir
from hpsearch.pilot import protocol, sizing
from hpsearch.pilot.fleet import TRIAL_END_BY_PILOT_STATE, Fleet, PilotJob
from hpsearch.pilot.places import SITE_FAILED
from hpsearch.pilot.start_failures import StartFailure, StartFailures
from hpsearch.pilot.supply import Supply
from hpsearch.spec.durations import parse_time_limit
from hpsearch.spec.model import PILOT_RESERVE, FailureClass, SlurmJob, slot_width
from hpsearch.store import rows
from hpsearch.store.trusted import present

if TYPE_CHECKING:
    from hpsearch.spec.model import Spec
    from hpsearch.store.store import Store

TICK = 0.02  # seconds between looks at the pilots' files while waiting (part of the gap)
RELEASE_WAIT = 15.0  # seconds release() waits for the pilots to leave
PILOT_MARGIN = 15.0  # seconds of a pilot's time an attempt never counts on


@dataclass
class _Bound:
    launch: Launch
    pilot: PilotJob
    name: str
    started: bool = False
    at: float = field(default_factory=time.monotonic)  # bound then: it ends by then + its time


class PilotExecutor(Executor):
    @classmethod
    def from_spec(cls, spec: Spec, store: Store | None, ask_ahead: bool) -> Executor:
        """Pilots keep their jobs in the store: without one (the check before anything is
        created) the plain Slurm executor stands in."""
        if store is None:
            return SlurmExecutor(spec.slurm_job())
        return cls(spec.slurm_job(), store, ahead=ask_ahead)

    def __init__(self, job: SlurmJob, store, slurm=None, slurms: dict | None = None,
                 ahead: bool = False) -> None:
        """ahead: prefetch (the driver may ask trials ahead, driver/session.asks_ahead). Each
        running pilot then also holds as many assignments as it has slots, waiting in its
        inbox, so a freed slot takes the next at the pilot's next look, without the round trip
        to the driver; where one pilot has a free slot and nothing is ready, an assignment
        still waiting in another pilot moves to it (_rebalance). Only where every trial is
        one size (a waiting one never holds up a larger trial's slots), and the scouts do
        not size them."""
        if slurm is None:
            from hpsearch.slurm.commands import Slurm
            slurm = Slurm()
        cfg = job.executor.pilots
        if cfg is None:
            raise ValueError(f"experiment {job.name}: the pilot executor needs executor.pilots "
                             "in the spec; it has none")
        self.job, self.cfg = job, cfg
        self.parallel = job.parallel
        self.fleet = Fleet(job, store, slurm, slurms)
        # Room is counted in node slots (one slot on one node): a trial of n nodes takes n.
        # Trials of several sizes (per-trial nodes) count in their sizes' common divisor.
        # A site's pilots may be of their own size: the supply counts the smallest.
        sizes = job.node_sizes or (job.resources.nodes,)
        unit = math.gcd(*sizes)
        self.rooms = {place.name: place.pilots.nodes // unit * unit * place.pilots.slots_per_node
                      for place in self.fleet.places}
        self.smallest = min(sizes)
        # not where the scouts size trials (resources `auto`): a trial asked ahead would
        # take the ceiling the scouts have not yet cut (tests/slurm/test_scouts.py)
        self.ahead = ahead and len(set(sizes)) == 1 and not job.resources.auto
        self.supply = Supply(self.cfg.max, min(self.rooms.values()))
        self.starts = StartFailures()  # pilots that end before they run a trial
        self.unneeded: dict[int, float] = {}  # pending pilot -> since when no trial needs it
        self.ready: list[Launch] = []
        self.bound: dict[int, _Bound] = {}
        self.events: list = []  # found outside poll() (cancels, adoption), for the next poll
        self.told: list[tuple[protocol.PilotPaths, str]] = []  # ends poll() returned (archive them)
        self.refused: set[str] = set()  # files in pilot dirs not read (not this user's)
        self.beat = protocol.Beat(
            protocol.pilots_dir(job.experiment_dir) / protocol.DRIVER_HEARTBEAT, self.cfg.heartbeat)
        self.beat.path.parent.mkdir(parents=True, exist_ok=True)
        self.beat.write(state="running")
        self.trial_time = parse_time_limit(job.resources.time) if job.resources.time else None
        # the longest of the sites' pilots (a trial binds only where it fits); None: not a
        # time limit (validate() refuses it; submit() raises)
        self.pilot_time = max((parse_time_limit(place.job.executor.pilots.time) or 0.0
                               for place in self.fleet.places
                               if place.job.executor.pilots), default=0.0) or None

    # -- Executor ---------------------------------------------------------------------------
    def free_slots(self) -> int:
        live = list(self.fleet.pilots.values())
        capacity = self.supply.capacity(sum(self._room_of(pilot) for pilot in live
                                            if pilot.accepting()),
                                        len(live)) // self.smallest  # in trials
        told = sum(1 for event in self.events if isinstance(event, Ended))  # not yet polled
        ahead = sum(self._allowance(pilot) for pilot in live) // self.smallest
        return max(0, min(self.parallel, capacity) + ahead - len(self.ready) - len(self.bound)
                   - told)

    def submit(self, launch: Launch) -> None:
        prepare_trial_dir(launch)
        needed = self._time(launch) * launch.time_factor
        if self.pilot_time is None:
            raise ValueError(f"executor.pilots.time {self.cfg.time!r} is not a Slurm time limit")
        if needed > self.pilot_time - PILOT_RESERVE:  # a retry rule's longer time limit
            self.events.append(Ended(launch.trial_id, launch.attempt, None, "launch_error",
                                     f"its time limit ({needed:g} s) does not fit in a pilot "
                                     + (f"(executor.pilots.time {self.cfg.time})"
                                        if not self.job.executor.sites else
                                        f"(the sites' longest pilots: {self.pilot_time:g} s)")))
            return
        self.ready.append(launch)
        self._bind()

    def cancel(self, trial_id: int) -> None:
        for launch in self.ready:
            if launch.trial_id == trial_id:
                self.ready.remove(launch)
                self.events.append(Ended(trial_id, launch.attempt, None, "cancelled",
                                         "cancelled before a pilot took it"))
                return
        bound = self.bound.get(trial_id)
        if bound is None:
            return
        if not bound.started and protocol.move(bound.pilot.paths, bound.name, "inbox", "withdrawn"):
            del self.bound[trial_id]
            self.events.append(Ended(trial_id, bound.launch.attempt, None, "cancelled",
                                     "cancelled before its pilot started it"))
            return
        protocol.write_json(bound.pilot.paths.file("cancel", bound.name), {"time": time.time()})

    def withdraw(self) -> list[int]:
        """Attempts no pilot has started: those waiting for one, and those in a pilot's
        inbox that it has not claimed (taken back, as cancel() does)."""
        withdrawn = [launch.trial_id for launch in self.ready]
        self.ready.clear()
        for tid, bound in list(self.bound.items()):
            if not bound.started and protocol.move(bound.pilot.paths, bound.name, "inbox",
                                                   "withdrawn"):
                del self.bound[tid]
                withdrawn.append(tid)
        return withdrawn

    def adopt(self, known: Adoptable) -> Started | Ended | None:
        name = protocol.name_of(known.trial_id, known.attempt)
        for pilot_dir in self._pilot_dirs(known.job_id):
            paths = protocol.PilotPaths(pilot_dir)
            state = protocol.where(paths, name)
            if state is None or state == "withdrawn":
                continue
            if state == "ended":  # it ended while no driver ran
                job_id = (protocol.read_json(paths.heartbeat) or {}).get("job_id") or None
                return self._ended_from_file(known.trial_id, known.attempt, paths, name, job_id)
            if state == "inbox" and protocol.move(paths, name, "inbox", "withdrawn"):
                return None  # never claimed: the driver binds it again
            pilot = self.fleet.pilots.get(int(pilot_dir.name))
            launch = Launch(known.trial_id, known.attempt, "", {}, known.trial_dir,
                            known.trial_dir)
            if pilot is None:  # its pilot is gone, and the attempt never told its end
                return Ended(known.trial_id, known.attempt, None, "lost",
                             f"pilot {pilot_dir.name} ended while no driver was running")
            self.bound[known.trial_id] = _Bound(launch, pilot, name, started=True)
            started, update = self._started(known.trial_id, known.attempt, pilot, name)
            self.events.append(update)
            return started
        return None

    def _pilot_dirs(self, job_id: str | None) -> list:
        """Every pilot dir; first that of the pilot the store says the attempt was bound to
        (bind_attempt), where its assignment is unless it was taken back and bound again."""
        dirs = sorted(protocol.pilots_dir(self.job.experiment_dir).glob("[0-9]*"),
                      key=lambda d: int(d.name))
        bound = {row.id for row in self.fleet.store.pilots() if job_id and row.job_id == job_id}
        return sorted(dirs, key=lambda d: int(d.name) not in bound)

    def poll(self, timeout: float) -> list:
        deadline = time.monotonic() + timeout
        self._archive()  # the ends the last poll returned: the driver has stored them
        while True:
            events, self.events = self.events, []
            if self.beat.due():
                self.beat.write(state="running")
            for pilot in self.fleet.watch():
                events += self._pilot_ended(pilot)
                events += self._start_failed(pilot)
            self.fleet.retry_held()
            self._supply()
            self._bind()
            self._rebalance()
            self._bind()
            events += self._read_pilots()
            events = self.fleet.take_notes() + events
            if events or time.monotonic() >= deadline:
                return events
            if nap(self.wake_fd, min(TICK, deadline - time.monotonic())):
                return []  # the driver has a trial's report to read first

    def release(self) -> None:
        """Nothing more will be bound: every pilot leaves once its trials are done (a pending
        one is cancelled). Waits a little for them to say so, to record their ends."""
        self._archive()
        for pilot in list(self.fleet.pilots.values()):
            self.fleet.stop(pilot)
        deadline = time.monotonic() + RELEASE_WAIT
        while self.fleet.pilots and time.monotonic() < deadline:
            self.fleet.watch()
            time.sleep(TICK)

    def _archive(self) -> None:
        """Move the files of ends the driver has stored out of the dirs polled every tick
        (protocol.archive). Called before the next poll: until then an end may not be
        stored yet, and a driver killed before it finds the files where adopt() looks."""
        for paths, name in self.told:
            protocol.archive(paths, name)
        self.told.clear()

    # -- binding ----------------------------------------------------------------------------
    def _supply(self) -> None:
        # free room in the pilots that would take every ready attempt: a pilot cut to the
        # scouts' memory or time does not take a trial whose estimate grew since (_takes)
        live = [pilot for pilot in self.fleet.pilots.values() if pilot.accepting()
                and all(self._takes(pilot, launch) for launch in self.ready)]
        free = sum(self._free_in(pilot) for pilot in live)
        ready = sum(self._room(launch) for launch in self.ready)
        unstarted = sum(1 for pilot in self.fleet.pilots.values() if not pilot.ran)
        ready_now = list(self.ready)
        for _ in range(self.starts.to_submit(
                self.supply.to_submit(ready, free, len(self.fleet.pilots)), unstarted)):
            if not self.fleet.may_submit() or self.fleet.submit(cut=lambda place: sizing.cut_for(
                    ready_now, self.job, place.pilots.time)) is None:
                break
        self._cancel_unneeded(ready, sum(self._free_in(pilot) for pilot in live
                                         if pilot.state == rows.PILOT_RUNNING))
        self.fleet.move_stuck()

    def _cancel_unneeded(self, ready: int, free_running: int) -> None:
        """Cancel pending pilots the ready trials have not needed for idle_timeout (a
        running pilot with nothing to do leaves after as long): the newest first."""
        pending = sorted((pilot for pilot in self.fleet.pilots.values()
                          if pilot.state in (rows.PILOT_SUBMITTING, rows.PILOT_PENDING)
                          and not pilot.stop_sent), key=lambda pilot: -pilot.id)
        surplus = pending[:self.supply.surplus(ready, free_running, len(pending))]
        now = time.monotonic()
        self.unneeded = {pilot.id: self.unneeded.get(pilot.id, now) for pilot in surplus}
        for pilot in surplus:
            if now - self.unneeded[pilot.id] >= self.cfg.idle_timeout:
                self.fleet.notes.append(Note(None, "pilot", f"pilot {pilot.id} (job "
                                             f"{pilot.job_id}) pending, and not needed for "
                                             f"{self.cfg.idle_timeout:g} s: cancelled"))
                self.fleet.stop(pilot)

    def _takes(self, pilot: PilotJob, launch: Launch) -> bool:
        """Would the pilot, as the scouts cut it, hold the attempt: memory, and time (its
        remaining time once it runs, its cut time limit before)?"""
        limit = parse_time_limit(pilot.cut.time) if pilot.cut.time else math.inf
        return sizing.holds(pilot.slot_mem_mb, launch, self.job) and min(
            limit or math.inf, pilot.remaining()) > self._time(launch) * launch.time_factor

    def _room(self, launch: Launch) -> int:
        """Node slots the attempt takes: its width on each of its nodes."""
        return (launch.resources or self.job.resources).nodes * self._width(launch)

    def _width(self, launch: Launch) -> int:
        """The slots it takes on each of its nodes (slot_width)."""
        return slot_width(launch.resources or self.job.resources, self.job.slot)

    def _time(self, launch: Launch) -> float:
        """Its time limit in seconds, before the retry rules' factor (0: none given)."""
        own = launch.resources
        if own is not None and own.time:
            return parse_time_limit(own.time) or 0.0
        return self.trial_time or 0.0

    def _room_of(self, pilot: PilotJob) -> int:
        """Node slots of one pilot: its site's pilots' nodes times their slots per node."""
        return self.rooms.get(self.fleet.place(pilot).name, self.supply.trials_per_pilot)

    def _free_in(self, pilot: PilotJob) -> int:
        return self._room_of(pilot) - sum(self._room(b.launch) for b in self.bound.values()
                                     if b.pilot is pilot)

    def _may_take(self, pilot: PilotJob, room: int) -> bool:
        """Whether an attempt of `room` node slots may be bound to `pilot`: to start there
        now (with prefetch, only while fewer than search.parallel trials hold slots: the
        waiting ones must not run beside them), or, with prefetch, to wait there."""
        free = self._free_in(pilot)
        if free >= room:
            return not self.ahead or self._in_slots() + room <= self.parallel * self.smallest
        return free + self._allowance(pilot) >= room

    def _in_slots(self) -> int:
        """Node slots that bound attempts hold or take at once (not those that wait)."""
        pilots = {bound.pilot.id: bound.pilot for bound in self.bound.values()}
        return sum(min(self._room_of(pilot), self._room_of(pilot) - self._free_in(pilot))
                   for pilot in pilots.values())

    def _allowance(self, pilot: PilotJob) -> int:
        """Node slots of assignments a running pilot may hold beyond its room (prefetch):
        only where search.parallel fills every running pilot's slots, so that what is sent
        ahead waits for a slot rather than runs beside them."""
        running = self.ahead and pilot.state == "running" and pilot.accepting()
        if not running:
            return 0
        rooms = sum(self._room_of(other) for other in self.fleet.pilots.values()
                    if other.state == "running" and other.accepting())
        return self._room_of(pilot) if self.parallel * self.smallest >= rooms else 0

    def _rebalance(self) -> None:
        """Prefetch's other half: with nothing ready, an assignment waiting in a pilot whose
        slots are all taken goes back to ready (withdrawn, if the pilot has not claimed it
        meanwhile) for _bind to give to a running pilot with a free slot now, while fewer
        than search.parallel trials hold slots."""
        if not self.ahead or self.ready:
            return
        room = {pilot.id: self._free_in(pilot) for pilot in self.fleet.pilots.values()
                if pilot.state == "running" and pilot.accepting()}
        free = min(sum(max(0, n) for n in room.values()),  # and below search.parallel
                   self.parallel * self.smallest - self._in_slots()) // self.smallest
        for tid, bound in list(self.bound.items()):
            if free <= 0:
                return
            if bound.started or room.get(bound.pilot.id, 0) >= 0:
                continue  # running, or its pilot has the room to start it now
            if protocol.move(bound.pilot.paths, bound.name, "inbox", "withdrawn"):
                del self.bound[tid]
                self.ready.append(bound.launch)
                room[bound.pilot.id] += self._room(bound.launch)
                free -= 1

    def _bind(self) -> None:
        """Hand ready attempts, oldest first, to running pilots with room and time. The first
        that no pilot has room for now is promised the pilot where room comes soonest, as
        Slurm's backfill reserves nodes for the job at the head of its queue: later attempts
        go to the other pilots, or to the promised one only if their time limit ends them
        before the promised room is there, so a stream of small trials never starves a large
        one (in the pilot, its slots are kept for it likewise: hpsearch.pilot.slots)."""
        promised: PilotJob | None = None
        promised_at = math.inf
        for launch in list(self.ready):
            room, needed = self._room(launch), self._time(launch) * launch.time_factor
            live = [pilot for pilot in self.fleet.pilots.values()
                    if pilot.state == "running" and pilot.accepting()
                    and pilot.remaining() > needed + PILOT_MARGIN]
            backfills = needed > 0 and time.monotonic() + needed <= promised_at
            fits = [pilot for pilot in live if self._may_take(pilot, room)
                    and (pilot is not promised or backfills)
                    and sizing.holds(pilot.slot_mem_mb, launch, self.job)]
            if not fits:
                if promised is None and live:
                    promised = min(live, key=lambda pilot: (self._room_at(pilot, room),
                                                            -self._free_in(pilot)))
                    promised_at = self._room_at(promised, room)
                continue
            pilot = max(fits, key=lambda pilot: (pilot is not promised, self._free_in(pilot)))
            name = protocol.name_of(launch.trial_id, launch.attempt)
            self.fleet.store.bind_attempt(launch.trial_id, launch.attempt, pilot.job_id)
            # taken back from this pilot before? Then withdrawn/ must no longer hold it: a
            # withdraw whose reply was lost is told by the name there (protocol.move)
            protocol.discard(pilot.paths, name, "withdrawn")
            protocol.write_json(pilot.paths.file("inbox", name),
                                protocol.launch_to_dict(launch, self._width(launch)))
            self.ready.remove(launch)
            self.bound[launch.trial_id] = _Bound(launch, pilot, name)

    def _room_at(self, pilot: PilotJob, room: int) -> float:
        """When `pilot` will have `room` node slots free (monotonic; inf if its trials' ends
        are not known: no trial time)."""
        free = self._free_in(pilot)
        if free >= room:
            return time.monotonic()
        ends = sorted((b.at + limit * b.launch.time_factor if limit else math.inf,
                       self._room(b.launch))
                      for b in self.bound.values() if b.pilot is pilot
                      for limit in (self._time(b.launch),))
        for end, frees in ends:
            free += frees
            if free >= room:
                return end
        return math.inf

    # -- news -------------------------------------------------------------------------------
    def _read_pilots(self) -> list:
        events: list = []
        by_pilot: dict[int, tuple[set, set]] = {}
        for tid, bound in list(self.bound.items()):
            pilot = bound.pilot
            if pilot.id not in by_pilot:
                by_pilot[pilot.id] = (set(protocol.names(pilot.paths.dir("started"))),
                                      set(protocol.names(pilot.paths.dir("ended"))))
            started, ended = by_pilot[pilot.id]
            in_started = bound.name in started and self._own(pilot, "started", bound.name)
            in_ended = bound.name in ended and self._own(pilot, "ended", bound.name)
            if not bound.started and (in_started or in_ended):
                bound.started = True
                events += self._started(tid, bound.launch.attempt, pilot, bound.name)
            if in_ended:
                del self.bound[tid]
                events.append(self._ended_from_file(tid, bound.launch.attempt, pilot.paths,
                                                    bound.name, pilot.job_id, pilot))
        return events

    def _own(self, pilot: PilotJob, state: str, name: str) -> bool:
        """Did the pilot write `state/name`? A file of another user's, a link or a FIFO
        there tells nothing (named once in the events; issue 22)."""
        return present(pilot.paths.file(state, name), on_refused=self._refused)

    def _refused(self, message: str) -> None:
        if message not in self.refused:
            self.refused.add(message)
            self.fleet.notes.append(Note(None, "warning", message))

    def _started(self, trial_id: int, attempt: int, pilot: PilotJob, name: str) -> list:
        """Started (its pilot's job id, its own nodes and GPUs), and where it runs."""
        pilot.ran = True
        self.starts.ran()
        info = protocol.read_json(pilot.paths.file("started", name)) or {}
        nodes = info.get("nodes") or None
        return [Started(trial_id, attempt, nodes or "", gpus=info.get("gpus") or None,
                        job_id=pilot.job_id, site=pilot.site),
                Update(trial_id, attempt, "RUNNING", None, nodes,
                       self.fleet.leaves(pilot, nodes))]

    def _ended_from_file(self, trial_id: int, attempt: int, paths: protocol.PilotPaths, name: str,
                         job_id: str | None, pilot: PilotJob | None = None) -> Ended:
        """The end its pilot wrote. Stopped from outside (stopped_as): when the pilot says
        Slurm sent it away or its wind-down stopped the trial, or when the driver has given
        the pilot up (its scancel, or Slurm's end of the job, stops the trial)."""
        data = protocol.read_json(paths.file("ended", name)) or {}
        self.told.append((paths, name))
        nodes = data.get("nodes")
        detail = str(data.get("detail", ""))
        stopped: FailureClass | None = "preempted" if data.get("stopped") == "preempted" else None
        if stopped is None:
            if pilot is not None and pilot.lost:
                stopped, detail = "lost", (f"its pilot {pilot.id} (job {pilot.job_id}) was "
                                           f"given up: {pilot.lost}")
        reason = end_reason(data.get("reason"), "lost")
        peak = data.get("peak_rss_mb")
        return Ended(trial_id, attempt, data.get("exit_code"), reason, detail, nodes,
                     self.fleet.leaves(pilot, nodes) if pilot else self.fleet.planner.leaves(nodes),
                     job_id, stopped_as=stopped,
                     peak_rss_mb=float(peak) if isinstance(peak, (int, float))
                     and not isinstance(peak, bool) and 0 <= peak < math.inf else None)

    def _start_failed(self, pilot: PilotJob) -> list:
        """A pilot that ended before it ran a trial, neither stopped by the driver nor gone
        of its own accord, failed at start: the next waits (hpsearch.pilot.start_failures),
        and after too many in a row the search gives up."""
        if pilot.ran or pilot.left or pilot.stop_sent or self.starts.gave_up:
            return []
        if pilot.ended_as not in SITE_FAILED:  # those the broker counted already
            self.fleet.broker.failed(pilot)
        rec = pilot.record
        exit_code = None if rec is None or rec.exit_code is None else \
            f"{rec.exit_code}:{rec.signal or 0}"
        reason = rec.reason if rec is not None and rec.reason not in (None, "None") else None
        wait = self.starts.failed(StartFailure(pilot.id, pilot.job_id, pilot.why or "ended",
                                               exit_code, reason, self.fleet.output(pilot)))
        if self.starts.gave_up:
            return [GaveUp(self.starts.message(self.job.name, self.job.experiment_dir))]
        return [Note(None, "pilot", f"pilot {pilot.id} (job {pilot.job_id}) ended before it "
                                    f"ran a trial ({self.starts.in_a_row} in a row; the search "
                                    f"stops at {self.starts.limit}): the next pilot in "
                                    f"{wait:g} s at the earliest")]

    def _pilot_ended(self, pilot: PilotJob) -> list:
        """Its unclaimed assignments go back to `ready`; its attempts that ran and told no
        end ended with it."""
        events = self._read_pilots()  # what it finished before it went
        for tid, bound in list(self.bound.items()):
            if bound.pilot is not pilot:
                continue
            del self.bound[tid]
            if not bound.started and protocol.move(pilot.paths, bound.name, "inbox", "withdrawn"):
                self.ready.insert(0, bound.launch)
                continue
            if not bound.started:
                events.append(Started(tid, bound.launch.attempt, "", job_id=pilot.job_id))
            reason = TRIAL_END_BY_PILOT_STATE.get(pilot.ended_as or "", "lost")
            events.append(Ended(tid, bound.launch.attempt, None, reason,
                                f"its pilot {pilot.id} (job {pilot.job_id}) ended "
                                f"{pilot.ended_as or ''} while it ran".replace("  ", " "),
                                pilot.nodes, None, pilot.job_id))
        return events


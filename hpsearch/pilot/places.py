"""Where pilot jobs go: the search's one partition, or one of its sites (`executor.sites`
with `executor.pilots`, issue 40, docs/brokerage.md#pilots).

Each place has what submitting and watching a pilot there needs: the spec as the site sees
it (its partition, account, qos: executors.sites.site_job), a Slurm of the site's cluster
(`-M`), a SlurmHealth of its own (a cluster whose controller is down backs off alone, the
other sites go on), a Submitter and a Planner (the site's nodes and leaves).

The broker splits pilots across sites as the sites executor splits jobs
(hpsearch.executors.brokerage: JEDI's weight of running against pending, a site skipped
when full or when its backlog is far beyond what it runs, halved for each failure), counting
each site's pilots: running once its heartbeat came, pending before. A pilot's queue wait
(submit to its first heartbeat) is the site's measure; a pilot that failed at the site
(NODE_FAIL, BOOT_FAIL, refused by sbatch, ended before it ran a trial while not stopped) is
the site's failure. Trials bind late to whichever pilot runs first, whatever its site
(hpsearch.pilot.executor), as PanDA's pilots pull jobs.

Moving (Harvester cancels workers a queue does not start): a pilot pending at a site while
another site has idle nodes for it (after brokerage.QUICK_MOVE seconds), or for
`executor.move_after` seconds while another takes pilots (not skipped, nothing of ours
pending there, Slurm answering), is cancelled and one is submitted there instead. It had no
trial: trials bind to running pilots only, so nothing moves with it.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from hpsearch.executors import brokerage
from hpsearch.executors.brokerage import SiteLoad
from hpsearch.executors.sites import LOOK_EVERY, look, site_job
from hpsearch.executors.slurm_health import SlurmHealth
from hpsearch.executors.slurm_submit import Submitter
from hpsearch.placement.planner import Planner
from hpsearch.spec.model import Pilots, Site, SlurmJob
from hpsearch.store import rows
from hpsearch.store.site_speeds import SpeedTracker

# Slurm's ends of a pilot's job that are the site's failure, not the search's.
SITE_FAILED = frozenset({"NODE_FAIL", "BOOT_FAIL"})


@dataclass
class Place:
    site: Site | None  # None: the search has no sites
    job: SlurmJob      # the spec as this place sees it (its partition, account, qos)
    slurm: Any         # hpsearch.slurm.commands.Slurm, of the site's cluster
    health: SlurmHealth
    submitter: Submitter
    planner: Planner
    query_after: float = 0.0  # monotonic: no query before (its Slurm failed to answer)

    @property
    def name(self) -> str | None:
        return self.site.name if self.site is not None else None

    @property
    def pilots(self) -> Pilots:
        """Its pilots' settings: executor.pilots with the site's own (SitePilots.over)."""
        pilots = self.job.executor.pilots
        if pilots is None:
            raise ValueError(f"experiment {self.job.name}: pilot jobs need executor.pilots "
                             "in the spec; it has none")
        return pilots

    def folder(self, root: Path) -> Path:
        """submitit's folder for this place's pilots under the pilots dir `root`: one per
        cluster, as submitit names its files by job id and two clusters give the same ids
        (a second cluster's job 3 once ran the first cluster's job 3's pickle)."""
        cluster = self.site.cluster if self.site is not None else None
        return root / ("submitit" if cluster is None else f"submitit-{cluster}")


def make_places(job: SlurmJob, slurm, slurms: dict | None = None) -> list[Place]:
    """One place for the search's partition (with `slurm`), or one per site, each with a
    Slurm of its cluster (`slurms`: a site's name -> a Slurm, for tests); each place plans
    pilots of its own size (a site's `pilots: {nodes: ...}`)."""
    from hpsearch.slurm.commands import Slurm

    def place(site: Site | None, own: SlurmJob, site_slurm) -> Place:
        health = SlurmHealth(job.executor.poll_interval)
        nodes = own.executor.pilots.nodes if own.executor.pilots else 1
        planner = Planner(dataclasses.replace(
            own, resources=dataclasses.replace(own.resources, nodes=nodes),
            executor=dataclasses.replace(own.executor, array=False)), site_slurm)
        return Place(site, own, site_slurm, health, Submitter(own, site_slurm, health), planner)

    if not job.executor.sites:
        return [place(None, job, slurm)]
    return [place(site, site_job(job, site),
                  (slurms or {}).get(site.name) or Slurm(cluster=site.cluster))
            for site in job.executor.sites]


class PilotLike(Protocol):  # hpsearch.pilot.fleet.PilotJob, as the broker reads it
    state: str
    stop_sent: bool
    site: str | None
    submitted: float
    ended_as: str | None


P = TypeVar("P", bound=PilotLike)


class Broker:
    """Which place the next pilot goes to, and which pending pilots to move."""

    def __init__(self, places: Sequence[Place], move_after: float | None,
                 speeds: SpeedTracker | None = None) -> None:
        """speeds: the sites' trial speeds from the store, which the broker weighs."""
        self.places = list(places)
        self.by_name = {place.name: place for place in self.places}
        self.sites = [place.site for place in self.places if place.site is not None]
        self.loads = {site.name: SiteLoad() for site in self.sites}
        self.move_after = move_after
        self.looked = -LOOK_EVERY  # monotonic: when the sites' queues were last asked
        self.speeds = speeds

    @property
    def pilot_nodes(self) -> dict[str, int]:
        """The nodes one pilot asks for at each site (its pilots' nodes)."""
        return {place.name: place.pilots.nodes for place in self.places
                if place.name is not None}

    def place_of(self, site: str | None) -> Place:
        """A pilot's place by its stored site (a site no longer in the spec: the first)."""
        return self.by_name.get(site) or self.places[0]

    def load_of(self, pilot: PilotLike) -> SiteLoad:
        """Its site's load (only where the search has sites)."""
        return self.loads[self.sites[0].name if pilot.site not in self.loads else pilot.site]

    def count(self, pilots: Iterable[PilotLike]) -> None:
        """Each site's pilots running and pending; every LOOK_EVERY, its partition's idle
        nodes and other jobs pending there (hpsearch.executors.sites.look)."""
        for load in self.loads.values():
            load.running = load.pending = 0
        pilots = list(pilots)
        for pilot in pilots:
            if pilot.state == rows.PILOT_ENDED or pilot.stop_sent or not self.sites:
                continue
            load = self.load_of(pilot)
            if pilot.state == rows.PILOT_RUNNING:
                load.running += 1
            else:
                load.pending += 1
        if self.sites and time.monotonic() >= self.looked + LOOK_EVERY:
            self.looked = time.monotonic()
            if self.speeds is not None:
                self.speeds.update(self.loads)
            for place in self.places:
                if place.site is not None and place.health.may_submit():
                    look(self.loads[place.site.name], place.slurm, place.site.partition,
                         {str(getattr(p, "job_id", "")) for p in pilots
                          if self.place_of(p.site) is place})

    def choose(self, pilots: Iterable[PilotLike]) -> Place | None:
        """The place for one more pilot: the only one, or the site of the highest weight
        that takes pilots and whose Slurm answers; None if there is none now."""
        open_ = [place for place in self.places if place.health.may_submit()]
        if not self.sites:
            return open_[0] if open_ else None
        self.count(pilots)
        answering = [place.site for place in open_ if place.site is not None]
        site = brokerage.choose(answering, self.loads, time.time(), self.pilot_nodes)
        return self.by_name[site.name] if site is not None else None

    def weights(self) -> str:
        return ", ".join(f"{v.site.name} {v.weight:.3g}" + (" (skipped)" if v.skipped else "")
                         for v in brokerage.verdicts(self.sites, self.loads, time.time()))

    def started(self, pilot: PilotLike) -> None:
        """Its first heartbeat: the site's queue wait."""
        if self.sites:
            self.load_of(pilot).waits.append(max(0.0, time.time() - pilot.submitted))

    def failed(self, pilot: PilotLike) -> None:
        if self.sites:
            self.load_of(pilot).failures.append(time.time())

    def ended(self, pilot: PilotLike) -> None:
        if not self.sites:
            return
        load = self.load_of(pilot)
        load.ended += 1
        if pilot.ended_as in SITE_FAILED:
            load.failures.append(time.time())

    def stuck(self, pilots: Sequence[P]) -> list[tuple[P, Place]]:
        """Pending pilots to move, each with the place it goes to (brokerage.move_target: at
        once to a site with idle nodes for it, after move_after to one with nothing of ours
        pending), only to a site whose Slurm answers."""
        if self.move_after is None or len(self.sites) < 2:
            return []
        self.count(pilots)
        now = time.time()
        sites = [site for site in self.sites if self.by_name[site.name].health.may_submit()]
        moves = []
        for pilot in pilots:
            if pilot.state not in (rows.PILOT_PENDING,) or pilot.stop_sent:
                continue
            home = pilot.site if pilot.site in self.loads else self.sites[0].name
            target = brokerage.move_target(sites, self.loads, now, home,
                                           now - pilot.submitted, self.move_after,
                                           self.pilot_nodes)
            if target is not None:
                self.loads[target.name].pending += 1  # one is submitted there
                moves.append((pilot, self.by_name[target.name]))
        return moves

    def describe(self) -> list[str]:
        """One line a site (brokerage.describe), for the events."""
        return [brokerage.describe(v, self.loads[v.site.name])
                for v in brokerage.verdicts(self.sites, self.loads, time.time())]

"""Which site gets the next trial (issue 40, docs/brokerage.md): PanDA JEDI's job brokerage,
for the sites of one search (`executor.sites`).

JEDI weighs each queue by what it runs against what waits there,

    weight = (running + 1) / (queued + 10)

(panda-docs, advanced/brokerage.rst: "(running + 1) / ((activated + assigned + starting +
defined + 10) x manyAssigned)"), and skips a queue whose backlog is over twice what it runs
("activated + starting > 2 x running"), counting a queue that has not started anything yet
as running a few (its bootstrap: min(nBatchJob, 20)). Here, per site, `running` and
`pending` are this search's own jobs there (a pending one that the site's idle nodes take
at once counts as running: SiteLoad.starting), and `others` every other job pending in the
site's partition (JEDI's queued counts the whole queue: a partition other users keep busy
weighs less); the site's `weight` setting scales it; each
failure of the site itself (a launch Slurm refused, a node that failed, a job lost) halves
it, the halving fading with FAILURE_HALF_LIFE; a site whose trials run slower scales it by
the fastest site's seconds per step over its own (PanDA weighs a site's CPU power; here the
trials' own step times, hpsearch.store.site_speeds: once two sites have them); a site whose
Slurm does not answer (its controller down) is skipped until it does. The next trial goes
to a site where it would start now, if any (idle nodes in its partition beyond what waits
there: JEDI's weight alone kept sending trials to the site already running the most while
another had idle nodes, as benchmarks/brokerage.py measured), the highest weight first;
else to the site of the highest weight; skipped and full (`max`) sites take none. Its
pending count then grows, so the next one may go elsewhere: equal sites alternate, and a
site whose jobs start takes more. Pure: the executors (hpsearch.executors.sites,
hpsearch.pilot.places) keep the counts.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from hpsearch.spec.model import Site

OFFSET = 10          # JEDI's constant in the denominator: few jobs do not swing the weight
BACKLOG = 2.0        # skipped while pending > BACKLOG x max(running, BOOTSTRAP)
BOOTSTRAP = 2        # a site counts as running at least this many: it may queue a few first
FAILURE_HALF_LIFE = 600.0  # seconds: a site failure's halving of the weight fades this fast
QUICK_MOVE = 2.0     # seconds pending before a job moves to a site where it would start now
# What ends an attempt because of the site rather than the trial (EndReason words).
SITE_FAILURES = frozenset({"launch_error", "node_fail", "boot_fail", "lost"})


@dataclass
class SiteLoad:
    """What one site holds of the search now, and what it did so far."""

    running: int = 0
    pending: int = 0
    waits: list[float] = field(default_factory=list)  # seconds from submit to start, per job
    failures: list[float] = field(default_factory=list)  # when the site failed an attempt
    ended: int = 0  # attempts that ended here
    unreachable: str | None = None  # why its Slurm does not answer now; None: it does
    others: int = 0  # other jobs (any user's, not this search's) pending in its partition
    idle: int | None = None  # its partition's idle nodes (None: not known)
    seconds_per_step: float | None = None  # its trials' median step time (None: not known)

    def starts_now(self, nodes: int = 1) -> bool:
        """Would a job of `nodes` start there now: idle nodes beyond what waits there?"""
        return self.idle is not None and self.idle - self.others - self.pending >= nodes

    def starting(self, nodes: int = 1) -> int:
        """Its pending jobs of `nodes` that its idle nodes take at once (beyond the others'
        pending jobs, which come first): running by its executor's next poll, so weighed
        as running. Without it, a site whose first jobs had not yet been seen running
        weighed as one that queues: in benchmarks/brokerage.py's busy scenario 3 of the
        first 8 trials went to the partition the other user's queued jobs kept full, and
        right's nodes idled 1-3 s each at the end of its first wave (2026-11-30)."""
        if self.idle is None:
            return 0
        return max(0, min(self.pending, (self.idle - self.others) // max(1, nodes)))

    def has_room_for_own(self, nodes: int = 1) -> bool:
        """Would one of its own pending jobs start there now: idle nodes for it and what
        waits there (itself counted among the pending)?"""
        return self.idle is not None and self.idle - self.others - (self.pending - 1) >= nodes

    @property
    def in_flight(self) -> int:
        return self.running + self.pending

    def median_wait(self) -> float | None:
        return statistics.median(self.waits) if self.waits else None


@dataclass(frozen=True)
class Verdict:
    """A site's weight now, and why it takes no trial (None: it may)."""

    site: Site
    weight: float
    skipped: str | None


Nodes = int | Mapping[str, int]  # a job's nodes, the same at every site or each site's own


def _at(nodes: Nodes, site: str) -> int:
    """The nodes a job asks for at `site` (pilots may be of another size at each site)."""
    return nodes if isinstance(nodes, int) else nodes.get(site, 1)


def failure_factor(failures: Sequence[float], now: float) -> float:
    """1 halved for each failure, each halving fading with FAILURE_HALF_LIFE."""
    factor = 1.0
    for when in failures:
        factor *= 1.0 - 0.5 * 0.5 ** (max(0.0, now - when) / FAILURE_HALF_LIFE)
    return factor


def speed_factor(load: SiteLoad, fastest: float | None) -> float:
    """The fastest site's seconds per step over this site's (1: either not known)."""
    if not fastest or not load.seconds_per_step:
        return 1.0
    return min(1.0, fastest / load.seconds_per_step)


def fastest(loads: Iterable[SiteLoad]) -> float | None:
    """The fastest site's seconds per step, where two sites or more have one; else None."""
    known = [load.seconds_per_step for load in loads if load.seconds_per_step]
    return min(known) if len(known) >= 2 else None


def verdict(site: Site, load: SiteLoad, now: float, quickest: float | None = None,
            nodes: int = 1) -> Verdict:
    """Its weight and whether it is skipped; quickest: fastest() of the search's sites;
    nodes: a job's nodes there (its pending jobs that idle nodes take count as running)."""
    starting = load.starting(nodes)
    running, pending = load.running + starting, load.pending - starting
    weight = (running + 1) / (pending + load.others + OFFSET) * site.weight \
        * failure_factor(load.failures, now) * speed_factor(load, quickest)
    if load.unreachable is not None:
        return Verdict(site, weight, f"unreachable ({load.unreachable})")
    if site.max is not None and load.in_flight >= site.max:
        return Verdict(site, weight, f"full ({load.in_flight} of max {site.max} in flight)")
    if pending > BACKLOG * max(running, BOOTSTRAP):
        return Verdict(site, weight, f"backlog ({pending} pending against {running} "
                                     "running" + (" or starting" if starting else "") + ")")
    return Verdict(site, weight, None)


def verdicts(sites: Sequence[Site], loads: dict[str, SiteLoad], now: float,
             nodes: Nodes = 1) -> list[Verdict]:
    quickest = fastest(loads[site.name] for site in sites)
    return [verdict(site, loads[site.name], now, quickest, _at(nodes, site.name))
            for site in sites]


def choose(sites: Sequence[Site], loads: dict[str, SiteLoad], now: float,
           nodes: Nodes = 1) -> Site | None:
    """The site that may take a trial where it would start now (idle nodes beyond what
    waits there), the one with the most such nodes first (equal sites alternate: the
    weight, which counts the jobs idle nodes take as running, would fill one first), then
    the highest weight; else the site of the highest weight (the first of equal ones);
    None if every site is full or skipped."""
    open_ = [v for v in verdicts(sites, loads, now, nodes) if v.skipped is None]
    return max(open_, key=lambda v: (_room(loads[v.site.name], _at(nodes, v.site.name)),
                                     v.weight)).site \
        if open_ else None


def _room(load: SiteLoad, nodes: int) -> int:
    """Idle nodes beyond what waits there, where a job of `nodes` would start now; else 0."""
    return load.idle - load.others - load.pending if load.idle is not None \
        and load.starts_now(nodes) else 0


def move_target(sites: Sequence[Site], loads: dict[str, SiteLoad], now: float, home: str,
                waited: float, move_after: float | None, nodes: Nodes = 1) -> Site | None:
    """Where a job pending at site `home` for `waited` seconds moves now, if anywhere:
    - after QUICK_MOVE (at most move_after), to a site where it would start now while its
      home has no idle node for it, the highest weight first: what Slurm's own
      multi-partition job (`--partition=a,b`) does at once, which the busy scenario of
      benchmarks/brokerage.py measured ahead of moves after move_after alone;
    - after move_after, to the first site with nothing of ours pending there (JEDI's
      reassignment of jobs that wait too long).
    Never with move_after None, never to a skipped or full site."""
    if move_after is None:
        return None
    open_ = [v for v in verdicts(sites, loads, now, nodes)
             if v.skipped is None and v.site.name != home]
    quick = [v for v in open_ if loads[v.site.name].starts_now(_at(nodes, v.site.name))]
    if quick and waited >= min(QUICK_MOVE, move_after) \
            and not loads[home].has_room_for_own(_at(nodes, home)):
        return max(quick, key=lambda v: v.weight).site
    if waited >= move_after:
        ready = [v.site for v in open_ if loads[v.site.name].pending == 0]
        return ready[0] if ready else None
    return None


def describe(verdict_: Verdict, load: SiteLoad) -> str:
    """One line of a site: `left: weight 0.167 (1 running, 2 pending, median wait 3.2 s)`."""
    wait = load.median_wait()
    said = (f"{verdict_.site.name}: weight {verdict_.weight:.3g} ({load.running} running, "
            f"{load.pending} pending, {load.ended} ended"
            + (f", {load.others} others' jobs pending" if load.others else "")
            + (f", {load.idle} nodes idle" if load.idle is not None else "")
            + (f", median queue wait {wait:.1f} s" if wait is not None else "")
            + (f", {load.seconds_per_step:.3g} s a step" if load.seconds_per_step else "")
            + (f", {len(load.failures)} site failures" if load.failures else "") + ")")
    return said + (f"; skipped: {verdict_.skipped}" if verdict_.skipped else "")

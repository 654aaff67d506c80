"""Each site of a search over several (`executor.sites`, docs/brokerage.md), as the store
shows it: its trials running and pending now, its attempts ended and failed by the site, the
median queue wait of its jobs, its trials' speed (median seconds per step), its share of the
attempts, and the weight the broker (hpsearch.executors.brokerage) gives it from those counts,
with why a site is skipped. What `hpsearch status` prints under the trials, `hpsearch sites`
explains, the live view's sites panel shows and the report's caption of sites.png says.

The driver weighs sites from what its executors saw in this run; this view rebuilds the same
counts from the store, so it is right after a restart too, up to a poll's lag.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hpsearch.executors import brokerage
from hpsearch.executors.brokerage import SiteLoad
from hpsearch.spec.model import Site
from hpsearch.store import rows
from hpsearch.store.site_speeds import Speed, read_speeds

if TYPE_CHECKING:
    from hpsearch.store.reader import Reader

RUNNING = ("RUNNING", "COMPLETING")
# Failure classes that are the site's, not the trial's (brokerage.SITE_FAILURES's words).
SITE_FAILURE_CLASSES = frozenset({"launch_error", "node_fail", "boot_fail", "lost"})
# Words of a pilot's stored end that make it the site's failure (hpsearch.pilot.places).
SITE_PILOT_FAILURES = ("NODE_FAIL", "BOOT_FAIL", "sbatch refused")

@dataclass(frozen=True)
class SiteLine:
    site: Site
    load: SiteLoad
    verdict: brokerage.Verdict
    attempts: int  # attempts sent there, ever
    share: float   # of all attempts sent to a site
    speed: Speed | None = None  # None: no attempt at the site reported twice

    def describe(self) -> str:
        return brokerage.describe(self.verdict, self.load)


def site_lines(sites: Sequence[Site], trials: Iterable[rows.TrialRow],
               attempts: Iterable[dict], now: float | None = None,
               speeds: Mapping[str, Speed] | None = None,
               pilots: Sequence[rows.PilotRow] = ()) -> list[SiteLine]:
    """One line a site, from the trials' and attempts' rows (attempts: dicts of the
    attempts table, with site, started, finished, queue_wait, failure) and the sites'
    speeds (hpsearch.store.site_speeds). With pilots (their rows, each with its site), the
    broker weighs pilots, not trials: the running, pending, waits and failures are the pilots'
    (pilot_loads); the share is still the attempts'."""
    now = time.time() if now is None else now
    if pilots:
        return _with_shares(sites, pilot_loads(sites, pilots), attempts, now, speeds or {})
    loads = {s.name: SiteLoad() for s in sites}
    for t in trials:
        if t.site in loads and t.state in (rows.RUNNING, rows.SUBMITTING):
            load = loads[t.site]
            if t.sched_state in RUNNING:
                load.running += 1
            else:
                load.pending += 1
    for a in attempts:
        at = loads.get(a.get("site") or "")
        if at is None:
            continue
        if a.get("queue_wait") is not None:
            at.waits.append(a["queue_wait"])
        if a.get("finished") is not None:
            at.ended += 1
            if a.get("failure") in SITE_FAILURE_CLASSES:
                at.failures.append(a["finished"])
    return _with_shares(sites, loads, attempts, now, speeds or {})


def _with_shares(sites: Sequence[Site], loads: dict[str, SiteLoad], attempts: Iterable[dict],
                 now: float, speeds: Mapping[str, Speed]) -> list[SiteLine]:
    sent = dict.fromkeys(loads, 0)
    for a in attempts:
        if a.get("site") in sent:
            sent[a["site"]] += 1
    total = sum(sent.values()) or 1
    for name, speed in speeds.items():  # the broker weighs them (brokerage.speed_factor)
        if name in loads:
            loads[name].seconds_per_step = speed.seconds_per_step
    return [SiteLine(s, loads[s.name], v, sent[s.name], sent[s.name] / total,
                     speeds.get(s.name)) for s, v in zip(sites, brokerage.verdicts(
                         sites, loads, now))]


def pilot_loads(sites: Sequence[Site], pilots: Sequence[rows.PilotRow]) -> dict[str, SiteLoad]:
    """Each site's pilots, as the broker counts them (hpsearch.pilot.places): running once
    started, pending before; each one's queue wait (submit to start); ended ones, and
    those Slurm ended NODE_FAIL or BOOT_FAIL or that sbatch refused (the site's failures)."""
    loads = {s.name: SiteLoad() for s in sites}
    for p in pilots:
        load = loads.get(p.site or "")
        if load is None:
            continue
        if p.started is not None:
            load.waits.append(p.started - p.submitted)
        if p.state == rows.PILOT_ENDED:
            load.ended += 1
            if any(word in (p.reason or "") for word in SITE_PILOT_FAILURES):
                load.failures.append(p.ended or p.submitted)
        elif p.state == rows.PILOT_RUNNING:
            load.running += 1
        else:
            load.pending += 1
    return loads


def experiment_sites(exp: rows.ExperimentRow, runs_dir: Path) -> tuple[Site, ...]:
    """The sites the experiment was submitted with; () without, or where its stored spec
    cannot be read here (status and the live view show the rest)."""
    if "sites" not in exp.spec_yaml:  # not worth parsing the spec again
        return ()
    from hpsearch.errors import HpsearchError
    from hpsearch.interop.store_view import stored_spec
    try:
        return tuple(stored_spec(exp, Path(runs_dir)).executor.sites or ())
    except HpsearchError:
        return ()


def read_site_lines(reader: Reader, sites: Sequence[Site], trials: Iterable[rows.TrialRow],
                    attempts: Iterable[dict]) -> list[SiteLine]:
    """site_lines with each site's speed (and pilots, where it has) read from the store;
    [] without sites."""
    if not sites:
        return []
    pilots = [p for p in reader.pilots() if p.site]
    return site_lines(sites, trials, attempts, speeds=read_speeds(reader), pilots=pilots)

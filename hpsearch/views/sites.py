"""Each site of a search over several (`executor.sites`, docs/brokerage.md), as the store
shows it: its trials running and pending now, its attempts ended and failed by the site, the
median queue wait of its jobs, its share of the attempts, and the weight the broker
(hpsearch.executors.brokerage) gives it from those counts, with why a site is skipped.
What `hpsearch status` prints under the trials and `hpsearch sites` explains.

The driver weighs sites from what its executors saw in this run; this view rebuilds the same
counts from the store, so it is right after a restart too, up to a poll's lag.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from hpsearch.executors import brokerage
from hpsearch.executors.brokerage import SiteLoad
from hpsearch.spec.model import Site
from hpsearch.store import rows

RUNNING = ("RUNNING", "COMPLETING")
# Failure classes that are the site's, not the trial's (brokerage.SITE_FAILURES's words).
SITE_FAILURE_CLASSES = frozenset({"launch_error", "node_fail", "boot_fail", "lost"})


@dataclass(frozen=True)
class SiteLine:
    site: Site
    load: SiteLoad
    verdict: brokerage.Verdict
    attempts: int  # attempts sent there, ever
    share: float   # of all attempts sent to a site

    def describe(self) -> str:
        return brokerage.describe(self.verdict, self.load)


def site_lines(sites: Sequence[Site], trials: Iterable[rows.TrialRow],
               attempts: Iterable[dict], now: float | None = None) -> list[SiteLine]:
    """One line a site, from the trials' and attempts' rows (attempts: dicts of the
    attempts table, with site, started, finished, queue_wait, failure)."""
    now = time.time() if now is None else now
    loads = {s.name: SiteLoad() for s in sites}
    for t in trials:
        if t.site in loads and t.state in (rows.RUNNING, rows.SUBMITTING):
            load = loads[t.site]
            if t.sched_state in RUNNING:
                load.running += 1
            else:
                load.pending += 1
    sent = dict.fromkeys(loads, 0)
    for a in attempts:
        at = loads.get(a.get("site") or "")
        if at is None:
            continue
        sent[a["site"]] += 1
        if a.get("queue_wait") is not None:
            at.waits.append(a["queue_wait"])
        if a.get("finished") is not None:
            at.ended += 1
            if a.get("failure") in SITE_FAILURE_CLASSES:
                at.failures.append(a["finished"])
    total = sum(sent.values()) or 1
    return [SiteLine(s, loads[s.name], brokerage.verdict(s, loads[s.name], now),
                     sent[s.name], sent[s.name] / total) for s in sites]

"""What the report shows of brokerage (docs/brokerage.md), read from the store: each site's
line (hpsearch.views.sites, as `hpsearch status` prints it) and each attempt sent to a
site, for sites.png; and what the scouts resized and why, from the events the driver
stored (hpsearch.driver.scouts: a `scouts` event for each new sizing, an `attempt` event
for each attempt run again at the ceiling after it was killed at a scouted limit).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING

from hpsearch.store.rows import ExperimentRow, TrialRow
from hpsearch.views.scouts import Resize, read_resizes
from hpsearch.views.sites import SiteLine, experiment_sites, read_site_lines

if TYPE_CHECKING:
    from hpsearch.store.reader import Reader

@dataclass(frozen=True)
class SiteRun:
    """One attempt sent to a site: submitted at `started`, seen running `queue_wait`
    seconds later (None: never seen running), ended at `finished` (None: not yet)."""

    trial: int
    attempt: int
    site: str
    started: float
    finished: float | None
    queue_wait: float | None


@dataclass
class Brokerage:
    sites: list[SiteLine] = field(default_factory=list)  # [] without executor.sites
    runs: list[SiteRun] = field(default_factory=list)    # attempts sent to a site, started
    resizes: list[Resize] = field(default_factory=list)


def read_brokerage(reader: Reader, exp: ExperimentRow, runs_dir: Path,
                   trials: list[TrialRow]) -> Brokerage:
    """The sites' lines and runs (none without sites) and the scouts' resizes."""
    resizes = read_resizes(reader)
    sites = experiment_sites(exp, runs_dir)
    if not sites:
        return Brokerage(resizes=resizes)
    attempts = list(reader.db["attempts"].rows_where("site is not null",
                                                    order_by="trial, attempt"))
    runs = [SiteRun(a["trial"], a["attempt"], a["site"], a["started"], a["finished"],
                    a["queue_wait"]) for a in attempts if a["started"] is not None]
    return Brokerage(read_site_lines(reader, sites, trials, attempts), runs, resizes)


def scouts_section(seen: Brokerage, created: float) -> str:
    """The report's section on what the scouts resized and why; "" where they did not."""
    if not seen.resizes:
        return ""
    items = "".join(f"<li>{(r.time - created) / 60:.1f} min: "
                    f"{'' if r.trial is None else f'trial {r.trial}: '}"
                    f"{escape(r.message)}</li>" for r in seen.resizes)
    return ("<h2 id='scouts'>Scouts</h2><p>Trials sized from what the first ones took "
            "(<code>resources.time</code> or <code>mem: auto</code>, docs/brokerage.md#scouts):"
            " each new sizing, with the measure it came from, and each attempt killed at a "
            "scouted limit and run again at the ceiling (not counted as a failure). Minutes "
            f"from the experiment's creation.</p><ul>{items}</ul>")

"""A search over several sites (executor.sites, docs/brokerage.md): where its attempts ran.

The top panel is a timeline, one band a site (in the spec's order, the first on top): each
attempt sent to the site is a bar from its submit to its end, pale while it waited in the
queue (its queue wait: submit to the first poll that saw it run) and solid while it ran,
in lanes so that attempts side by side do not overlap; one not ended yet reaches now, and
one no poll saw running (pending still, or moved or ended before a poll) is pale throughout.
Below, each site's queue waits as a strip, one dot an attempt, a bar at their median.
The caption gives each site's line as `hpsearch status` prints it (hpsearch.views.sites).
"""

from __future__ import annotations

import time

from hpsearch.report.brokerage import SiteRun
from hpsearch.report.data import ReportData
from hpsearch.report.figures.common import Drawn, LeftOut, new_figure, plural

BAR = 0.8  # of a lane's height
UNITS = (("s", 1.0), ("min", 60.0), ("h", 3600.0))


def unit_of(seconds: float) -> tuple[str, float]:
    """The time unit of an axis spanning `seconds`: seconds up to 2 minutes, minutes up to
    2 hours, then hours."""
    return UNITS[0] if seconds <= 120 else UNITS[1] if seconds <= 7200 else UNITS[2]


def lanes(runs: list[SiteRun], now: float) -> tuple[dict[tuple[int, int], int], int]:
    """(trial, attempt) -> its lane within its site's band, and the lanes used: each attempt
    takes the first lane free at its submit (runs: one site's, by submit time)."""
    ends: list[float] = []
    lane_of = {}
    for run in runs:
        free = next((i for i, end in enumerate(ends) if end <= run.started), len(ends))
        end = run.finished if run.finished is not None else now
        if free == len(ends):
            ends.append(end)
        else:
            ends[free] = end
        lane_of[(run.trial, run.attempt)] = free
    return lane_of, max(1, len(ends))


def _timeline(ax, data: ReportData, names: list[str], now: float) -> None:
    runs = data.brokerage.runs
    first = min(r.started for r in runs)
    unit, scale = unit_of(max((r.finished or now) for r in runs) - first)
    for band, name in enumerate(names):
        mine = sorted((r for r in runs if r.site == name), key=lambda r: r.started)
        lane_of, count = lanes(mine, now)
        for r in mine:
            y = band + (lane_of[(r.trial, r.attempt)] + 0.5) / count
            end = r.finished if r.finished is not None else now
            ran_from = end if r.queue_wait is None else min(end, r.started + r.queue_wait)
            if ran_from > r.started:
                ax.barh(y, (ran_from - r.started) / scale, left=(r.started - first) / scale,
                        height=BAR / count, color=f"C{band}", alpha=0.3,
                        gid=f"wait {r.trial}.{r.attempt}")
            if r.queue_wait is not None:
                ax.barh(y, (end - ran_from) / scale, left=(ran_from - first) / scale,
                        height=BAR / count, color=f"C{band}", gid=f"run {r.trial}.{r.attempt}")
    for band in range(1, len(names)):
        ax.axhline(band, color="grey", lw=0.6)
    ax.set_xlabel(f"{unit} since the first submit")
    ax.set_title("attempts by site: pale while queued, solid while running")


def _waits(ax, data: ReportData, names: list[str]) -> None:
    waits = {n: [r.queue_wait for r in data.brokerage.runs if r.site == n
                 and r.queue_wait is not None] for n in names}
    unit, scale = unit_of(max((w for each in waits.values() for w in each), default=0.0))
    for band, name in enumerate(names):
        each = waits[name]
        ys = [band + 0.2 + 0.6 * ((i * 0.618) % 1.0) for i in range(len(each))]
        ax.plot([w / scale for w in each], ys, "o", ms=4, color=f"C{band}", alpha=0.7,
                gid=f"waits {name}")
        median = next(ln.load.median_wait() for ln in data.brokerage.sites
                      if ln.site.name == name)
        if median is not None:
            ax.plot([median / scale] * 2, [band + 0.1, band + 0.9], color="black", lw=2,
                    gid=f"median {name}")
    ax.set_xlabel(f"queue wait ({unit})")
    ax.set_xlim(left=0)


def _caption(data: ReportData) -> str:
    from hpsearch.tui.text import format_duration, format_speed
    said = [f"{ln.site.name}: {plural(ln.attempts, 'attempt')} ({ln.share:.0%}), median "
            f"queue wait {format_duration(ln.load.median_wait()) or '-'}, speed "
            f"{format_speed(ln.speed) or '-'}, {len(ln.load.failures)} site failure(s)"
            for ln in data.brokerage.sites]
    return ("Top: each attempt from its submit to its end, in its site's band (pale: its "
            "queue wait, until a poll saw it run, throughout where none did; an attempt not "
            "ended reaches now). Below: "
            "each attempt's queue wait, a bar at the site's median. " + "; ".join(said)
            + ". Speed: the median seconds per step between consecutive reports of one "
            "attempt (docs/brokerage.md).")


def sites(data: ReportData) -> Drawn | LeftOut | None:
    if not data.brokerage.sites:
        return None
    if not data.brokerage.runs:
        return LeftOut("no attempt has been sent to a site yet")
    names = [ln.site.name for ln in data.brokerage.sites]
    fig, (top, below) = new_figure(8, 2.4 + 1.1 * len(names), nrows=2,
                                   gridspec_kw={"height_ratios": [2, 1]})
    _timeline(top, data, names, time.time())
    _waits(below, data, names)
    for ax in (top, below):
        ax.set_ylim(len(names), 0)  # the first site on top
        ax.set_yticks([band + 0.5 for band in range(len(names))], names)
        ax.grid(axis="x", alpha=0.3)
    return Drawn(fig, _caption(data))

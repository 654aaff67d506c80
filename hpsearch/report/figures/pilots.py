"""Pilot node-hours: each pilot's held node-hours as one bar, busy (attempts ran) and idle."""

from __future__ import annotations

from hpsearch.report.data import ReportData
from hpsearch.report.figures.common import Drawn, new_figure


def pilot_hours(data: ReportData) -> Drawn | None:
    shown = [p for p in data.pilots if p.held_node_hours > 0 or p.busy_node_hours > 0]
    if not shown:
        return None
    fig, ax = new_figure(8, 0.35 * len(shown) + 1.6)
    labels = [f"pilot {p.pilot}" + (f" (job {p.job_id})" if p.job_id else "") for p in shown]
    busy = [p.busy_node_hours for p in shown]
    idle = [p.idle_node_hours for p in shown]
    ax.barh(labels, busy, color="tab:blue", label=f"busy ({sum(busy):.3g} node-h)")
    ax.barh(labels, idle, left=busy, color="lightgrey", label=f"idle ({sum(idle):.3g} node-h)")
    ax.invert_yaxis()  # the first pilot on top
    ax.set_xlabel("node-hours")
    ax.set_title(f"pilot node-hours: busy and idle ({len(shown)} pilots)")
    ax.legend(loc="best", fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    return Drawn(fig, "Each pilot's held node-hours: busy while attempts ran on its nodes, "
                      "idle otherwise.")

"""Pareto front: the first two objectives of every completed trial, the front joined and
its trials numbered."""

from __future__ import annotations

from hpsearch.report.data import ReportData
from hpsearch.report.figures.common import (
    Drawn,
    LeftOut,
    completed,
    new_figure,
    not_drawn_note,
    objective_label,
    objective_log,
    plural,
)

LABELLED = 15  # a front of at most this many trials gets each point's trial number


def pareto(data: ReportData) -> Drawn | LeftOut | None:
    if len(data.metrics) < 2:
        return None
    from hpsearch.store.results import pareto_front
    done = completed(data)
    if len(done) < 2:
        return LeftOut(f"needs at least 2 completed trials; {len(done)} completed")
    front = sorted(pareto_front(done, list(data.directions)),
                   key=lambda t: (t.values[0], t.values[1]))
    members = {t.id for t in front}
    rest = [t for t in done if t.id not in members]
    fig, ax = new_figure(6.5, 5.2)
    ax.scatter([t.values[0] for t in rest], [t.values[1] for t in rest],
               s=16, color="tab:blue", alpha=0.5, label=f"dominated ({len(rest)})")
    xs = [t.values[0] for t in front]
    ys = [t.values[1] for t in front]
    joined = "o-" if len(data.metrics) == 2 else "o"  # in 2-D, a front of more is no line
    ax.plot(xs, ys, joined, color="tab:red", markersize=5, zorder=3,
            label=f"Pareto front ({len(front)})")
    if len(front) <= LABELLED:
        for t, x, y in zip(front, xs, ys):
            ax.annotate(f"#{t.id}", (x, y), textcoords="offset points", xytext=(4, 4),
                        fontsize=7, color="tab:red")
    for i, setter in ((0, ax.set_xscale), (1, ax.set_yscale)):
        if objective_log([t.values[i] for t in done]):
            setter("log")
    ax.set_xlabel(objective_label(data, 0))
    ax.set_ylabel(objective_label(data, 1))
    ax.set_title(f"Pareto front of {data.metrics[0]} and {data.metrics[1]} "
                 f"({plural(len(done), 'completed trial')})", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    notes = [not_drawn_note(data)]
    if len(data.metrics) > 2:
        notes.append(f"Only the first two of {len(data.metrics)} objectives are drawn; the "
                     "front is that of all objectives.")
    return Drawn(fig, " ".join(["Each completed trial by its first two objectives; the "
                                "trials no other trial beats in every objective are in red."]
                               + [n for n in notes if n]))

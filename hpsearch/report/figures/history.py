"""Optimization history: each objective of every completed trial by trial number, the best
so far (one objective), and trials without a value (failed, pruned, ...) in a strip of their
own below, never among the values."""

from __future__ import annotations

from itertools import accumulate

from hpsearch.report.data import ReportData
from hpsearch.report.figures.common import (
    NOT_COMPLETED,
    Drawn,
    LeftOut,
    completed,
    integer_ticks,
    new_figure,
    not_completed,
    objective_label,
    objective_log,
    plural,
)


def history(data: ReportData) -> Drawn | LeftOut | None:
    done = completed(data)
    if not data.metrics:
        return None
    if not done:
        return LeftOut("no trial completed with a value of every objective")
    others = not_completed(data)
    count = len(data.metrics)
    ratios = [3] * count + ([0.35 + 0.25 * len(others)] if others else [])
    fig, axes = new_figure(8, 3 * count + (1 + 0.3 * len(others) if others else 0),
                           nrows=len(ratios), sharex=True, squeeze=False,
                           gridspec_kw={"height_ratios": ratios})
    xs = [t.id for t in done]
    front = set()
    if count > 1:
        from hpsearch.store.results import pareto_front
        front = {t.id for t in pareto_front(done, list(data.directions))}
    for i in range(count):
        ax = axes[i][0]
        ys = [t.values[i] for t in done]
        ax.scatter(xs, ys, s=16, color="tab:blue", label="completed trial", zorder=3)
        if count > 1:
            on_front = [(t.id, t.values[i]) for t in done if t.id in front]
            ax.scatter([x for x, _ in on_front], [y for _, y in on_front], s=22, zorder=4,
                       color="tab:red", label=f"on the Pareto front ({len(on_front)})")
        if count == 1:
            pick = min if data.directions[0] == "minimize" else max
            line = list(accumulate(ys, pick))
            ax.step(xs, line, where="post", color="tab:red", zorder=2,
                    label=f"best so far ({line[-1]:.4g})")
        if objective_log(ys):
            ax.set_yscale("log")
        ax.set_ylabel(objective_label(data, i))
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize=8)
    if others:
        strip = axes[count][0]
        for row, (state, ids) in enumerate(others.items()):
            strip.scatter(ids, [row] * len(ids), s=30, label=f"{state} ({len(ids)})",
                          **NOT_COMPLETED[state])
        strip.set_yticks(range(len(others)), list(others))
        strip.set_ylim(-0.6, len(others) - 0.4)
        strip.set_ylabel("no value", fontsize=8)
        strip.grid(axis="x", alpha=0.3)
    bottom = axes[-1][0]
    bottom.set_xlabel("trial")
    integer_ticks(bottom.xaxis)
    fig.suptitle(f"optimization history: {data.name} ({plural(len(done), 'completed trial')})")
    caption = ("Each completed trial's objective value by trial number"
               + (", and the best value so far." if count == 1 else
                  ", the trials on the Pareto front in red.")
               + (" Trials that ended without a value are marked by state in the strip "
                  "below." if others else ""))
    return Drawn(fig, caption)

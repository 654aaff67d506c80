"""Learning curves: every trial's intermediate values of the first objective by step, by
how the trial ended (completed, pruned, failed, ...), the best completed trial on top."""

from __future__ import annotations

import math

from hpsearch.report.data import ReportData
from hpsearch.report.figures.common import (
    NOT_COMPLETED,
    Drawn,
    LeftOut,
    completed,
    integer_ticks,
    new_figure,
    objective_label,
    objective_log,
)
from hpsearch.store import rows

# How each kind of trial is drawn, in the legend's order: colour, line style, layer (higher
# on top). Failed and cancelled curves (often diverged) do not set the value axis's range.
STYLES = {rows.COMPLETED: ("tab:blue", "-", 3), rows.PRUNED: ("tab:orange", "-", 2),
          rows.PAUSED: ("tab:purple", "-", 2), "running or queued": ("tab:grey", "--", 2),
          rows.FAILED: ("black", ":", 1), rows.CANCELLED: ("tab:grey", ":", 1)}
UNRANGED = (rows.FAILED, rows.CANCELLED)


def _range(values: list[float], log: bool) -> tuple[float, float]:
    """(low, high) of an axis showing `values` with a 5% margin (in log space for a log axis)."""
    f, g = (math.log10, lambda v: 10 ** v) if log else (float, float)
    lo, hi = f(min(values)), f(max(values))
    pad = (hi - lo) * 0.05 or abs(hi) * 0.05 or 1.0
    return g(lo - pad), g(hi + pad)


def learning_curves(data: ReportData) -> Drawn | LeftOut | None:
    if not data.metrics:
        return None
    if not data.curves:
        return LeftOut(f"no trial reported intermediate values of {data.metrics[0]} "
                       "(trial.report(step, ...) or '@hpsearch step=N ...' lines)")
    state = {t.id: t.state for t in data.trials}
    kinds: dict[str, list[int]] = {kind: [] for kind in STYLES}
    for trial in data.curves:
        kind = state.get(trial)
        kinds[kind if kind in STYLES else "running or queued"].append(trial)
    done = completed(data)
    best_id = None
    if done and len(data.metrics) == 1:
        pick = min if data.directions[0] == "minimize" else max
        best_id = pick(done, key=lambda t: t.values[0]).id
    from matplotlib.collections import LineCollection
    fig, ax = new_figure(8, 4.2)
    few = len(data.curves) <= 50
    for drawn, trials in kinds.items():
        color, style, layer = STYLES[drawn]
        alpha = (0.9 if few else 0.4) if drawn == rows.COMPLETED else (0.6 if few else 0.25)
        if not trials:
            continue
        ax.add_collection(LineCollection([data.curves[t] for t in trials], colors=color,
                                         linestyles=style, alpha=alpha, linewidths=1,
                                         zorder=layer, label=drawn))
        if drawn in NOT_COMPLETED:  # where each ended
            ax.plot([data.curves[t][-1][0] for t in trials],
                    [data.curves[t][-1][1] for t in trials], linestyle="none", zorder=layer,
                    alpha=alpha, markersize=5, **NOT_COMPLETED[drawn])
    if best_id in data.curves:
        points = data.curves[best_id]
        ax.plot([p[0] for p in points], [p[1] for p in points], color="tab:red", linewidth=2.2,
                zorder=4, label=f"best trial #{best_id}")
    ranged = [v for kind, trials in kinds.items() if kind not in UNRANGED
              for trial in trials for _, v in data.curves[trial]]
    ax.autoscale_view()
    values = ranged or [v for points in data.curves.values() for _, v in points]
    log = objective_log(values)
    if log:
        ax.set_yscale("log")
    others = [v for kind in UNRANGED for trial in kinds[kind] for _, v in data.curves[trial]]
    cut = bool(ranged) and any(not min(ranged) <= v <= max(ranged) for v in others)
    if cut:
        ax.set_ylim(*_range(ranged, log))
    ax.legend(loc="best", fontsize=8)
    ax.set_xlabel("step")
    integer_ticks(ax.xaxis)
    ax.set_ylabel(objective_label(data, 0))
    ax.set_title(f"learning curves of {data.metrics[0]} ({len(data.curves)} trials)")
    ax.grid(alpha=0.3)
    told = ", ".join(f"{len(trials)} {kind}" for kind, trials in kinds.items() if trials)
    return Drawn(fig, f"Each trial's reported {data.metrics[0]} by step ({told}); "
                      "completed trials are drawn over the others, a marker shows where a "
                      "failed or pruned trial stopped."
                 + (" The value axis spans the trials that did not fail; failed or cancelled "
                    "curves beyond it are cut off." if cut else ""))

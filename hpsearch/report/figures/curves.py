"""Learning curves: every trial's intermediate values of the first objective by step, by
how the trial ended (completed, pruned, failed, ...), the best completed trial on top."""

from __future__ import annotations

from hpsearch.report.data import ReportData
from hpsearch.report.figures.common import (NOT_COMPLETED, Drawn, LeftOut, completed,
                                            integer_ticks, new_figure, objective_label,
                                            objective_log)
from hpsearch.store import rows as r

# How each kind of trial is drawn: colour, line style, and its layer (higher on top).
STYLES = {r.FAILED: ("black", ":", 1), r.CANCELLED: ("tab:grey", ":", 1),
          r.PAUSED: ("tab:purple", "-", 2), r.PRUNED: ("tab:orange", "-", 2),
          "other": ("tab:grey", "--", 2), r.COMPLETED: ("tab:blue", "-", 3)}


def learning_curves(data: ReportData) -> Drawn | LeftOut | None:
    if not data.metrics:
        return None
    if not data.curves:
        return LeftOut(f"no trial reported intermediate values of {data.metrics[0]} "
                       "(trial.report(step, ...) or '@hpsearch step=N ...' lines)")
    state = {t.id: t.state for t in data.trials}
    done = completed(data)
    best_id = None
    if done and len(data.metrics) == 1:
        pick = min if data.directions[0] == "minimize" else max
        best_id = pick(done, key=lambda t: t.objective_values[0]).id
    fig, ax = new_figure(8, 4.2)
    few = len(data.curves) <= 50
    counts: dict[str, int] = {}
    for trial, points in data.curves.items():
        kind = state.get(trial, "other")
        kind = kind if kind in STYLES else "other"
        color, style, layer = STYLES[kind]
        alpha = (0.9 if few else 0.4) if kind == r.COMPLETED else (0.6 if few else 0.25)
        label = None if kind in counts else kind if kind != "other" else "running or queued"
        counts[kind] = counts.get(kind, 0) + 1
        if trial == best_id:
            continue
        ax.plot([p[0] for p in points], [p[1] for p in points], style, color=color,
                alpha=alpha, linewidth=1, zorder=layer, label=label)
        if kind in NOT_COMPLETED:  # where it ended
            ax.plot(points[-1][0], points[-1][1], linestyle="none", zorder=layer,
                    alpha=alpha, markersize=5, **NOT_COMPLETED[kind])
    if best_id in data.curves:
        points = data.curves[best_id]
        ax.plot([p[0] for p in points], [p[1] for p in points], color="tab:red", linewidth=2.2,
                zorder=4, label=f"best trial #{best_id}")
    values = [v for points in data.curves.values() for _, v in points]
    if objective_log(values):
        ax.set_yscale("log")
    ax.legend(loc="best", fontsize=8)
    ax.set_xlabel("step")
    integer_ticks(ax.xaxis)
    ax.set_ylabel(objective_label(data, 0))
    ax.set_title(f"learning curves of {data.metrics[0]} ({len(data.curves)} trials)")
    ax.grid(alpha=0.3)
    told = ", ".join(f"{n} {k if k != 'other' else 'running or queued'}"
                     for k, n in counts.items())
    return Drawn(fig, f"Each trial's reported {data.metrics[0]} by step ({told}); "
                      "completed trials are drawn over the others, a marker shows where a "
                      "failed or pruned trial stopped.")

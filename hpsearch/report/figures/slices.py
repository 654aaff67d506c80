"""Objective by parameter: one panel per (objective, parameter), each completed trial a point
at its parameter value (log axis for `log: true`, the categories by name, spread a little
sideways so equal values stay visible), coloured by trial number."""

from __future__ import annotations

import math

from hpsearch.report.data import ReportData
from hpsearch.report.figures.common import (
    NOT_COMPLETED,
    Drawn,
    LeftOut,
    coordinate,
    integer_ticks,
    new_figure,
    not_completed,
    objective_label,
    objective_log,
    parameter_view,
    plural,
    scale_axis,
)

COLUMNS = 3
BAND = 0.14  # the bottom share of a panel where trials without a value are marked


def _jitter(trial: int) -> float:
    """A fixed sideways offset in -0.2..0.2 for a categorical point, by trial number."""
    return ((trial * 0.6180339887) % 1.0 - 0.5) * 0.4


def _no_value_band(ax, marks: dict[str, list[float]]) -> None:
    """Mark trials without a value (failed, pruned, ...) at their parameter value in a grey
    band along the bottom of the panel, below every real value."""
    from matplotlib.patches import Rectangle
    from matplotlib.transforms import blended_transform_factory
    lo, hi = ax.get_ylim()
    ax.update_datalim([(x, hi) for xs in marks.values() for x in xs])  # widen x to them
    ax.autoscale_view(scaley=False)
    if ax.get_yscale() == "log":
        lo, hi = math.log10(lo), math.log10(hi)
        ax.set_ylim(bottom=10 ** ((lo - BAND * hi) / (1 - BAND)))
    else:
        ax.set_ylim(bottom=(lo - BAND * hi) / (1 - BAND))
    ax.add_patch(Rectangle((0, 0), 1, BAND * 0.8, transform=ax.transAxes, color="0.93",
                           zorder=0, linewidth=0))
    where = blended_transform_factory(ax.transData, ax.transAxes)
    for state, xs in marks.items():
        ax.scatter(xs, [BAND * 0.4] * len(xs), transform=where, s=22, zorder=3,
                   label=f"{state} (no value)", **NOT_COMPLETED[state])


def slices(data: ReportData) -> Drawn | LeftOut | None:
    view = parameter_view(data)
    if not isinstance(view, tuple):
        return view
    done, scales = view
    cols = min(COLUMNS, len(scales))
    rows_per = math.ceil(len(scales) / cols)
    rows = rows_per * len(data.metrics)
    fig, axes = new_figure(3.6 * cols + 1, 3.0 * rows, nrows=rows, ncols=cols, squeeze=False)
    points = None
    ids = {state: set(ids) for state, ids in not_completed(data).items()}
    others = {state: [t for t in data.trials if t.id in group] for state, group in ids.items()}
    for m in range(len(data.metrics)):
        ys_all = [t.values[m] for t in done]
        for k, (name, scale) in enumerate(scales.items()):
            ax = axes[m * rows_per + k // cols][k % cols]
            have = [t for t in done if name in t.params]
            xs = [coordinate(scale, t.params[name]) + (_jitter(t.id) if scale.categorical
                                                         else 0) for t in have]
            ys = [t.values[m] for t in have]
            points = ax.scatter(xs, ys, c=[t.id for t in have], cmap="viridis", s=18,
                                vmin=min(t.id for t in done), vmax=max(t.id for t in done))
            scale_axis(ax, scale, "x")
            if objective_log(ys_all):
                ax.set_yscale("log")
            ax.set_ylabel(objective_label(data, m) if k % cols == 0 else "")
            marks = {state: [coordinate(scale, t.params[name]) + (
                _jitter(t.id) if scale.categorical else 0) for t in group if name in t.params]
                for state, group in others.items()}
            if any(marks.values()):
                _no_value_band(ax, {s: xs for s, xs in marks.items() if xs})
            ax.grid(alpha=0.3)
        for k in range(len(scales), rows_per * cols):
            axes[m * rows_per + k // cols][k % cols].set_visible(False)
    handles, labels = axes[0][0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncols=len(handles),
                   fontsize=8)
    bar = fig.colorbar(points, ax=axes, shrink=0.8, label="trial")
    integer_ticks(bar.ax.yaxis)
    fig.suptitle(f"objective by parameter ({plural(len(done), 'completed trial')})")
    band = (" Trials that ended without a value are marked at their parameter values in the "
            "grey band at the bottom." if others else "")
    return Drawn(fig, "Each completed trial's objective against each parameter that varies; "
                      "colour: trial number (later trials are yellow)." + band)

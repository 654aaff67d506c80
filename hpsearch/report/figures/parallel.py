"""Parallel coordinates: one line per completed trial across its parameters and objectives,
coloured by the first objective. Every column is an axis with its own ticks in the
parameter's units: log for `log: true`, the values of a categorical, whole numbers for int."""

from __future__ import annotations

import math

from hpsearch.report.data import ReportData
from hpsearch.report.figures.common import (
    Drawn,
    LeftOut,
    coordinate,
    new_figure,
    not_drawn_note,
    objective_label,
    objective_log,
    parameter_view,
    plural,
    scale_axis,
    short,
)
from hpsearch.report.space import ParamScale


def _unit(scale: ParamScale, values: list[float]) -> tuple[list[float], tuple[float, float]]:
    """Values mapped to 0..1 on their column, and the column's (low, high) in its units."""
    if scale.categorical:
        lo, hi = 0.0, float(len(scale.choices) - 1)
    else:
        lo, hi = min(values), max(values)
    if lo == hi:  # one value (an objective): the middle of an axis around it
        lo, hi = (lo / 10, hi * 10) if scale.log else (lo - 1, hi + 1)
    f = math.log10 if scale.log else float
    return [(f(v) - f(lo)) / (f(hi) - f(lo)) for v in values], (lo, hi)


def parallel_coordinates(data: ReportData) -> Drawn | LeftOut | None:
    view = parameter_view(data)
    if not isinstance(view, tuple):
        return view
    done, scales = view
    partial = [n for n in scales if any(n not in t.params for t in done)]
    scales = {n: s for n, s in scales.items() if n not in partial}
    if not scales:
        return LeftOut("no parameter takes two values in every completed trial")
    columns: list[tuple[ParamScale, list[float]]] = [
        (s, [coordinate(s, t.params[n]) for t in done]) for n, s in scales.items()]
    for i in range(len(data.metrics)):
        values = [t.values[i] for t in done]
        log = objective_log(values)
        columns.append((ParamScale(objective_label(data, i), "float", log), values))
    n = len(columns)
    fig, host = new_figure(max(6.0, 1.7 * n), 4.8)
    host.set_xlim(0, n - 1)
    host.set_ylim(0, 1)
    host.set_yticks([])
    for side in ("left", "right", "top", "bottom"):
        host.spines[side].set_visible(False)
    unit = []
    for x, (scale, values) in enumerate(columns):
        coords, (lo, hi) = _unit(scale, values)
        unit.append(coords)
        ax = host.twinx()
        ax.set_label(scale.name)  # tests and readers find a column's axis by its name
        ax.spines["right"].set_position(("data", x))
        for side in ("left", "top", "bottom"):
            ax.spines[side].set_visible(False)
        scale_axis(ax, scale, "y")
        ax.set_ylabel("")
        ax.set_ylim(lo, hi)
        ax.tick_params(axis="y", which="both", labelsize=8)
    objective = columns[len(scales)][1]
    shade = unit[len(scales)]
    import matplotlib
    cmap = matplotlib.colormaps["viridis_r" if data.directions[0] == "minimize" else "viridis"]
    better_last = sorted(range(len(done)), key=lambda i: objective[i],
                         reverse=data.directions[0] == "minimize")  # best drawn on top
    from matplotlib.collections import LineCollection
    host.add_collection(LineCollection(
        [list(zip(range(n), [unit[c][i] for c in range(n)])) for i in better_last],
        colors=[cmap(shade[i]) for i in better_last], alpha=0.75, linewidths=1.2))
    labels = [short(s.name, 22) + (" (log)" if s.log else "") for s, _ in columns]
    rotate = 20 if max(len(x) for x in labels) > 12 and n > 3 else 0
    host.set_xticks(range(n), labels, rotation=rotate, ha="right" if rotate else "center")
    host.tick_params(axis="x", length=0, pad=8)
    host.set_title(f"parallel coordinates: {plural(len(done), 'completed trial')}, colour: "
                   f"{data.metrics[0]} (yellow is better)", fontsize=10, pad=12)
    notes = [not_drawn_note(data)]
    if partial:
        notes.append(f"Not every completed trial has {', '.join(partial)}: see the objective "
                     "by parameter figure.")
    return Drawn(fig, " ".join(["Each line is a completed trial; each axis is labelled in its "
                                "own units (log axes say so)."] + [x for x in notes if x]))

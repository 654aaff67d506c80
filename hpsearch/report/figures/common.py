"""What every report figure shares: what a figure function returns, the trials it draws,
how trials that did not complete are drawn, axes set up for a parameter, and PNG bytes.

A figure function takes ReportData and returns Drawn (a matplotlib Figure and a caption for
the HTML), LeftOut (why a figure that applies to this search is not drawn: the report shows
that note) or None (the figure does not apply: one objective has no Pareto front).
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hpsearch.report.data import ReportData
from hpsearch.report.space import ParamScale, choice_label, param_scales
from hpsearch.store import rows

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# Trials without an objective value, drawn apart from the completed ones, in this order.
NOT_COMPLETED = {rows.FAILED: {"marker": "x", "color": "black"},
                 rows.PRUNED: {"marker": "v", "color": "tab:orange"},
                 rows.CANCELLED: {"marker": "s", "color": "tab:grey"},
                 rows.PAUSED: {"marker": "d", "color": "tab:purple"}}
LOG_SPREAD = 1000.0  # objective values spanning more than this factor go on a log axis


@dataclass
class Drawn:
    figure: Figure
    caption: str = ""


@dataclass
class LeftOut:
    reason: str


def new_figure(width: float, height: float, **subplots: Any):
    """(figure, axes) with constrained layout, so titles, labels and ticks do not overlap.
    A plain Figure, not pyplot's: nothing global keeps it, no display is needed."""
    from matplotlib.figure import Figure
    figure = Figure(figsize=(width, height), layout="constrained")
    return figure, figure.subplots(**subplots)


def png(figure: Figure) -> bytes:
    """The figure as PNG bytes (Agg)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    buf = io.BytesIO()
    FigureCanvasAgg(figure).print_png(buf)
    return buf.getvalue()


def completed(data: ReportData) -> list[rows.TrialRow]:
    """Completed trials with a finite value of every objective."""
    return [t for t in data.trials if t.state == rows.COMPLETED and t.objective_values
            and len(t.objective_values) >= len(data.metrics)
            and all(v is not None and math.isfinite(v) for v in t.objective_values)]


def not_completed(data: ReportData) -> dict[str, list[int]]:
    """{state: trial ids} of trials that ended without objective values, by NOT_COMPLETED."""
    out: dict[str, list[int]] = {}
    for t in data.trials:
        if t.state in NOT_COMPLETED:
            out.setdefault(t.state, []).append(t.id)
    return {s: out[s] for s in NOT_COMPLETED if s in out}


def not_drawn_note(data: ReportData) -> str:
    """'3 failed and 1 pruned trials have no objective value and are not drawn.' or ''."""
    counts = {s: len(ids) for s, ids in not_completed(data).items()}
    if not counts:
        return ""
    words = [f"{n} {s}" for s, n in counts.items()]
    told = words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]
    trials = "trial has" if sum(counts.values()) == 1 else "trials have"
    return f"{told} {trials} no objective value and are not drawn here."


def plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def varying_scales(data: ReportData, trials: list[rows.TrialRow]) -> dict[str, ParamScale]:
    """The scale of each parameter that takes at least two values among `trials`."""
    values = {}
    for name in dict.fromkeys(k for t in trials for k in t.params):
        got = [t.params[name] for t in trials if name in t.params]
        if len({repr(v) for v in got}) >= 2:
            values[name] = got
    return param_scales(data.space, values)


def parameter_view(data: ReportData):
    """(completed trials, {name: scale} of the parameters that vary among them) for a figure
    over parameters; LeftOut with fewer than 2 completed trials or nothing varying; None
    without an objective."""
    done = completed(data)
    if not data.metrics:
        return None
    if len(done) < 2:
        return LeftOut(f"needs at least 2 completed trials; {len(done)} completed")
    scales = varying_scales(data, done)
    if not scales:
        return LeftOut("no parameter takes two values among the completed trials")
    return done, scales


def coordinate(scale: ParamScale, value) -> float:
    """Where a value sits on its parameter's axis: a categorical's index, else the value."""
    if scale.categorical:
        return float(scale.choices.index(choice_label(value)))
    return float(value)


def short(text: str, width: int = 16) -> str:
    """A label cut to `width` characters, with an ellipsis where it was cut."""
    return text if len(text) <= width else text[:width - 1] + "…"


def scale_axis(ax, scale: ParamScale, which: str = "x") -> None:
    """Set ax's x or y axis for a parameter: log scale, integer ticks, or one tick per
    category labelled with its value (rotated when long)."""
    from matplotlib.ticker import MaxNLocator
    axis = ax.xaxis if which == "x" else ax.yaxis
    if scale.categorical:
        positions = range(len(scale.choices))
        labels = [short(c) for c in scale.choices]
        if which == "x":
            rotate = 30 if sum(len(x) for x in labels) > 24 else 0
            ax.set_xticks(positions, labels, rotation=rotate,
                          ha="right" if rotate else "center")
            ax.set_xlim(-0.5, len(labels) - 0.5)
        else:
            ax.set_yticks(positions, labels)
            ax.set_ylim(-0.5, len(labels) - 0.5)
    elif scale.log:
        from matplotlib.ticker import LogFormatterSciNotation
        (ax.set_xscale if which == "x" else ax.set_yscale)("log")
        # under 2 decades, label some ticks between the powers of ten too: never one label
        axis.set_minor_formatter(LogFormatterSciNotation(labelOnlyBase=False,
                                                         minor_thresholds=(2, 0.5)))
    elif scale.kind == "int":
        axis.set_major_locator(MaxNLocator(integer=True))
    (ax.set_xlabel if which == "x" else ax.set_ylabel)(scale.label())


def objective_log(values: list[float]) -> bool:
    """Whether an objective's values belong on a log axis: all > 0, spread > LOG_SPREAD."""
    return bool(values) and min(values) > 0 and max(values) / min(values) > LOG_SPREAD


def integer_ticks(axis) -> None:
    """Only whole numbers as ticks (trial numbers, steps)."""
    from matplotlib.ticker import MaxNLocator
    axis.set_major_locator(MaxNLocator(integer=True))


def objective_label(data: ReportData, i: int) -> str:
    return f"{data.metrics[i]} ({data.directions[i]})"

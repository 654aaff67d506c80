"""The report's figures, drawn with matplotlib (Agg, no display) as PNG bytes.

Each function takes ReportData and returns PNG bytes, or None when there is nothing to draw
(no completed trial, a single parameter for parallel coordinates, one objective for the
Pareto front, no pilots).
"""

from __future__ import annotations

import io
import math

from hpsearch.report.data import ReportData
from hpsearch.store import rows as r


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    _plt().close(fig)
    return buf.getvalue()


def _done(data: ReportData) -> list[r.TrialRow]:
    return [t for t in data.trials if t.state == r.COMPLETED and t.objective_values
            and all(v is not None and math.isfinite(v) for v in t.objective_values)]


def history(data: ReportData) -> bytes | None:
    """Each objective of every completed trial by trial id, with the best so far."""
    done = _done(data)
    if not done:
        return None
    plt = _plt()
    count = len(data.metrics)
    fig, axes = plt.subplots(count, 1, figsize=(8, 3.2 * count), squeeze=False)
    failed = [t.id for t in data.trials if t.state == r.FAILED]
    for i, (metric, direction) in enumerate(zip(data.metrics, data.directions)):
        ax = axes[i][0]
        xs = [t.id for t in done]
        ys = [t.objective_values[i] for t in done]
        ax.scatter(xs, ys, s=14, color="tab:blue", label="completed trial")
        best, line = None, []
        for y in ys:
            best = y if best is None else (min(best, y) if direction == "minimize"
                                           else max(best, y))
            line.append(best)
        if count == 1:
            ax.step(xs, line, where="post", color="tab:red", label=f"best so far ({best:.4g})")
        if failed:
            ax.scatter(failed, [min(ys)] * len(failed), marker="x", color="grey",
                       label="failed trial")
        ax.set_xlabel("trial")
        ax.set_ylabel(metric)
        ax.set_title(f"{metric} ({direction})" if count > 1 else
                     f"optimization history: {data.name}, {metric} ({direction})")
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize=8)
    if count > 1:
        fig.suptitle(f"optimization history: {data.name}")
    return _png(fig)


def _param_axes(data: ReportData, trials: list[r.TrialRow]) -> dict[str, list[float]]:
    """Each varying parameter as values in [0, 1] (categories: evenly spaced), per trial."""
    names = list(dict.fromkeys(k for t in trials for k in t.params))
    out = {}
    for name in names:
        values = [t.params.get(name) for t in trials]
        if len(set(map(repr, values))) < 2:
            continue
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            lo, hi = min(values), max(values)
            out[name] = [(v - lo) / (hi - lo) if hi > lo else 0.5 for v in values]
        else:
            cats = sorted(set(map(str, values)))
            out[name] = [cats.index(str(v)) / max(1, len(cats) - 1) for v in values]
    return out


def parallel_coordinates(data: ReportData) -> bytes | None:
    """One line per completed trial over its (normalised) parameters and first objective,
    coloured by that objective."""
    done = _done(data)
    axes_values = _param_axes(data, done)
    if not done or not axes_values:
        return None
    plt = _plt()
    objective = [t.objective_values[0] for t in done]
    lo, hi = min(objective), max(objective)
    columns = list(axes_values) + [data.metrics[0]]
    norm_obj = [(v - lo) / (hi - lo) if hi > lo else 0.5 for v in objective]
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(columns)), 4))
    cmap = plt.get_cmap("viridis_r" if data.directions[0] == "minimize" else "viridis")
    order = sorted(range(len(done)), key=lambda i: norm_obj[i],
                   reverse=data.directions[0] == "minimize")  # best drawn last, on top
    for i in order:
        ys = [axes_values[c][i] for c in axes_values] + [norm_obj[i]]
        ax.plot(range(len(columns)), ys, color=cmap(norm_obj[i]), alpha=0.7, linewidth=1)
    ax.set_xticks(range(len(columns)))
    ax.set_xticklabels(columns)
    ax.set_yticks([0, 1])
    ax.set_yticklabels(["low", "high"])
    for x in range(len(columns)):
        ax.axvline(x, color="black", linewidth=0.6)
    ax.set_title(f"parallel coordinates ({len(done)} completed trials; colour: "
                 f"{data.metrics[0]}, {lo:.4g} .. {hi:.4g})")
    return _png(fig)


def importances(data: ReportData) -> dict[str, float]:
    """Share of the first objective's variance that each parameter explains alone
    (correlation ratio: numbers binned into up to 8 quantile bins, categories as they are),
    normalised to sum 1. A quick, model-free ranking; not fANOVA."""
    done = _done(data)
    if len(done) < 3:
        return {}
    ys = [t.objective_values[0] for t in done]
    mean = sum(ys) / len(ys)
    total = sum((y - mean) ** 2 for y in ys)
    if total <= 0:
        return {}
    scores = {}
    for name in dict.fromkeys(k for t in done for k in t.params):
        values = [t.params.get(name) for t in done]
        if len(set(map(repr, values))) < 2:
            continue
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            ranks = sorted(range(len(values)), key=lambda i: values[i])
            bins = min(8, len(set(values)))
            group = {i: min(bins - 1, pos * bins // len(values)) for pos, i in enumerate(ranks)}
            keys = [group[i] for i in range(len(values))]
        else:
            keys = [str(v) for v in values]
        groups: dict = {}
        for key, y in zip(keys, ys):
            groups.setdefault(key, []).append(y)
        between = sum(len(g) * (sum(g) / len(g) - mean) ** 2 for g in groups.values())
        scores[name] = between / total
    norm = sum(scores.values()) or 1.0
    return dict(sorted(((k, v / norm) for k, v in scores.items()), key=lambda kv: -kv[1]))


def importance_chart(data: ReportData) -> bytes | None:
    scores = importances(data)
    if not scores:
        return None
    plt = _plt()
    names = list(scores)[::-1]
    fig, ax = plt.subplots(figsize=(7, 0.5 * len(names) + 1.2))
    ax.barh(names, [scores[n] for n in names], color="tab:green")
    for y, n in enumerate(names):
        ax.text(scores[n], y, f" {scores[n]:.2f}", va="center", fontsize=8)
    ax.set_xlim(0, 1.1)
    ax.set_xlabel(f"share of {data.metrics[0]} variance explained alone (normalised)")
    ax.set_title("parameter importances")
    return _png(fig)


def learning_curves(data: ReportData) -> bytes | None:
    """Every trial's intermediate values of the first objective metric, by step; the best
    trial in red, failed trials dashed."""
    if not data.curves:
        return None
    plt = _plt()
    state = {t.id: t.state for t in data.trials}
    done = _done(data)
    best_id = None
    if done and len(data.metrics) == 1:
        pick = min if data.directions[0] == "minimize" else max
        best_id = pick(done, key=lambda t: t.objective_values[0]).id
    fig, ax = plt.subplots(figsize=(8, 4))
    alpha = 0.6 if len(data.curves) <= 50 else 0.25
    for trial, points in data.curves.items():
        if trial == best_id:
            continue
        style = "--" if state.get(trial) == r.FAILED else "-"
        color = "tab:grey" if state.get(trial) == r.FAILED else "tab:blue"
        ax.plot([p[0] for p in points], [p[1] for p in points], style, color=color,
                alpha=alpha, linewidth=1)
    if best_id in data.curves:
        points = data.curves[best_id]
        ax.plot([p[0] for p in points], [p[1] for p in points], color="tab:red", linewidth=2,
                label=f"best trial #{best_id}")
        ax.legend(loc="best", fontsize=8)
    ax.set_xlabel("step")
    ax.set_ylabel(data.metrics[0])
    ax.set_title(f"learning curves ({len(data.curves)} trials)")
    ax.grid(alpha=0.3)
    return _png(fig)


def pareto(data: ReportData) -> bytes | None:
    """First two objectives of every completed trial, the Pareto front joined."""
    if len(data.metrics) < 2:
        return None
    from hpsearch.results import pareto_front
    done = _done(data)
    if not done:
        return None
    plt = _plt()
    front = sorted(pareto_front(done, list(data.directions)),
                   key=lambda t: t.objective_values[0])
    fig, ax = plt.subplots(figsize=(6, 5))
    ax.scatter([t.objective_values[0] for t in done], [t.objective_values[1] for t in done],
               s=14, color="tab:blue", alpha=0.6, label="completed trial")
    ax.plot([t.objective_values[0] for t in front], [t.objective_values[1] for t in front],
            "o-", color="tab:red", label=f"Pareto front ({len(front)})")
    ax.set_xlabel(f"{data.metrics[0]} ({data.directions[0]})")
    ax.set_ylabel(f"{data.metrics[1]} ({data.directions[1]})")
    ax.set_title("Pareto front")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    return _png(fig)


def pilot_hours(data: ReportData) -> bytes | None:
    """Each pilot's held node-hours as one bar: busy (attempts ran) and idle."""
    shown = [p for p in data.pilots if p.held_node_hours > 0 or p.busy_node_hours > 0]
    if not shown:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(shown) + 1.4))
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
    return _png(fig)


FIGURES = [
    ("history", "Optimization history", history),
    ("parallel_coordinates", "Parallel coordinates", parallel_coordinates),
    ("importances", "Parameter importances", importance_chart),
    ("learning_curves", "Learning curves", learning_curves),
    ("pareto_front", "Pareto front", pareto),
    ("pilots", "Pilot node-hours", pilot_hours),
]

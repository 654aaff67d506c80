"""Parameter importances: the share of each objective's variance that each parameter
explains alone (correlation ratio), one panel per objective."""

from __future__ import annotations

from hpsearch.report.data import ReportData
from hpsearch.report.figures.common import Drawn, LeftOut, completed, new_figure, short

MIN_TRIALS = 3


def importances(data: ReportData, objective: int = 0) -> dict[str, float]:
    """Share of one objective's variance that each parameter explains alone (correlation
    ratio: numbers binned into up to 8 quantile bins, categories as they are), normalised to
    sum 1, largest first; {} with fewer than MIN_TRIALS completed trials or no variance.
    A quick, model-free ranking; not fANOVA."""
    done = completed(data)
    if len(done) < MIN_TRIALS:
        return {}
    ys = [t.values[objective] for t in done]
    mean = sum(ys) / len(ys)
    total = sum((y - mean) ** 2 for y in ys)
    if total <= 0:
        return {}
    scores = {}
    for name in dict.fromkeys(k for t in done for k in t.params):
        values = [t.params.get(name) for t in done]
        if len(set(map(repr, values))) < 2:
            continue
        scores[name] = _explained(_groups(values), ys, mean) / total
    norm = sum(scores.values()) or 1.0
    return dict(sorted(((k, v / norm) for k, v in scores.items()), key=lambda kv: -kv[1]))


def _groups(values: list) -> list:
    """A group key per value: its quantile bin for numbers, itself otherwise."""
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        ranks = sorted(range(len(values)), key=lambda i: values[i])
        bins = min(8, len(set(values)))
        group = {i: min(bins - 1, pos * bins // len(values)) for pos, i in enumerate(ranks)}
        return [group[i] for i in range(len(values))]
    return [repr(v) for v in values]


def _explained(keys: list, ys: list[float], mean: float) -> float:
    groups: dict = {}
    for key, y in zip(keys, ys):
        groups.setdefault(key, []).append(y)
    return sum(len(g) * (sum(g) / len(g) - mean) ** 2 for g in groups.values())


def importance_chart(data: ReportData) -> Drawn | LeftOut | None:
    if not data.metrics:
        return None
    done = len(completed(data))
    if done < MIN_TRIALS:
        return LeftOut(f"needs at least {MIN_TRIALS} completed trials; {done} completed")
    panels = [(i, importances(data, i)) for i in range(len(data.metrics))]
    panels = [(i, s) for i, s in panels if s]
    if not panels:
        return LeftOut("no parameter varies, or every completed trial has the same value")
    if all(len(s) < 2 for _, s in panels):
        return LeftOut(f"only one parameter varies ({next(iter(panels[0][1]))}): it explains "
                       "all the variance there is to rank")
    rows = max(len(s) for _, s in panels)
    fig, axes = new_figure(4.2 * len(panels) + 1.5, 0.45 * rows + 1.4, ncols=len(panels),
                           squeeze=False)
    for ax, (i, scores) in zip(axes[0], panels):
        names = list(scores)[::-1]
        ax.barh([short(n, 20) for n in names], [scores[n] for n in names], color="tab:green")
        for y, n in enumerate(names):
            ax.text(scores[n], y, f" {scores[n]:.2f}", va="center", fontsize=8)
        ax.set_xlim(0, 1.15)
        ax.set_xlabel(f"share of {data.metrics[i]} variance")
        ax.set_title(data.metrics[i], fontsize=10)
    fig.suptitle("parameter importances (each parameter alone, normalised)")
    return Drawn(fig, f"From {done} completed trials: the share of each objective's variance "
                      "that each parameter explains alone (numbers in up to 8 quantile bins); "
                      "a quick, model-free ranking, not fANOVA.")


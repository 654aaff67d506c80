"""Population-based training (docs/pbt.md): the population over time.

The top panel is each member's score by step (metrics[0]), its line cut where it took
another member's checkpoint (an exploit): a dotted jump from its last score before to its
first after, and a ring on the donor's score at the step whose checkpoint it took.
Below it, one panel per parameter that the population mutated: each member's value by step
as its own schedule says (pruner_attrs["pbt"]["schedule"]), a dot where an exploit set it.
The best completed member is drawn thick and on top.
"""

from __future__ import annotations

from hpsearch.report.data import ReportData
from hpsearch.report.figures.common import (
    Drawn,
    LeftOut,
    completed,
    coordinate,
    integer_ticks,
    new_figure,
    objective_label,
    plural,
    scale_axis,
)
from hpsearch.report.space import param_scales
from hpsearch.search.pbt_schedule import schedule_of

MAX_PANELS = 4  # parameters drawn; the caption names the others


def _pieces(curve: list[tuple[int, float]], starts: list[int]) -> list[list[tuple[int, float]]]:
    """A member's curve cut at each exploit's first step: the points of steps from one start
    to the next (a later piece that started behind an earlier one's end replaced its values
    of those steps in the store)."""
    bounds = starts + [float("inf")]
    return [[(s, v) for s, v in curve if bounds[i] <= s < bounds[i + 1]]
            for i in range(len(starts))]


def _mutated(schedules: dict[int, list[dict]], space: dict[str, dict]) -> list[str]:
    """Parameters whose value changed within some member's schedule, in the spec's order."""
    changed = {name for schedule in schedules.values() for e in schedule[1:]
               for name, value in e["params"].items()
               if repr(value) != repr(schedule[0]["params"].get(name))}
    return [n for n in space if n in changed] + sorted(changed - set(space))


def population(data: ReportData) -> Drawn | LeftOut | None:
    schedules = {t.id: s for t in data.trials if (s := schedule_of(t.pruner_attrs))}
    if not schedules or not data.metrics:
        return None
    curves = {tid: data.curves[tid] for tid in schedules if data.curves.get(tid)}
    if not curves:
        return LeftOut(f"no member reported {data.metrics[0]} yet")
    names = _mutated(schedules, data.space)
    shown = names[:MAX_PANELS]
    scales = param_scales(data.space, {n: [e["params"][n] for s in schedules.values()
                                           for e in s if n in e["params"]] for n in shown})
    done = [t for t in completed(data) if t.id in schedules]
    pick = min if data.directions[0] == "minimize" else max
    best = pick(done, key=lambda t: t.values[0]).id if done else None
    fig, axes = new_figure(8, 3.2 + 1.7 * len(shown), nrows=1 + len(shown), sharex=True,
                           squeeze=False, gridspec_kw={"height_ratios": [2] + [1] * len(shown)})
    score, panels = axes[0][0], [row[0] for row in axes[1:]]
    colors = [f"C{i % 10}" for i in range(len(schedules))]
    jumps = 0
    for color, (tid, schedule) in zip(colors, sorted(schedules.items())):
        top = tid == best
        width, layer = (2.6, 4) if top else (1.2, 2)
        label = f"trial {tid}" + (" (best)" if top else "")
        curve = curves.get(tid, [])
        starts = [0] + [e["from_step"] for e in schedule if e.get("donor") is not None]
        pieces = _pieces(curve, starts)
        for i, piece in enumerate(pieces):
            if piece:
                score.plot([s for s, _ in piece], [v for _, v in piece], color=color,
                           lw=width, zorder=layer, label=label if i == 0 else None)
        took = [e for e in schedule if e.get("donor") is not None]
        for e, before, after in zip(took, pieces, pieces[1:]):
            given = dict(curves.get(e["donor"], [])).get(e["donor_step"])
            if not before or not after or given is None:
                continue
            score.plot([before[-1][0], after[0][0]], [before[-1][1], after[0][1]], ls=":",
                       color=color, lw=1.4, zorder=layer)
            score.plot([e["donor_step"]], [given], "o", mfc="none", ms=6, color=color,
                       zorder=layer + 1)
            jumps += 1
        last = max([s for s, _ in curve] + [e["from_step"] for e in schedule])
        for ax, name in zip(panels, shown):
            held = [(e["from_step"], coordinate(scales[name], e["params"][name]), e)
                    for e in schedule if name in e["params"]]
            if not held:
                continue
            xs = [x for x, _, _ in held] + [last]
            ys = [y for _, y, _ in held] + [held[-1][1]]
            ax.plot(xs, ys, drawstyle="steps-post", color=color, lw=width, zorder=layer)
            set_at = [(x, y) for x, y, e in held if e.get("donor") is not None]
            if set_at:
                ax.plot(*zip(*set_at), "o", ms=4, color=color, zorder=layer)
    score.set_ylabel(objective_label(data, 0))
    if len(schedules) <= 12:
        score.legend(fontsize="small", ncols=2 if len(schedules) > 6 else 1)
    for ax, name in zip(panels, shown):
        scale_axis(ax, scales[name], which="y")
    (panels[-1] if panels else score).set_xlabel("step")
    integer_ticks((panels[-1] if panels else score).xaxis)
    exploits = sum(1 for s in schedules.values() for e in s if e.get("donor") is not None)
    caption = (f"{plural(len(schedules), 'member')}, {plural(exploits, 'exploit')}: a dotted "
               "line is a member's jump to the model it took, a ring the donor's score at the "
               "step of that checkpoint; below, a dot marks the parameters an exploit set.")
    if exploits != jumps:
        caption += f" {exploits - jumps} jump(s) not drawn: a score of either end missing."
    if not names:
        caption += " No parameter changed in any member's schedule."
    if len(names) > MAX_PANELS:
        caption += " Not drawn: " + ", ".join(names[MAX_PANELS:]) + "."
    return Drawn(fig, caption)

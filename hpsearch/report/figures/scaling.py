"""Scaling: each timed trial's throughput and efficiency against its ranks (docs/scaling.md).

Left, throughput (items/s where the trials said what a step processed, else steps/s): one
line per configuration that ran at several sizes, with the ideal (linear from its smallest
size) dashed, which the title mentions only where one is drawn. Right, parallel efficiency
(LB x CE, within a trial) of every timed trial as points, and the scaling efficiency of each
such configuration as a line."""

from __future__ import annotations

from hpsearch.accounting.efficiency import TrialEfficiency
from hpsearch.report.data import ReportData
from hpsearch.report.figures.common import Drawn, new_figure, plural


def _groups(data: ReportData) -> list[list[TrialEfficiency]]:
    """The configurations that ran at several sizes: their trials, fewest ranks first."""
    by_base: dict[int, list[TrialEfficiency]] = {}
    for eff in data.timing.values():
        if eff.baseline is not None:
            by_base.setdefault(eff.baseline, []).append(eff)
    return [sorted(g, key=lambda e: (e.ranks, e.trial)) for _, g in sorted(by_base.items())]


def scaling(data: ReportData) -> Drawn | None:
    timed = sorted(data.timing.values(), key=lambda e: (e.ranks, e.trial))
    if not timed:
        return None
    groups = _groups(data)
    unit = "items/s" if all(e.items_per_s is not None for e in timed) else "steps/s"
    fig, (left, right) = new_figure(10, 4, ncols=2)
    left.scatter([e.ranks for e in timed], [e.throughput(unit)[0] for e in timed],
                 color="grey", s=18, zorder=3, label="timed trials")
    for i, group in enumerate(groups):
        color = f"C{i % 10}"
        ranks = [e.ranks for e in group]
        base = group[0]
        left.plot(ranks, [e.throughput(unit)[0] for e in group], "o-", color=color,
                  label=f"from trial {base.trial}")
        rate = base.throughput(unit)[0] or 0.0
        left.plot(ranks, [rate * n / base.ranks for n in ranks], "--", color=color, alpha=0.5)
        right.plot(ranks, [e.scaling_efficiency for e in group], "o-", color=color,
                   label=f"scaling eff. from trial {base.trial}")
    shown = [e for e in timed if e.parallel_efficiency is not None]
    right.scatter([e.ranks for e in shown], [e.parallel_efficiency for e in shown],
                  marker="s", color="black", s=18, zorder=3, label="parallel eff. (LB x CE)")
    left.set_xlabel("ranks")
    left.set_ylabel(f"throughput ({unit})")
    left.set_title("throughput (dashed: ideal)" if groups else "throughput")  # drawn or not
    right.set_xlabel("ranks")
    right.set_ylabel("efficiency")
    right.set_ylim(0, 1.05)
    right.set_title("efficiency")
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted({e.ranks for e in timed}), [str(n) for n in
                                                        sorted({e.ranks for e in timed})])
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize=8)
    scaled = (f" {plural(len(groups), 'configuration')} ran at several sizes: speedup and "
              "scaling efficiency against each one's smallest." if groups else
              " No configuration ran at two sizes: no speedup to show.")
    return Drawn(fig, f"{plural(len(timed), 'trial')} reported per-rank step timing. "
                      "Parallel efficiency = load balance (mean / max compute over ranks) x "
                      "communication efficiency (max compute / step time)." + scaled)

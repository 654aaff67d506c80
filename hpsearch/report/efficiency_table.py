"""The report's parallel efficiency table: each timed trial's ranks, time per step, load
balance, communication and parallel efficiency, throughput, and its speedup and scaling
efficiency against the smallest size of its configuration (hpsearch.accounting.efficiency,
docs/scaling.md); "" where no trial reported timing."""

from __future__ import annotations

from html import escape

from hpsearch.accounting.efficiency import TrialEfficiency, percent
from hpsearch.report.data import ReportData


def _row(eff: TrialEfficiency, state: str) -> str:
    rate, unit = eff.throughput()
    speedup = "" if eff.speedup is None else f"{eff.speedup:.2f}"
    base = "" if eff.baseline is None else str(eff.baseline)
    cells = [str(eff.trial), escape(state), str(eff.ranks), str(eff.steps),
             f"{eff.step_s:.4g}", percent(eff.load_balance), percent(eff.comm_efficiency),
             percent(eff.parallel_efficiency), "" if rate is None else f"{rate:.4g} {unit}",
             speedup, percent(eff.scaling_efficiency), base]
    return "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def efficiency_section(data: ReportData) -> str:
    if not data.timing:
        return ""
    states = {t.id: t.state for t in data.trials}
    rows = [_row(eff, states.get(trial, "")) for trial, eff in sorted(data.timing.items())]
    heads = ["trial", "state", "ranks", "steps", "s/step", "load balance", "comm. eff.",
             "parallel eff.", "throughput", "speedup", "scaling eff.", "vs trial"]
    return ("<h2 id='parallel-efficiency'>Parallel efficiency</h2><p>From each rank's step "
            "and compute times (hpsearch.trial.report_timing), as means per step over the "
            "steps it timed: load balance = mean / max compute over ranks, communication "
            "efficiency = max compute / time per step (the slowest rank's), parallel "
            "efficiency = their product. Speedup: throughput against the same configuration "
            "at its smallest size (trial 'vs'); scaling efficiency = speedup / (ranks / its "
            "ranks). docs/scaling.md.</p><table><tr>"
            + "".join(f"<th>{h}</th>" for h in heads) + "</tr>" + "".join(rows) + "</table>")

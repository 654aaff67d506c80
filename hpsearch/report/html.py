"""The report as one HTML file: figures embedded as base64 PNG (also written beside it),
the best trials, and the resource table. No script, no external link: it opens offline."""

from __future__ import annotations

import base64
import html
import time
from pathlib import Path

from hpsearch.report import budget, figures
from hpsearch.report.brokerage import scouts_section
from hpsearch.report.data import CLASSES, ReportData
from hpsearch.report.efficiency_table import efficiency_section
from hpsearch.report.gpu_table import gpu_section
from hpsearch.report.pareto import pareto_section
from hpsearch.store.atomic import AS_OPEN, replace_file
from hpsearch.store.rows import FAILED

_CSS = """
body { font-family: sans-serif; margin: 2em; color: #222; max-width: 1100px; }
h1 { margin-bottom: 0.2em; } .meta { color: #555; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th { background: #f0f0f0; } td.l, th.l { text-align: left; }
pre { color: #b00; margin: 0.2em 0 0.6em; white-space: pre-wrap; }
tr.total td { font-weight: bold; background: #fafafa; }
img { max-width: 100%; border: 1px solid #ddd; margin: 0.3em 0 1em; }
.caption { color: #444; margin-top: -0.6em; font-size: 0.9em; }
.failed { color: #b00; } .completed { color: #070; } .note { color: #a60; }
"""


def _e(value) -> str:
    return html.escape(str(value))


def _hours(value: float) -> str:
    return "0" if value == 0 else f"{value:.3g}"


def _best_rows(data: ReportData) -> str:
    from hpsearch.store.results import best
    top = best(data.trials, list(data.directions), 10)
    if not top:
        return "<p>No completed trial.</p>"
    label = "Pareto front" if len(data.metrics) > 1 else "Best trials"
    head = "".join(f"<th>{_e(m)}</th>" for m in data.metrics)
    rows = []
    for t in top:
        values = "".join(f"<td>{v:.6g}</td>" for v in t.values)
        params = " ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}"
                          for k, v in t.params.items())
        rows.append(f"<tr><td>{t.id}</td>{values}<td class='l'>{_e(params)}</td></tr>")
    return (f"<h2>{label}</h2><table><tr><th>trial</th>{head}<th class='l'>params</th></tr>"
            + "".join(rows) + "</table>")


def _resource_table(data: ReportData) -> str:
    per_trial: dict[int, dict[str, list[float]]] = {}
    totals = {c: [0.0, 0.0, 0] for c in CLASSES}
    sources = set()
    for u in data.usage:
        cell = per_trial.setdefault(u.trial, {c: [0.0, 0.0] for c in CLASSES})
        cell[u.kind][0] += u.node_hours
        cell[u.kind][1] += u.gpu_hours
        totals[u.kind][0] += u.node_hours
        totals[u.kind][1] += u.gpu_hours
        totals[u.kind][2] += 1
        sources.add(u.source)
    state = {t.id: t for t in data.trials}
    head = "".join(f"<th colspan='2'>{c}</th>" for c in CLASSES)
    sub = "".join("<th>node-h</th><th>GPU-h</th>" for _ in CLASSES)
    lines = [f"<table><tr><th rowspan='2'>trial</th><th rowspan='2' class='l'>state</th>"
             f"<th rowspan='2'>attempts</th>{head}<th colspan='2'>all</th></tr>"
             f"<tr>{sub}<th>node-h</th><th>GPU-h</th></tr>"]
    all_node = all_gpu = 0.0
    for trial in sorted(per_trial):
        cell = per_trial[trial]
        t = state.get(trial)
        node = sum(v[0] for v in cell.values())
        gpu = sum(v[1] for v in cell.values())
        all_node += node
        all_gpu += gpu
        cells = "".join(f"<td>{_hours(cell[c][0])}</td><td>{_hours(cell[c][1])}</td>"
                        for c in CLASSES)
        st = t.state if t else "?"
        lines.append(f"<tr><td>{trial}</td><td class='l {st}'>{_e(st)}</td>"
                     f"<td>{t.attempt if t else ''}</td>{cells}<td>{_hours(node)}</td>"
                     f"<td>{_hours(gpu)}</td></tr>")
    cells = "".join(f"<td>{_hours(totals[c][0])}</td><td>{_hours(totals[c][1])}</td>"
                    for c in CLASSES)
    lines.append(f"<tr class='total'><td>total</td><td class='l'>{len(per_trial)} trials"
                 f"</td><td>{sum(v[2] for v in totals.values())}</td>{cells}"
                 f"<td>{_hours(all_node)}</td><td>{_hours(all_gpu)}</td></tr></table>")
    where = {"sacct": "sacct (ElapsedRaw, NNodes, AllocTRES gres/gpu)",
             "store": "the executor's start and end times in the store",
             "pilot": "the store's start and end times and nodes of attempts that ran in a "
                      "pilot (they share the pilot's job, whose sacct usage is the pilot's: "
                      "see Pilots; trials side by side on one node each count that node)"}
    source = " and ".join(where[s] for s in sorted(sources)) or "nothing (no attempt ran)"
    summary = ", ".join(f"{c} {totals[c][0]:.3f} node-h / {totals[c][1]:.3f} GPU-h"
                        for c in CLASSES if totals[c][2])
    return (f"<h2>Resources</h2><p>Per attempt, from {source}. Preempted: preempted, node "
            f"failure or lost attempts, run again later. Totals: {_e(summary) or 'none'}."
            f"{_startup_note(data.usage)}</p>" + "\n".join(lines))


def _startup_note(usage) -> str:
    """How much of what was held was start-up (docs/report.md#start-up-and-what-was-held)."""
    started = [u for u in usage if u.startup > 0]
    if not started:
        return ""
    node = sum(u.node_hours * u.startup / u.seconds for u in started if u.seconds)
    gpu = sum(u.gpu_hours * u.startup / u.seconds for u in started if u.seconds)
    some = f"{len(started)} attempt" + ("s" if len(started) > 1 else "")
    return (f" Of these, {node:.3f} node-h / {gpu:.3f} GPU-h were start-up ({some}: from "
            "each one's start to its code's first call of hpsearch.trial), "
            "counted here as held and left out of cost objectives (docs/spec.md#cost-as-an-"
            "objective).")


def _budget_table(data: ReportData) -> str:
    """The resource the search used, by how each trial ended (hpsearch.report.budget), and
    each trial's segments and rung in promotion mode."""
    budgets = budget.trial_budgets(data.trials, data.curves, data.usage)
    rows = "".join(f"<tr><td class='l'>{row.kind}</td><td>{row.trials}</td><td>{row.steps}"
                   f"</td><td>{_hours(row.node_hours)}</td><td>{_hours(row.gpu_hours)}</td>"
                   "</tr>" for row in budget.split(budgets))
    staged = [b for b in budgets if b.rung is not None]
    segments = ""
    if staged:
        items = "".join(f"<tr><td>{b.trial}</td><td class='l {b.kind}'>{b.kind}</td>"
                        f"<td>{b.segments}</td><td>{b.rung}</td><td>{b.steps}</td></tr>"
                        for b in staged)
        segments = ("<p>Promotion: each trial's segments (attempts), the rung of its last "
                    "one, and the steps it ran.</p><table><tr><th>trial</th><th class='l'>"
                    "state</th><th>segments</th><th>rung</th><th>steps</th></tr>"
                    f"{items}</table>")
    return ("<h2 id='budget'>Budget</h2><p>Resource used, by how each trial ended: steps are "
            "the objective's distinct reported steps (one step, one unit of resource), hours "
            "are every attempt's.</p><table><tr><th class='l'>trials that ended</th><th>trials"
            "</th><th>steps</th><th>node-h</th><th>GPU-h</th></tr>" + rows + "</table>"
            + segments)


def _percent(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f}%" if whole > 0 else ""


def _pilot_table(data: ReportData) -> str:
    """Each pilot's held node-hours, split into busy (its attempts) and idle, and the
    total; "" without pilots."""
    if not data.pilots:
        return ""
    held = sum(p.held_node_hours for p in data.pilots)
    busy = sum(p.busy_node_hours for p in data.pilots)
    idle = sum(p.idle_node_hours for p in data.pilots)
    total_pct = _percent(busy, held)
    share = f" ({total_pct} busy)" if total_pct else ""
    sources = " and ".join(sorted({"sacct (ElapsedRaw x NNodes of the pilot's job)"
                                   if p.source == "sacct" else "the store's start and end of "
                                   "the pilot" for p in data.pilots}))
    lines = ["<table><tr><th>pilot</th><th>job</th><th class='l'>state</th><th>nodes</th>"
             "<th>held</th><th>held node-h</th><th>busy node-h</th><th>idle node-h</th>"
             "<th>busy</th><th>attempts</th><th class='l'>ended</th></tr>"]
    for p in data.pilots:
        lines.append(f"<tr><td>{p.pilot}</td><td>{_e(p.job_id or '')}</td>"
                     f"<td class='l'>{_e(p.state)}</td><td>{p.nodes}</td>"
                     f"<td>{p.seconds:.0f} s</td><td>{_hours(p.held_node_hours)}</td>"
                     f"<td>{_hours(p.busy_node_hours)}</td><td>{_hours(p.idle_node_hours)}</td>"
                     f"<td>{_percent(p.busy_node_hours, p.held_node_hours)}</td>"
                     f"<td>{p.attempts}</td>"
                     f"<td class='l'>{_e(p.reason or '')}</td></tr>")
    lines.append(f"<tr class='total'><td>total</td><td></td><td class='l'>{len(data.pilots)} "
                 f"pilots</td><td></td><td></td><td>{_hours(held)}</td><td>{_hours(busy)}</td>"
                 f"<td>{_hours(idle)}</td><td>{total_pct}</td>"
                 f"<td>{sum(p.attempts for p in data.pilots)}</td><td></td></tr></table>")
    # its own id: the figure's section (pilots.png) is `pilots`
    return (f"<h2 id='pilot-usage'>Pilots</h2><p>{len(data.pilots)} pilot job(s) held "
            f"{held:.3f} node-h: busy {busy:.3f} node-h{share}, idle {idle:.3f} node-h. Held: "
            f"from {sources}. Busy: per node of a pilot, the time at least one attempt ran on "
            "it (the store's start and end of each attempt; trials side by side on one node "
            "count it once). Idle = held - busy: starting, waiting for work, winding down "
            "before its end.</p>" + "\n".join(lines))


def _figure_section(key: str, title: str, drawn, out_dir: Path) -> str:
    """One figure's section: its PNG (also written as out_dir/<key>.png) and caption, or a
    note saying why it is left out; "" where it does not apply. A left-out figure's PNG from
    an earlier report in out_dir is removed."""
    path = out_dir / f"{key}.png"
    if not isinstance(drawn, figures.Drawn):
        path.unlink(missing_ok=True)
        if drawn is None:
            return ""
        return (f"<h2 id='{key}'>{_e(title)}</h2><p class='note left-out'>Not drawn: "
                f"{_e(drawn.reason)}.</p>")
    png = figures.png(drawn.figure)
    path.write_bytes(png)
    encoded = base64.b64encode(png).decode("ascii")
    return (f"<h2 id='{key}'>{_e(title)}</h2>"
            f"<img alt='{_e(title)}' src='data:image/png;base64,{encoded}'>"
            + (f"<p class='caption'>{_e(drawn.caption)}</p>" if drawn.caption else ""))


def write(data: ReportData, out_dir: Path) -> Path:
    """Write out_dir/report.html and one PNG per figure that has something to show."""
    out_dir.mkdir(parents=True, exist_ok=True)
    sections = "".join(_figure_section(key, title, draw(data), out_dir)
                       for key, title, draw in figures.FIGURES)
    counts: dict[str, int] = {}
    for t in data.trials:
        counts[t.state] = counts.get(t.state, 0) + 1
    done = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no trials"
    notes = "".join(f"<p class='note'>{_e(n)}</p>" for n in data.notes)
    goals = ", ".join(f"{d} {m}" for m, d in zip(data.metrics, data.directions))
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime())
    failed = [t for t in data.trials if t.state == FAILED]
    failures = ""
    if failed:
        items = "".join(f"<li>trial {t.id}:<pre>{_e((t.error or '')[-600:])}</pre></li>"
                        for t in failed[:20])
        failures = f"<h2>Failed trials</h2><ul class='failed'>{items}</ul>"
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>hpsearch report: {_e(data.name)}</title><style>{_CSS}</style></head>
<body>
<h1>hpsearch report: {_e(data.name)}</h1>
<p class="meta">{_e(data.strategy)} search on the {_e(data.executor)} executor, {_e(goals)};
status {_e(data.status)}; {len(data.trials)} trials ({_e(done)}). Written {when}.</p>
{notes}
{pareto_section(data) or _best_rows(data)}
{sections}
{failures}
{_budget_table(data)}
{_resource_table(data)}
{_pilot_table(data)}
{scouts_section(data.brokerage, data.created)}
{gpu_section(data)}
{efficiency_section(data)}
</body></html>
"""
    path = out_dir / "report.html"
    replace_file(path, page, AS_OPEN)  # a link planted at a temporary name is not followed
    return path

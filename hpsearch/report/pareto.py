"""The report's Pareto section, for a search of several objectives: the trials on the front,
best first objective first, each with its objective values, what it cost (the report's own
accounting, hpsearch.accounting.usage) and its parameters; and how many completed trials the
front leaves behind. "" for one objective (the report shows its best trials instead)."""

from __future__ import annotations

import html

from hpsearch.accounting.usage import trial_cost
from hpsearch.report.data import ReportData
from hpsearch.spec.model import COST_METRICS
from hpsearch.store.results import completed, pareto_front

_COST_HEADS = {"node_hours": "node-h", "gpu_hours": "GPU-h", "wall_s": "wall s"}


def _e(value) -> str:
    return html.escape(str(value))


def pareto_section(data: ReportData) -> str:
    if len(data.metrics) < 2:
        return ""
    directions = list(data.directions)
    done = completed(data.trials)
    sign = 1.0 if directions[0] == "minimize" else -1.0
    front = sorted(pareto_front(data.trials, directions),
                   key=lambda t: (sign * t.values[0], t.id))
    head = "<h2 id='pareto'>Pareto front</h2>"
    if not front:
        return head + "<p>No completed trial.</p>"
    goals = ", ".join(f"{d} {m}" for m, d in zip(data.metrics, directions))
    measured = [m for m in data.metrics if m in COST_METRICS]
    shown = [c for c in COST_METRICS if c not in measured]  # the objectives show the rest
    rows = []
    for t in front:
        cost = trial_cost(u for u in data.usage if u.trial == t.id)
        values = "".join(f"<td>{v:.6g}</td>" for v in t.values)
        costs = "".join(f"<td>{cost[c]:.3g}</td>" for c in shown)
        params = " ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}"
                          for k, v in t.params.items())
        rows.append(f"<tr><td>{t.id}</td>{values}{costs}<td class='l'>{_e(params)}</td></tr>")
    cells = "".join(f"<th>{_e(m)}</th>" for m in data.metrics) + "".join(
        f"<th>{_COST_HEADS[c]}</th>" for c in shown)
    trade = (f" Down the table each trial gives up some {_e(data.metrics[0])} for a better "
             f"{_e(data.metrics[1])}." if len(data.metrics) == 2 and len(front) > 1 else "")
    cost_note = (f" {_e(', '.join(measured))}: what hpsearch measured over all of the trial's "
                 "attempts when it ended, as the sampler was told (docs/spec.md#cost-as-an-"
                 "objective)." if measured else "")
    used = (f" {', '.join(_COST_HEADS[c] for c in shown)}: what each trial used, as in "
            "Resources below." if shown else "")
    return (f"{head}<p class='pareto'>{len(front)} of {len(done)} completed trials are on the "
            f"front ({_e(goals)}): no other completed trial is at least as good in every "
            f"objective and better in one. Best {_e(data.metrics[0])} first.{trade}"
            f"{cost_note}{used}</p>"
            f"<table><tr><th>trial</th>{cells}<th class='l'>params</th></tr>"
            + "".join(rows) + "</table>")

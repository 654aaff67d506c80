"""The report's GPU section: each trial's and each pilot's measured GPU use (docs/gpu.md);
"" where nothing was sampled (CPU trials, no nvidia-ml-py)."""

from __future__ import annotations

from html import escape

from hpsearch.report.data import ReportData
from hpsearch.report.gpu_use import GpuUse


def _pct(value: float | None) -> str:
    return "" if value is None else f"{100 * value:.0f}%"


def _row(label: str, state: str, use: GpuUse) -> str:
    util = "" if use.util_mean is None else f"{use.util_mean:.0f}%"
    mem = f"{use.mem_max_mib / 1024:.1f}" if use.mem_max_mib else ""
    return (f"<tr><td>{escape(label)}</td><td class='l'>{escape(state)}</td><td>{use.gpus}</td>"
            f"<td>{util}</td><td>{mem}</td><td>{use.busy_gpu_hours:.3f}</td>"
            f"<td>{use.held_gpu_hours:.3f}</td><td>{_pct(use.busy_fraction)}</td></tr>")


def gpu_section(data: ReportData) -> str:
    if not data.gpu:
        return ""
    states = {t.id: t.state for t in data.trials}
    rows = [_row(f"trial {trial}", states.get(trial, ""), use)
            for trial, use in sorted(data.gpu.items())]
    rows += [_row(f"pilot {p.pilot}", p.state, data.pilot_gpu[p.pilot])
             for p in data.pilots if p.pilot in data.pilot_gpu]
    busy = sum(u.busy_gpu_seconds for u in data.gpu.values())
    held = sum(u.held_gpu_seconds for u in data.gpu.values())
    total = _pct(busy / held if held > 0 else None)
    return ("<h2 id='gpu'>GPU use</h2><p>Measured on each trial's own GPUs while it ran "
            "(nvidia-ml-py, every few seconds): mean utilisation, the most memory one GPU "
            "used, and GPU-hours doing work (utilisation x time) against GPU-hours held "
            f"(GPUs x wall time; a pilot: its GPUs x the time it held them). Trials: {total} "
            "busy.</p><table><tr><th>of</th><th class='l'>state</th><th>GPUs</th>"
            "<th>util</th><th>mem GiB</th><th>busy GPU-h</th><th>held GPU-h</th>"
            "<th>busy</th></tr>" + "".join(rows) + "</table>")

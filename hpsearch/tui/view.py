"""The live view as rich renderables: `render(snapshot, width, height, footer)`.

Laid out to fit width x height exactly (80 x 24 shows everything): a header, a progress
bar with counts per state, the best trial (or the Pareto front's size), a table of trials
in flight and recently finished, the pilot panel (pilots), the sites panel (executor.sites),
the cluster panel (Slurm), and a footer. When the terminal is smaller, the least useful parts
go first: footer, cluster panel, sites panel, pilot panel, then trial rows; narrow terminals
lose the least useful columns (nodes, job, attempt, params...).
"""

from __future__ import annotations

from rich import box
from rich.console import Group
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from hpsearch.ingest import outcome
from hpsearch.tui.model import Snapshot, TrialLine
from hpsearch.tui.text import (
    format_duration,
    format_speed,
    pilot_age,
    pilot_left,
    pilot_trials,
    pilot_where,
)

STATE_STYLE = {
    "completed": "green", "failed": "bold red", "running": "cyan", "submitting": "cyan",
    "queued": "yellow", "pending": "yellow", "pruned": "dim", "paused": "blue",
    "cancelled": "magenta",
    "lost": "red", "configuring": "yellow", "completing": "cyan",
}
PILOT_STYLE = {"running": "cyan", "draining": "yellow", "pending": "yellow",
               "submitting": "yellow", "exited": "dim"}
COUNT_ORDER = ("completed", "failed", "pruned", "paused", "running", "submitting", "queued",
               "cancelled")


def _num(value: float | None) -> str:
    return "" if value is None else f"{value:.4g}"


def _params(params: dict) -> str:
    return " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                    for k, v in params.items())


def _where(line: TrialLine) -> str:
    if not line.nodes:
        return ""
    if not line.leaves:
        return line.nodes
    span = line.leaves[0] if len(line.leaves) == 1 else f"{len(line.leaves)} leaves"
    return f"{line.nodes} {span}"


def _job(line: TrialLine) -> str:
    if not line.job_id:
        return ""
    return line.job_id + (f" ({line.pending_reason})" if line.pending_reason and
                          line.state not in ("completed", "failed", "pruned", "paused",
                                             "cancelled")
                          else "")


# (key, header, priority: lower is kept longer, width (the least, for flexible ones), justify)
_COLUMNS = [
    ("id", "id", 0, 4, "right"), ("params", "params", 2, 10, "left"),
    ("state", "state", 0, 9, "left"), ("job", "job (reason)", 3, 10, "left"),
    ("nodes", "nodes leaf", 3, 10, "left"), ("try", "try", 7, 3, "right"),
    ("step", "step", 4, 4, "right"), ("latest", "latest", 1, 7, "right"),
    ("best", "best", 6, 7, "right"), ("time", "time", 5, 6, "right"),
]
_FLEXIBLE = ("params", "job", "nodes")
_GAP = 3  # between two columns: a space of padding either side of a blank separator


def _columns(width: int, slurm: bool, id_width: int = 4) -> list[tuple]:
    """The columns that fit `width` (each costs its width plus 3 between columns: padding
    and the separator), most important first; the table keeps their natural order.
    id_width: the id column's, as wide as the longest id shown (a search of 100,000
    trials has 5-digit ids, which 4 columns cut to "999…")."""
    candidates = [c if c[0] != "id" else (*c[:3], max(c[3], id_width), *c[4:])
                  for c in _COLUMNS if slurm or c[0] not in ("job", "nodes")]
    kept, used = set(), -_GAP
    for col in sorted(candidates, key=lambda c: c[2]):
        if used + col[3] + _GAP <= width:
            kept.add(col[0])
            used += col[3] + _GAP
    return [c for c in candidates if c[0] in kept]


def _cell(line: TrialLine, key: str) -> Text | str:
    if key == "id":
        return str(line.id)
    if key == "state":
        return Text(line.state, style=STATE_STYLE.get(line.state, ""))
    return {"params": lambda: _params(line.params), "job": lambda: _job(line),
            "nodes": lambda: _where(line), "try": lambda: str(line.attempt),
            "step": lambda: "" if line.step is None else str(line.step),
            "latest": lambda: _num(line.latest), "best": lambda: _num(line.best),
            "time": lambda: format_duration(line.duration)}[key]()


def trial_table(snap: Snapshot, width: int, rows: int) -> Table:
    shown = snap.trials[:max(0, rows)]
    columns = _columns(width, snap.on_slurm,
                       max((len(str(line.id)) for line in shown), default=0))
    widths = {c[0]: c[3] for c in columns}
    spare = width - (sum(widths.values()) + _GAP * (len(columns) - 1))
    flexible = [k for k in _FLEXIBLE if k in widths]
    shares = {"params": 3, "job": 1, "nodes": 2}
    total = sum(shares[k] for k in flexible) or 1
    for key in flexible:
        widths[key] += spare * shares[key] // total
    if flexible:  # what integer division left over
        widths[flexible[0]] += width - (sum(widths.values()) + _GAP * (len(columns) - 1))
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1),
                  header_style="bold", show_header=True)
    for key, header, _, _, justify in columns:
        table.add_column(header, justify=justify, no_wrap=True, overflow="ellipsis",
                         width=widths[key])
    for line in shown:
        table.add_row(*(_cell(line, c[0]) for c in columns))
    return table


def _header(snap: Snapshot) -> Text:
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(snap.name, style="bold")
    text.append(f"  {snap.strategy} · {snap.executor} · ")
    status_style = {"running": "cyan", "completed": "green",
                    "failed": "bold red"}.get(snap.status, "yellow")
    text.append(snap.status, style=status_style)
    if snap.status == outcome.INTERRUPTED:
        text.append(f" · no driver: hpsearch resume {snap.name}", style="bold yellow")
    else:
        driver = f"driver pid {snap.driver_pid}" if snap.driver_pid else "no driver running"
        text.append(f" · {driver}", style="dim" if snap.driver_pid else "yellow")
    if snap.slurm_trouble and snap.driver_pid:
        text.append(f" · {snap.slurm_trouble}", style="bold red")
    return text


def _times(snap: Snapshot) -> Text:
    text = Text(f"elapsed {format_duration(snap.elapsed)}", no_wrap=True, overflow="ellipsis")
    if snap.eta is not None:
        text.append(f"   ETA {format_duration(snap.eta)}")
        if snap.work is not None and snap.work.unit == "steps":  # promotion: by steps
            text.append(f" ({snap.work.done:.0f} of ~{snap.work.planned:.0f} steps)",
                        style="dim")
    return text


def _progress(snap: Snapshot, width: int) -> Table:
    label = f" {snap.finished}/{snap.total} finished"
    grid = Table.grid(expand=True)
    grid.add_column(ratio=1)
    grid.add_column(no_wrap=True)
    grid.add_row(ProgressBar(total=max(1, snap.total), completed=snap.finished,
                             width=max(5, width - len(label))), label)
    return grid


def _counts(snap: Snapshot) -> Text:
    text = Text(no_wrap=True, overflow="ellipsis")
    shown = [s for s in COUNT_ORDER if snap.counts.get(s)] + \
        sorted(s for s in snap.counts if s not in COUNT_ORDER)
    for i, state in enumerate(shown or ["queued"]):
        if i:
            text.append("  ")
        text.append(f"{snap.counts.get(state, 0)} {state}", style=STATE_STYLE.get(state, ""))
    return text


def _best(snap: Snapshot) -> Text:
    text = Text(no_wrap=True, overflow="ellipsis")
    if snap.front_size is not None:
        goals = ", ".join(f"{d} {m}" for m, d in zip(snap.metrics, snap.directions))
        text.append("Pareto front: ", style="bold")
        text.append(f"{snap.front_size} trial(s)  ({goals})")
        return text
    if snap.best is None:
        text.append("best: no completed trial yet", style="dim")
        return text
    metric = snap.metrics[0] if snap.metrics else "value"
    text.append("best: ", style="bold")
    text.append(f"#{snap.best.id}  ")
    text.append(f"{metric}={snap.best_values[0]:.6g}" if snap.best_values else "",
                style="bold green")
    text.append(f"  {_params(snap.best.params)}")
    return text


def _failure(snap: Snapshot) -> Text | None:
    """The newest failure's cause ("#3 failed: exit code 1: ValueError: ..."), if any."""
    failed = [line for line in snap.trials if line.error and line.state in ("failed", "lost")]
    if not failed:
        return None
    last = max(failed, key=lambda line: line.id)
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(f"#{last.id} {last.state}: ", style="bold red")
    text.append(last.error or "")  # never empty: `failed` has only lines with an error
    return text


def _cluster_lines(snap: Snapshot) -> list[Text]:
    lines = [Text("cluster (per leaf switch)", style="bold", no_wrap=True)]
    if snap.cluster is None:
        lines.append(Text(snap.cluster_note or "", style="dim", no_wrap=True,
                          overflow="ellipsis"))
        return lines
    for leaf in snap.cluster:
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(f"{leaf.leaf:<8}", style="bold")
        text.append(f" free {leaf.free:>3}", style="green" if leaf.free else "dim")
        text.append(f"  used {leaf.used:>3}", style="cyan" if leaf.used else "dim")
        text.append(f"  down {leaf.down:>3}", style="red" if leaf.down else "dim")
        if leaf.trials:
            text.append("  trials " + " ".join(f"#{t}" for t in leaf.trials))
        lines.append(text)
    return lines


def _pilot_lines(snap: Snapshot) -> list[Text]:
    """The pilot panel: a title with how many pilots are live and ended, then one line per
    live pilot: id, job, state, nodes and leaf, time up (or waiting), time left, trials."""
    if not snap.pilots and not snap.pilots_ended:
        return []
    live = sum(1 for p in snap.pilots if p.live)
    lines = [Text(f"pilots ({live} live, {len(snap.pilots) - live + snap.pilots_ended} "
                  "ended)", style="bold", no_wrap=True)]
    cells = [(f"#{p.id}", f"job {p.job_id or '-'}", p.state, pilot_where(p), pilot_age(p),
              pilot_left(p)) for p in snap.pilots]
    widths = [max(len(c[i]) for c in cells) for i in range(6)] if cells else []
    for pilot, row in zip(snap.pilots, cells):
        text = Text(no_wrap=True, overflow="ellipsis")
        padded = [cell.ljust(width) for cell, width in zip(row, widths)]
        text.append(padded[0], style="bold")
        text.append(f" {padded[1]} ")
        text.append(padded[2], style=PILOT_STYLE.get(pilot.state, ""))
        text.append(f" {padded[3]} {padded[4]} ")
        text.append(padded[5], style="yellow" if pilot.remaining is not None
                    and pilot.remaining < 60 else "")
        text.append(" trials " + pilot_trials(pilot) if pilot.trials else " no trial",
                    style="" if pilot.trials else "dim")
        lines.append(text)
    return lines


def _sites_lines(snap: Snapshot) -> list[Text]:
    """The sites panel (executor.sites, the numbers of `hpsearch status`'s sites table): a
    title, then one line per site: its trials running and pending, its median queue wait,
    its trials' speed, its share of the attempts, and why the broker skips it."""
    if not snap.sites:
        return []
    lines = [Text("sites", style="bold", no_wrap=True)]
    cells = [(line.site.name, f"running {line.load.running}", f"pending {line.load.pending}",
              f"wait {format_duration(line.load.median_wait()) or '-'}",
              f"speed {format_speed(line.speed) or '-'}", f"share {line.share:.0%}")
             for line in snap.sites]
    widths = [max(len(c[i]) for c in cells) for i in range(6)]
    for line, row in zip(snap.sites, cells):
        text = Text(no_wrap=True, overflow="ellipsis")
        padded = [cell.ljust(width) for cell, width in zip(row, widths)]
        text.append(padded[0], style="bold")
        text.append(f" {padded[1]}", style="cyan" if line.load.running else "dim")
        text.append(f" {padded[2]}", style="yellow" if line.load.pending else "dim")
        text.append(f" {padded[3]} {padded[4]} {padded[5]}".rstrip())
        if line.verdict.skipped:
            text.append(f" skipped: {line.verdict.skipped}", style="dim")
        lines.append(text)
    return lines


def render(snap: Snapshot, width: int = 80, height: int = 24,
           footer: str | None = None) -> Group:
    """Everything, fitted to width x height (never more lines than height)."""
    top = {"header": _header(snap), "times": _times(snap), "bar": _progress(snap, width),
           "counts": _counts(snap), "best": _best(snap)}
    failure = _failure(snap)
    if failure is not None:
        top["failure"] = failure
    drop_order = ["failure", "best", "times", "counts", "bar"][0 if failure else 1:]
    cluster = _cluster_lines(snap) if snap.on_slurm else []
    pilots = _pilot_lines(snap)
    sites = _sites_lines(snap)
    bottom = [Text(footer, style="dim", no_wrap=True, overflow="ellipsis")] if footer else []
    table_head = 2  # header line and the rule under it
    # Drop parts, least useful first, until at least a few trial rows fit.
    want_rows = min(len(snap.trials), 3)
    while len(top) + len(pilots) + len(sites) + len(cluster) + len(bottom) + table_head \
            + want_rows > height:
        if bottom:
            bottom = []
        elif len(cluster) > 2:
            cluster = cluster[:-1]
        elif cluster:
            cluster = []
        elif len(sites) > 2:
            sites = sites[:-1]
        elif sites:
            sites = []
        elif len(pilots) > 2:
            pilots = pilots[:-1]
        elif pilots:
            pilots = []
        elif want_rows > 0:
            want_rows -= 1
        elif drop_order:
            del top[drop_order.pop(0)]
        else:
            break
    rows = max(0, height - len(top) - len(pilots) - len(sites) - len(cluster) - len(bottom)
               - table_head)
    parts: list = list(top.values())
    if rows > 0 or want_rows > 0:
        parts.append(trial_table(snap, width, rows))
    parts += pilots + sites + cluster + bottom
    return Group(*parts)

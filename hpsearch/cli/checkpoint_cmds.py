"""`hpsearch checkpoints`: the checkpoints the driver registered, read-only."""

from __future__ import annotations

import json
import time

from hpsearch.cli.common import add_command, add_runs_dir, format_value, runs_dir_of
from hpsearch.store import runs
from hpsearch.store.runs import STORE_FILE


def register(sub) -> None:
    p = add_command(sub, "checkpoints", "List the checkpoints trials saved (step, objective "
                    "metric at that step, size, path); `latest` marks the one a trial "
                    "resumes from. The spec's checkpoints policy decides which are kept.",
                    "  hpsearch checkpoints quadratic\n"
                    "  hpsearch checkpoints quadratic --trial 3 --all   # with deleted ones\n"
                    "  hpsearch checkpoints quadratic --json", checkpoints)
    p.add_argument("name")
    p.add_argument("--trial", type=int, default=None, help="only this trial")
    p.add_argument("--all", action="store_true", help="include checkpoints the policy deleted")
    p.add_argument("--json", action="store_true", help="print JSON")
    add_runs_dir(p)


def checkpoints(args) -> int:
    from hpsearch.cli.common import print_table
    from hpsearch.cli.inspect_cmds import _metric_names, _reader

    with _reader(runs.existing_experiment_dir(runs_dir_of(args), args.name) / STORE_FILE) as reader:
        exp = reader.experiment()
        if args.trial is not None:
            _exists(reader, exp.name, args.trial)
        rows = reader.checkpoints(args.trial, include_deleted=args.all)
    metric = _metric_names(exp)[0]
    latest = latest_of(rows)
    if args.json:
        print(json.dumps([{"trial": c.trial, "step": c.step, metric: c.metric, "bytes": c.bytes,
                           "attempt": c.attempt, "path": c.path, "latest": c.path in latest,
                           "deleted": c.deleted} for c in rows], indent=1))
        return 0
    if not rows:
        print(f"experiment {exp.name}: no checkpoints registered" +
              (f" for trial {args.trial}" if args.trial is not None else ""))
        return 0
    table = []
    for c in rows:
        note = "deleted " + time.strftime("%H:%M:%S", time.localtime(c.deleted)) \
            if c.deleted else ("latest" if c.path in latest else "")
        table.append([str(c.trial), str(c.step), format_value(c.metric) if c.metric is not None
                      else "", _size(c.bytes), str(c.attempt or ""), note, c.path])
    print_table(["trial", "step", metric, "size", "try", "", "path"], table)
    return 0


def _exists(reader, name: str, trial: int) -> None:
    """NotFound (exit 2) naming the trials there are, if `trial` is not one of them."""
    from hpsearch.errors import NotFound
    try:
        reader.trial(trial)
    except NotFound:
        ids = [t.id for t in reader.trials()]
        there = f"trials {ids[0]} to {ids[-1]}" if ids else "no trials yet"
        raise NotFound(f"experiment {name} has no trial {trial} ({there})") from None


def latest_of(rows) -> set[str]:
    """Paths of each trial's checkpoints at its highest step (of those not deleted)."""
    top: dict[int, int] = {}
    for c in rows:
        if c.deleted is None:
            top[c.trial] = max(top.get(c.trial, -1), c.step)
    return {c.path for c in rows if c.deleted is None and c.step == top[c.trial]}


def _size(n: int | None) -> str:
    if n is None:
        return ""
    size: float = n
    for unit in ("B", "K", "M", "G"):
        if size < 1024 or unit == "G":
            return f"{size:.0f}{unit}" if unit == "B" else f"{size:.1f}{unit}"
        size /= 1024
    return ""

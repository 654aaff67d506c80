"""`hpsearch watch` (the live view) and `hpsearch report` (HTML and PNG figures): both only
read the store."""

from __future__ import annotations

import sys
from pathlib import Path

from hpsearch.cli.common import add_command, add_runs_dir, runs_dir_of
from hpsearch.store import runs


def register(sub) -> None:
    p = add_command(sub, "watch", "Live view of an experiment: progress, trials, best value, "
                    "cluster leaves (Slurm). Read-only; q or Ctrl-C leaves the view and the "
                    "search goes on.",
                    "  hpsearch watch quadratic\n"
                    "  hpsearch watch quadratic --refresh 0.25\n"
                    "  hpsearch watch quadratic --once      # print one snapshot and exit\n"
                    "  ssh login1 -t hpsearch watch quadratic --runs-dir /scratch/me/runs",
                    watch)
    p.add_argument("name")
    p.add_argument("--refresh", type=float, default=0.5, metavar="SECONDS",
                   help="seconds between redraws (default 0.5; at most 1)")
    p.add_argument("--once", action="store_true",
                   help="print one snapshot and exit (the default where stdout is not a "
                        "terminal)")
    add_runs_dir(p)
    p = add_command(sub, "report", "Write an HTML report with PNG figures: optimization "
                    "history, parallel coordinates, objective by parameter, parameter "
                    "importances, learning curves, the population over time (pbt), "
                    "Pareto front, and node/GPU-hours per trial (from sacct on Slurm).",
                    "  hpsearch report quadratic                 # -> ./quadratic-report/\n"
                    "  hpsearch report quadratic --out /tmp/rep  # report.html + *.png\n"
                    "  xdg-open quadratic-report/report.html     # opens offline",
                    report)
    p.add_argument("name")
    p.add_argument("--out", type=Path, default=None, metavar="DIR",
                   help="folder to write report.html and the PNGs to (default: "
                        "./NAME-report)")
    p.add_argument("--no-sacct", action="store_true",
                   help="on Slurm, use the store's start/end times instead of asking sacct")
    add_runs_dir(p)


def watch(args) -> int:
    from hpsearch.errors import BadInput
    from hpsearch.tui import loop
    if not 0 < args.refresh <= 1:
        raise BadInput(f"--refresh: expected seconds in (0, 1]; got {args.refresh:g}")
    exp_dir = runs.existing_experiment_dir(runs_dir_of(args), args.name)
    if args.once or not sys.stdout.isatty():
        loop.render_once(exp_dir)
        return 0
    return loop.watch(exp_dir, refresh=args.refresh)


def report(args) -> int:
    from hpsearch.report import write_report
    exp_dir = runs.existing_experiment_dir(runs_dir_of(args), args.name)
    out = (args.out or Path(f"{args.name}-report")).absolute()
    path = write_report(exp_dir, out, use_sacct=not args.no_sacct)
    print(f"wrote {path}")
    return 0

"""`hpsearch sites NAME`: each site of a search over several (executor.sites), what it holds
and did, and the broker's weight of it, explained (docs/brokerage.md). `status` prints the
same table under the trials."""

from __future__ import annotations

from hpsearch.cli.common import add_command, add_runs_dir, print_table, runs_dir_of
from hpsearch.executors import brokerage
from hpsearch.store import runs
from hpsearch.store.runs import STORE_FILE


def register(sub) -> None:
    p = add_command(sub, "sites", "Show each site of a search over several partitions or "
                    "clusters (executor.sites): its trials running and pending, attempts "
                    "ended, failures of the site, median queue wait, its trials' speed "
                    "(seconds per step), share of the attempts, and the weight the broker "
                    "gives it, with why a site is skipped.",
                    "  hpsearch sites digits          # the table and each weight explained\n"
                    "  hpsearch status digits         # the same table under the trials",
                    sites)
    p.add_argument("name")
    add_runs_dir(p)


def table(lines) -> None:
    """The sites table (status and sites)."""
    from hpsearch.tui.text import format_duration, format_speed
    print(f"\nsites: {len(lines)}")
    print_table(["site", "partition", "cluster", "running", "pending", "ended", "site failures",
            "queue wait", "speed", "share", "weight", "skipped"],
           [[ln.site.name, ln.site.partition or "", ln.site.cluster or "",
             str(ln.load.running), str(ln.load.pending), str(ln.load.ended),
             str(len(ln.load.failures)), format_duration(ln.load.median_wait()),
             format_speed(ln.speed), f"{ln.share:.0%}", f"{ln.verdict.weight:.3g}",
             ln.verdict.skipped or ""]
            for ln in lines])


def read_lines(reader, exp_dir, exp, trials, attempts: list[dict]):
    """The site lines of the experiment (its row, trials and attempts as read by the
    caller, its speeds read here in one query), [] without sites."""
    from hpsearch.views.sites import experiment_sites, read_site_lines
    return read_site_lines(reader, experiment_sites(exp, exp_dir.parent), trials, attempts)


def _speeds(lines) -> str:
    """What the speed column is, and each site's measure."""
    measured = "; ".join(f"{ln.site.name} {ln.speed.seconds_per_step:.3g} s/step over "
                         f"{ln.speed.pairs} pair(s) of reports" for ln in lines if ln.speed)
    return ("speed = the median seconds per step between consecutive reports of one attempt, "
            "pooled over the site's attempts (its trials' own step times; empty where no "
            "attempt at the site reported twice): " + (measured or "none measured yet") + ".")


def sites(args) -> int:
    from hpsearch.store.reader import Reader
    exp_dir = runs.existing_experiment_dir(runs_dir_of(args), args.name)
    with Reader(exp_dir / STORE_FILE) as reader:
        lines = read_lines(reader, exp_dir, reader.experiment(), reader.trials(),
                           reader.all_attempts())
    if not lines:
        print(f"{args.name} names no executor.sites: its trials go to one partition")
        return 0
    table(lines)
    print(f"\nweight = (running + 1) / (pending + {brokerage.OFFSET}) x the site's weight "
          "setting, halved for each failure of the site (fading with a half-life of "
          f"{brokerage.FAILURE_HALF_LIFE:g} s), x the fastest site's seconds per step over "
          "its own (once two sites have a speed); a site is skipped while pending > "
          f"{brokerage.BACKLOG:g} x max(running, {brokerage.BOOTSTRAP}), or at its max. The "
          "next trial goes to the highest weight not skipped (docs/brokerage.md).")
    for line in lines:
        print(f"  {line.describe()}")
    print(f"\n{_speeds(lines)}")
    return 0

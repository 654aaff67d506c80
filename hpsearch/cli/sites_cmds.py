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
                    "ended, failures of the site, median queue wait, share of the attempts, "
                    "and the weight the broker gives it, with why a site is skipped.",
                    "  hpsearch sites digits          # the table and each weight explained\n"
                    "  hpsearch status digits         # the same table under the trials",
                    sites)
    p.add_argument("name")
    add_runs_dir(p)


def table(lines) -> None:
    """The sites table (status and sites)."""
    from hpsearch.tui.text import format_duration
    print(f"\nsites: {len(lines)}")
    print_table(["site", "partition", "cluster", "running", "pending", "ended", "site failures",
            "queue wait", "share", "weight", "skipped"],
           [[ln.site.name, ln.site.partition or "", ln.site.cluster or "",
             str(ln.load.running), str(ln.load.pending), str(ln.load.ended),
             str(len(ln.load.failures)), format_duration(ln.load.median_wait()),
             f"{ln.share:.0%}", f"{ln.verdict.weight:.3g}", ln.verdict.skipped or ""]
            for ln in lines])


def read_lines(exp_dir, exp, trials, attempts: list[dict]):
    """The site lines of the experiment (its row, trials and attempts as read by the
    caller), [] without sites."""
    from hpsearch.views.sites import site_lines
    if "sites" not in exp.spec_yaml:  # not worth parsing the spec again
        return []
    from hpsearch.errors import HpsearchError
    from hpsearch.interop.store_view import stored_spec
    try:
        sites = stored_spec(exp, exp_dir.parent).executor.sites
    except HpsearchError:  # what it ran with cannot be read here: status shows the rest
        return []
    return site_lines(sites, trials, attempts) if sites else []


def sites(args) -> int:
    from hpsearch.store.reader import Reader
    exp_dir = runs.existing_experiment_dir(runs_dir_of(args), args.name)
    with Reader(exp_dir / STORE_FILE) as reader:
        lines = read_lines(exp_dir, reader.experiment(), reader.trials(),
                           reader.all_attempts())
    if not lines:
        print(f"{args.name} names no executor.sites: its trials go to one partition")
        return 0
    table(lines)
    print(f"\nweight = (running + 1) / (pending + {brokerage.OFFSET}) x the site's weight "
          "setting, halved for each failure of the site (fading with a half-life of "
          f"{brokerage.FAILURE_HALF_LIFE:g} s); a site is skipped while pending > "
          f"{brokerage.BACKLOG:g} x max(running, {brokerage.BOOTSTRAP}), or at its max. The "
          "next trial goes to the highest weight not skipped (docs/brokerage.md).")
    for line in lines:
        print(f"  {line.describe()}")
    return 0

"""Placement of trials on a fat tree: Slurm first-fit, Slurm tree best-fit, hpsearch, pilots.

Runs the four policies of `hpsearch.placement.sim.simulate` on one seeded workload (the same
background jobs and trial stream) and prints, side by side: the fraction of multi-node trials
that span leaves, mean and p95 wait (ready to start), mean and p95 turnaround (wait + modeled
run time), the modeled all-reduce time per step of multi-node trials, utilization, and the
node-hours the search held with the fraction of them busy running trials (below 1 only for
pilots, which hold nodes between trials); then wait against first-fit's and, for pilots, the
pilots themselves and where their idle node-hours went. Two pilot rows: `pilot` (the
current rules) and `pilot-fixed` (the rules before issue 42: fixed pilots of --pilot-nodes,
oldest first, that exit whole after 300 s idle, 10 at most), on the same workload.

Goals: at most 5% of multi-node trials span leaves under hpsearch, with mean wait at most
1.10 x first-fit's; pilots at least 90% busy, spanning at most 5%, with a mean turnaround no
worse than first-fit's and tree's (issue 42). docs/placement.md describes the model.

    python benchmarks/placement.py                         # 1,024 nodes, 32 leaves, 500 trials
    python benchmarks/placement.py --max-wait 120 --seed 2
    python benchmarks/placement.py --pilot-nodes 32 --max-pilots 4
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hpsearch.placement.sim.cluster import SimConfig  # noqa: E402
from hpsearch.placement.sim.simulate import POLICIES, SimResult, simulate  # noqa: E402

SPAN_GOAL = 0.05
WAIT_GOAL = 1.10
BUSY_GOAL = 0.90


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    defaults = SimConfig()
    parser.add_argument("--nodes", type=int, default=defaults.nodes)
    parser.add_argument("--leaves", type=int, default=defaults.leaves)
    parser.add_argument("--trials", type=int, default=defaults.trials)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--oversubscription", type=float, default=defaults.oversubscription)
    parser.add_argument("--max-wait", type=float, default=defaults.max_wait,
                        help="seconds tree and hpsearch wait for one leaf (default %(default)s)")
    parser.add_argument("--pilot-nodes", type=int, default=defaults.pilot_nodes,
                        help="nodes of a pilot, under one leaf (default %(default)s)")
    parser.add_argument("--pilot-time", type=float, default=defaults.pilot_time,
                        help="a pilot's time limit, s (default %(default)s)")
    parser.add_argument("--max-pilots", type=int, default=defaults.max_pilots,
                        help="pilots queued and running at once (default %(default)s)")
    parser.add_argument("--idle-timeout", type=float, default=defaults.idle_timeout,
                        help="a pilot idle this long exits, s (default %(default)s)")
    args = parser.parse_args(argv)
    try:
        config = SimConfig(nodes=args.nodes, leaves=args.leaves, trials=args.trials,
                           seed=args.seed, oversubscription=args.oversubscription,
                           max_wait=args.max_wait, pilot_nodes=args.pilot_nodes,
                           pilot_time=args.pilot_time, max_pilots=args.max_pilots,
                           idle_timeout=args.idle_timeout)
        runs = [(policy, policy, config) for policy in POLICIES]
        runs.append(("pilot-fixed", "pilot", config.fixed_pilots()))
        results, seconds = {}, {}
        for name, policy, run_config in runs:
            began = time.perf_counter()
            results[name] = simulate(policy, run_config)
            seconds[name] = time.perf_counter() - began
    except ValueError as error:
        print(f"placement.py: {error}", file=sys.stderr)
        return 2

    print(f"{config.nodes} nodes in {config.leaves} leaves, uplinks {config.oversubscription:g}:1, "
          f"{config.trials} trials ({config.parallel} in flight), seed {config.seed}, "
          f"max_wait {config.max_wait:g} s, S {config.gradient_bytes / 1e6:g} MB, "
          f"B {config.link_bandwidth / 1e9:g} Gb/s")
    first_fit, ours = results["first-fit"], results["hpsearch"]
    header = (f"{'policy':<11} {'spanning':>9} {'mean wait':>10} {'p95 wait':>9} "
              f"{'mean turn':>10} {'p95 turn':>9} {'step ms':>8} {'util':>6} {'node-h':>7} "
              f"{'busy':>6} {'wait/ff':>8} {'sim s':>6}")
    print(header)
    print("-" * len(header))
    for policy, r in results.items():
        wait_ratio = r.mean_wait / first_fit.mean_wait if first_fit.mean_wait else float("nan")
        print(f"{policy:<11} {r.spanning_fraction:>8.1%} {r.mean_wait:>9.1f}s {r.p95_wait:>8.1f}s "
              f"{r.mean_turnaround:>9.0f}s {r.p95_turnaround:>8.0f}s "
              f"{r.mean_step_time * 1e3:>8.2f} {r.utilization:>6.1%} {r.node_hours:>7.0f} "
              f"{r.busy_fraction:>6.1%} {wait_ratio:>7.2f}x {seconds[policy]:>6.2f}")
    print(_pilot_line("pilot", config, results["pilot"], ours))
    print(_pilot_line("pilot-fixed", config.fixed_pilots(), results["pilot-fixed"], ours))
    span_ok = ours.spanning_fraction <= SPAN_GOAL
    wait_ok = ours.mean_wait <= WAIT_GOAL * first_fit.mean_wait
    print(f"{'ok' if span_ok else 'MISS'}: hpsearch spans leaves for {ours.spanning_fraction:.1%} "
          f"of multi-node trials (goal <= {SPAN_GOAL:.0%})")
    print(f"{'ok' if wait_ok else 'MISS'}: hpsearch mean wait {ours.mean_wait:.1f} s = "
          f"{ours.mean_wait / first_fit.mean_wait if first_fit.mean_wait else float('nan'):.2f} x "
          f"first-fit's {first_fit.mean_wait:.1f} s (goal <= {WAIT_GOAL:.2f} x)")
    for line in pilot_goal_lines(results["pilot"], first_fit, results["tree"]):
        print(line)
    return 0


def pilot_goal_lines(pilots: SimResult, first_fit: SimResult, tree: SimResult) -> list[str]:
    """Issue 42's goal for pilots, one `ok:`/`MISS:` line each: busy, spanning, turnaround."""
    busy_ok = pilots.busy_fraction >= BUSY_GOAL
    span_ok = pilots.spanning_fraction <= SPAN_GOAL
    turn = pilots.mean_turnaround
    turn_ok = turn <= first_fit.mean_turnaround and turn <= tree.mean_turnaround
    return [
        f"{'ok' if busy_ok else 'MISS'}: pilots busy {pilots.busy_fraction:.1%} of the "
        f"node-hours they held (goal >= {BUSY_GOAL:.0%})",
        f"{'ok' if span_ok else 'MISS'}: pilots span leaves for {pilots.spanning_fraction:.1%} "
        f"of multi-node trials (goal <= {SPAN_GOAL:.0%})",
        f"{'ok' if turn_ok else 'MISS'}: pilots mean turnaround {turn:.1f} s against "
        f"first-fit's {first_fit.mean_turnaround:.1f} s and tree's "
        f"{tree.mean_turnaround:.1f} s (goal: no worse than either)",
    ]


def _pilot_line(name: str, config: SimConfig, pilots: SimResult, ours: SimResult) -> str:
    """Two lines on the pilots of one row: how many, how long they queued, what they held,
    and where their idle node-hours went."""
    records = pilots.pilots
    queued = sorted(p.start - p.submit for p in records)
    edges = sorted([(p.start, 1) for p in records] + [(p.end, -1) for p in records])
    alive = most = 0
    for _, step in edges:
        alive += step
        most = max(most, alive)
    trial_hours = pilots.node_hours * pilots.busy_fraction
    rules = ("fixed" if config.pilot_sizing == "fixed" else "sized to the ready trials") + (
        f", {config.pilot_fit} fit" + (", shrinking" if config.pilot_shrink else ""))
    idle = ", ".join(f"{cause} {hours:.0f}" for cause, hours in pilots.idle_node_hours)
    return (f"{name}: pilots of at most {config.pilot_nodes} nodes ({rules}), "
            f"{config.pilot_time / 3600:g} h, at most {config.max_pilots}, idle timeout "
            f"{config.idle_timeout:g} s: {len(records)} ran, at most {most} at once, queued "
            f"median {queued[len(queued) // 2]:.0f} s; held {pilots.node_hours:.0f} node-h for "
            f"{trial_hours:.0f} of trials ({pilots.node_hours / trial_hours:.2f} x); turnaround "
            f"{pilots.mean_turnaround / ours.mean_turnaround:.3f} x hpsearch's\n"
            f"  idle node-h by cause: {idle}")


if __name__ == "__main__":
    sys.exit(main())

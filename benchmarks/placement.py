"""Placement of trials on a fat tree: Slurm first-fit, Slurm tree best-fit, hpsearch, pilots.

Runs the four policies of `hpsearch.placement.sim.simulate` on one seeded workload (the same
background jobs and trial stream) and prints, side by side: the fraction of multi-node trials
that span leaves, mean and p95 wait (ready to start), mean and p95 turnaround (wait + modeled
run time), the modeled all-reduce time per step of multi-node trials, utilization, and the
node-hours the search held with the fraction of them busy running trials (below 1 only for
pilots, which hold nodes between trials); then wait against first-fit's and, for pilots, the
pilots themselves.

Goal: at most 5% of multi-node trials span leaves under hpsearch, with mean wait at most
1.10 x first-fit's. docs/placement.md describes the model.

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
        results, seconds = {}, {}
        for policy in POLICIES:
            began = time.perf_counter()
            results[policy] = simulate(policy, config)
            seconds[policy] = time.perf_counter() - began
    except ValueError as error:
        print(f"placement.py: {error}", file=sys.stderr)
        return 2

    print(f"{config.nodes} nodes in {config.leaves} leaves, uplinks {config.oversubscription:g}:1, "
          f"{config.trials} trials ({config.parallel} in flight), seed {config.seed}, "
          f"max_wait {config.max_wait:g} s, S {config.gradient_bytes / 1e6:g} MB, "
          f"B {config.link_bandwidth / 1e9:g} Gb/s")
    first_fit, ours = results["first-fit"], results["hpsearch"]
    header = (f"{'policy':<10} {'spanning':>9} {'mean wait':>10} {'p95 wait':>9} "
              f"{'mean turn':>10} {'p95 turn':>9} {'step ms':>8} {'util':>6} {'node-h':>7} "
              f"{'busy':>6} {'wait/ff':>8} {'sim s':>6}")
    print(header)
    print("-" * len(header))
    for policy, r in results.items():
        wait_ratio = r.mean_wait / first_fit.mean_wait if first_fit.mean_wait else float("nan")
        print(f"{policy:<10} {r.spanning_fraction:>8.1%} {r.mean_wait:>9.1f}s {r.p95_wait:>8.1f}s "
              f"{r.mean_turnaround:>9.0f}s {r.p95_turnaround:>8.0f}s "
              f"{r.mean_step_time * 1e3:>8.2f} {r.utilization:>6.1%} {r.node_hours:>7.0f} "
              f"{r.busy_fraction:>6.1%} {wait_ratio:>7.2f}x {seconds[policy]:>6.2f}")
    print(_pilot_line(config, results["pilot"], ours))
    span_ok = ours.spanning_fraction <= SPAN_GOAL
    wait_ok = ours.mean_wait <= WAIT_GOAL * first_fit.mean_wait
    print(f"{'ok' if span_ok else 'MISS'}: hpsearch spans leaves for {ours.spanning_fraction:.1%} "
          f"of multi-node trials (goal <= {SPAN_GOAL:.0%})")
    print(f"{'ok' if wait_ok else 'MISS'}: hpsearch mean wait {ours.mean_wait:.1f} s = "
          f"{ours.mean_wait / first_fit.mean_wait if first_fit.mean_wait else float('nan'):.2f} x "
          f"first-fit's {first_fit.mean_wait:.1f} s (goal <= {WAIT_GOAL:.2f} x)")
    return 0


def _pilot_line(config: SimConfig, pilots: SimResult, ours: SimResult) -> str:
    """One line on the pilots: how many, how long they queued, what they held."""
    records = pilots.pilots
    queued = sorted(p.start - p.submit for p in records)
    edges = sorted([(p.start, 1) for p in records] + [(p.end, -1) for p in records])
    alive = most = 0
    for _, step in edges:
        alive += step
        most = max(most, alive)
    trial_hours = pilots.node_hours * pilots.busy_fraction
    return (f"pilots of {config.pilot_nodes} nodes, {config.pilot_time / 3600:g} h, at most "
            f"{config.max_pilots}, idle timeout {config.idle_timeout:g} s: {len(records)} ran, "
            f"at most {most} at once, queued median {queued[len(queued) // 2]:.0f} s; "
            f"held {pilots.node_hours:.0f} node-h for {trial_hours:.0f} of trials "
            f"({pilots.node_hours / trial_hours:.2f} x); turnaround "
            f"{pilots.mean_turnaround / ours.mean_turnaround:.3f} x hpsearch's")


if __name__ == "__main__":
    sys.exit(main())

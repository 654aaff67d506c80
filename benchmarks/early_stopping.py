"""Early stopping: the resource each pruner saves, and whether it still finds the best value.

Each (problem, method, seed) is one hpsearch search run as `hpsearch submit` runs it in the
foreground (benchmarks/_bench_run.py: the real driver, SQLite store and local executor), in a
temporary runs dir. Problems (benchmarks/_es_problems.py): MF-Hartmann learning curves from
mf-prior-bench (mfh6, mfh3), and the real digits training of examples/digits_ddp/train.py on
the CPU. Methods: no pruning; median (stop mode); ASHA in stop mode (Optuna's successive
halving) and in promotion mode; Hyperband in stop mode (Optuna's) and in promotion mode (eta 3,
min_resource 1 step, max_resource a full trial). Every method of a seed gets the same sampler
and seed (random by default: the same configurations, in the same order, for every method).

Per method, over the seeds (median and interquartile range): the total resource (steps run by
all trials, hpsearch's budget accounting from the store; benchmarks/_es_measure.py), its
ratio to no pruning's on the same seed, the trial processes' node-seconds against no
pruning's (process starts included), the resource spent until a full-fidelity value within
the target was reported, how many seeds reached the target, the best full-fidelity value,
the segments (attempts) started and the search's wall time. Target of a seed: no pruning's
best value on that seed, within the problem's tolerance (--tol-mf, --tol-digits).

The driver reads running trials' reports every INGEST_INTERVAL (1 s in hpsearch); a step here
lasts only --step-seconds, so the benchmark scales that interval down with it
(--read-interval, default 0.1 s) in its own process, and reads only at that interval
(HPSEARCH_INOTIFY=off, as on a cluster's shared filesystem): a stopped trial then overruns
its decision by about as many steps as it would on a real cluster, where an epoch lasts
minutes.

Goal: ASHA reaches the same best value with at least 3x less total resource than no pruning,
on each problem: one `ok:`/`MISS:` line per (problem, ASHA mode).

    python benchmarks/early_stopping.py                  # mfh6 (5 seeds) and digits (3 seeds)
    python benchmarks/early_stopping.py --quick          # smoke run, well under a minute
    python benchmarks/early_stopping.py --problems mfh3 mfh6 --seeds 10
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout
sys.path.insert(0, str(HERE))

import _bench_run as run  # noqa: E402
import _es_measure as measure  # noqa: E402
import _es_problems as problems  # noqa: E402
import _sq_stats as st  # noqa: E402

GOAL_FACTOR = 3.0
GOAL_METHODS = ("asha", "asha-promo")
PROBLEMS = ("mfh6", "mfh3", "digits")


@dataclass
class Outcome:
    job: problems.Job
    search: measure.Search


def run_search(job: problems.Job) -> Outcome:
    p = job.problem
    exp_dir, seconds = run.drive(problems.spec_dict(job, run.site_packages()), job.runs_dir)
    return Outcome(job, measure.read(exp_dir, p.metric, p.steps, p.direction == "maximize",
                                     seconds))


def _init_worker(read_interval: float) -> None:
    """Scale the driver's read interval with the benchmark's short steps (see above), and
    read only at that interval (HPSEARCH_INOTIFY=off), as on a cluster's shared filesystem:
    on a local one the driver would read each report as it is written
    (benchmarks/stop_latency.py measures that)."""
    import hpsearch.driver.loop

    hpsearch.driver.loop.INGEST_INTERVAL = read_interval
    os.environ["HPSEARCH_INOTIFY"] = "off"


# -- summary ---------------------------------------------------------------------------------
@dataclass
class Cell:
    """One (problem, method) row: per seed, in seed order."""

    resource: list[float]
    ratio: list[float]          # resource / no pruning's on the same seed
    node_ratio: list[float]     # node-seconds / no pruning's on the same seed
    to_target: list[float]      # inf: never reached
    best: list[float]
    segments: list[float]
    seconds: list[float]
    states: dict[str, int]


def target_of(none: measure.Search, tolerance: float) -> float:
    best = none.best()
    return best - tolerance if none.maximize else best + tolerance


def summarize(outcomes: list[Outcome], tolerances: dict[str, float]
              ) -> dict[tuple[str, str], Cell]:
    by_key = {(o.job.problem.name, o.job.method, o.job.seed): o.search for o in outcomes}
    cells: dict[tuple[str, str], Cell] = {}
    for (name, method, seed), search in sorted(by_key.items()):
        none = by_key[(name, "none", seed)]
        cell = cells.setdefault((name, method), Cell([], [], [], [], [], [], [], {}))
        cell.resource.append(search.resource)
        cell.ratio.append(search.resource / none.resource)
        cell.node_ratio.append(search.node_seconds / none.node_seconds)
        cell.to_target.append(search.resource_to(target_of(none, tolerances[name])))
        cell.best.append(search.best())
        cell.segments.append(search.segments)
        cell.seconds.append(search.seconds)
        for state, count in search.states.items():
            cell.states[state] = cell.states.get(state, 0) + count
    return cells


def _spread(values: list[float], fmt) -> str:
    """median [q25, q75] of values (nan left out; a censored quantile prints as >cap)."""
    kept = [v for v in values if not math.isnan(v)]
    if not kept:
        return "-"
    return (f"{fmt(st.median(kept))} [{fmt(st.quantile(kept, 0.25))}, "
            f"{fmt(st.quantile(kept, 0.75))}]")


def table(names: list[str], methods: list[str], cells: dict[tuple[str, str], Cell],
          caps: dict[str, int]) -> list[str]:
    head = (f"{'problem':<7} {'method':<22} {'resource med [IQR]':>20} {'/none':>17} "
            f"{'node-s /none':>17} {'to target med [IQR]':>20} {'reached':>7} "
            f"{'best med [IQR]':>28} {'segments':>8} {'s/search':>8}  trial states")
    lines = [head, "-" * len(head)]
    for name in names:
        for method in methods:
            c = cells[(name, method)]
            reached = sum(1 for v in c.to_target if not math.isinf(v))
            states = ", ".join(f"{n} {s}" for s, n in sorted(c.states.items()))
            lines.append(
                f"{name:<7} {problems.METHOD_TEXT[method]:<22} "
                f"{_spread(c.resource, lambda v: f'{v:.0f}'):>20} "
                f"{_spread(c.ratio, lambda v: f'{v:.2f}'):>17} "
                f"{_spread(c.node_ratio, lambda v: f'{v:.2f}'):>17} "
                f"{_spread(c.to_target, lambda v: st.fmt_evals(v, caps[name])):>20} "
                f"{reached:>3}/{len(c.to_target):<3} "
                f"{_spread(c.best, lambda v: f'{v:.4f}'):>28} "
                f"{statistics.median(c.segments):>8.0f} {statistics.median(c.seconds):>8.1f}"
                f"  {states}")
    return lines


def goal_lines(names: list[str], cells: dict[tuple[str, str], Cell]) -> list[str]:
    """ok when ASHA reached no pruning's best value (within the tolerance) on more than half
    of the seeds and its median resource ratio to no pruning is at most 1/3."""
    lines = []
    for name in names:
        for method in GOAL_METHODS:
            text = (f"{problems.METHOD_TEXT[method]} reaches the same best value with at least "
                    f"{GOAL_FACTOR:g}x less total resource than no pruning on {name}")
            if (name, method) not in cells:
                lines.append(f"MISS: {text} (not measured: run it with --methods {method})")
                continue
            c = cells[(name, method)]
            reached = sum(1 for v in c.to_target if not math.isinf(v))
            ratio = st.median(c.ratio)
            ok = reached * 2 > len(c.to_target) and ratio * GOAL_FACTOR <= 1
            lines.append(f"{'ok' if ok else 'MISS'}: {text} (reached on {reached}/"
                         f"{len(c.to_target)} seeds; median resource {ratio:.2f} x no pruning's"
                         f" = {1 / ratio:.1f}x less; goal >= {GOAL_FACTOR:g}x)")
    return lines


# -- command line ----------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", nargs="+", choices=PROBLEMS, default=["mfh6", "digits"])
    parser.add_argument("--methods", nargs="+", choices=problems.METHODS,
                        default=list(problems.METHODS),
                        help="default all; none is always run (it sets the target)")
    parser.add_argument("--seeds", type=int, default=5, help="seeds of the MF problems (5)")
    parser.add_argument("--digits-seeds", type=int, default=3, help="seeds of digits (3)")
    parser.add_argument("--sampler", choices=("random", "tpe"), default="random")
    parser.add_argument("--mf-trials", type=int, default=27, help="trials per MF search (27)")
    parser.add_argument("--mf-steps", type=int, default=27, help="steps of a full MF trial (27)")
    parser.add_argument("--digits-trials", type=int, default=12,
                        help="trials per digits search (12)")
    parser.add_argument("--digits-epochs", type=int, default=27,
                        help="epochs of a full digits trial (27)")
    parser.add_argument("--step-seconds", type=float, default=0.1,
                        help="each step (MF) or epoch (digits: --epoch-sleep) lasts at least "
                             "this long (0.1)")
    parser.add_argument("--read-interval", type=float, default=0.1,
                        help="the driver's read interval in this benchmark (hpsearch: 1 s)")
    parser.add_argument("--tol-mf", type=float, default=0.05,
                        help="MF target: no pruning's best + this (0.05)")
    parser.add_argument("--tol-digits", type=float, default=0.01,
                        help="digits target: no pruning's best val_acc - this (0.01)")
    parser.add_argument("--parallel", type=int, default=2, help="trials in flight a search (2)")
    parser.add_argument("--cold", action="store_true",
                        help="digits trials start cold (default: executor.warm, every "
                             "method alike)")
    parser.add_argument("--jobs", type=int, default=2, help="searches at once (2)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: mfh3 only, 1 seed, 9 trials of 9 steps, 0.02 s steps")
    parser.add_argument("--keep", action="store_true", help="keep the runs dir and say where")
    parser.add_argument("--dir", type=Path, default=None,
                        help="make the runs dir under this folder (default: the system temp dir)")
    given = {a.split("=")[0] for a in (argv if argv is not None else sys.argv[1:])}
    args = parser.parse_args(argv)
    if args.quick:
        quick = {"--problems": ["mfh3"], "--seeds": 1, "--digits-seeds": 1,
                 "--mf-trials": 9, "--mf-steps": 9, "--digits-trials": 4, "--digits-epochs": 3,
                 "--step-seconds": 0.02, "--read-interval": 0.05}
        for flag, value in quick.items():
            if flag not in given:
                setattr(args, flag[2:].replace("-", "_"), value)
    if min(args.seeds, args.digits_seeds, args.mf_trials, args.digits_trials, args.parallel,
           args.jobs) < 1 or min(args.mf_steps, args.digits_epochs) < 2:
        parser.error("seeds, trials, --parallel and --jobs must be >= 1, steps >= 2")
    args.methods = ["none"] + [m for m in args.methods if m != "none"]
    if any(p != "digits" for p in args.problems) and problems.generators_file() is None:
        parser.error("mfh3 and mfh6 need mf-prior-bench's MF-Hartmann generator: "
                     "pip install --no-deps mf-prior-bench==1.10.0 (its own pins, numpy < 2, "
                     "do not fit this environment; the generator needs numpy only), "
                     "or run --problems digits")
    return args


def make_jobs(args: argparse.Namespace, runs_dir: Path) -> list[problems.Job]:
    made = {
        "digits": problems.Problem("digits", args.digits_epochs, args.digits_trials, "val_acc",
                                   "maximize", args.tol_digits, args.step_seconds)}
    for name in ("mfh3", "mfh6"):
        made[name] = problems.Problem(name, args.mf_steps, args.mf_trials, "y", "minimize",
                                      args.tol_mf, args.step_seconds)
    seeds = {name: args.digits_seeds if name == "digits" else args.seeds
             for name in args.problems}
    return [problems.Job(made[name], method, seed, args.sampler, args.parallel, runs_dir,
                         warm=not args.cold)
            for seed in range(1, max(seeds.values()) + 1) for name in args.problems
            if seed <= seeds[name] for method in args.methods]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    runs_dir = Path(tempfile.mkdtemp(prefix="hpsearch-early-stopping-", dir=args.dir))
    jobs = make_jobs(args, runs_dir)
    runtime = tempfile.mkdtemp(prefix="hw", dir="/tmp")  # the warm server's socket, ours only
    os.environ["XDG_RUNTIME_DIR"] = runtime
    try:
        return _measure(args, jobs, runs_dir)
    finally:
        subprocess.run(["pkill", "-f", "--", f"--socket {runtime}/"], check=False)


def _measure(args: argparse.Namespace, jobs: list, runs_dir: Path) -> int:
    import optuna

    print(f"python {platform.python_version()}, optuna {optuna.__version__}, "
          f"{os.cpu_count()} CPUs ({platform.machine()}); sampler {args.sampler}, "
          f"parallel {args.parallel}, {args.jobs} searches at once, steps of "
          f">= {args.step_seconds:g} s, driver read interval {args.read_interval:g} s, "
          f"digits {'cold' if args.cold else 'warm (executor.warm)'}")
    for p in dict.fromkeys(j.problem for j in jobs):
        seeds = len({j.seed for j in jobs if j.problem == p})
        print(f"  {p.name}: {p.trials} trials of {p.steps} steps, {seeds} seeds, "
              f"{p.direction} {p.metric}, target = no pruning's best "
              f"{'-' if p.direction == 'maximize' else '+'} {p.tolerance:g}")
    outcomes, wall = run.run_all(run_search, jobs, args.jobs, _init_worker,
                                 (args.read_interval,), runs_dir, args.keep)

    tolerances = {p.name: p.tolerance for p in {j.problem for j in jobs}}
    cells = summarize(outcomes, tolerances)
    caps = {p.name: p.trials * p.steps for p in {j.problem for j in jobs}}
    print("\nresource: steps run by all trials (epochs for digits); /none: ratio to no "
          "pruning's on the same seed; node-s: the trial processes' run time, starts "
          "included; to target: resource until a full-fidelity value within the target; "
          "best: best full-fidelity value; medians [IQR] over seeds; trial states summed over "
          "seeds\n")
    for line in table(list(args.problems), args.methods, cells, caps):
        print(line)
    print(f"\n{len(outcomes)} searches in {wall:.0f} s\n")
    for line in goal_lines(list(args.problems), cells):
        print(line)
    return 0  # a benchmark: the verdict is for people, not for CI


if __name__ == "__main__":
    sys.exit(main())

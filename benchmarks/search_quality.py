"""Search quality of hpsearch's samplers: evaluations to reach a target regret, against random.

Each (function, method, seed) is one hpsearch search, run as `hpsearch submit` runs it in the
foreground (hpsearch.driver.session: the real driver, SQLite store and local executor) in a temporary
runs dir: `--trials` trials, `--parallel` in flight, each trial a
process (`python -S benchmarks/_sq_trial.py FUNCTION {x0} {x1} ...`) that evaluates the test function at its
parameters x0, x1, ... and prints `@hpsearch result y=<value>`. Functions: Branin (2-d),
Hartmann6 (6-d) and four BBOB functions from ioh (benchmarks/_objectives.py says where each
comes from). Methods: the search.strategy values random, tpe, gp, cmaes, qmc; seed s of every
method is the spec's search.seed = s.

Target per function: random's final regret (its best regret after all its trials) on its
upper-median seed, the (n//2 + 1)-th best of the n seeds, times `--target-fraction` (default 1):
"what random reaches with the whole budget in more than half of its runs", so random's own
median is at most --trials. For each (function, method) the table gives the evaluations each
seed needed to reach it: their median and interquartile range (a seed that never reached it
counts as more than --trials, and a median or quartile that falls on such a seed prints as
>T), how many seeds reached it, the ratio of the median to random's (>x when the method's
median is censored: at least T / random's), the median final regret, and the median wall time
of one search. Several searches run at once (`--jobs`, default 2), each in its own process.

Goal: TPE reaches the Hartmann6 target with at least 2x fewer evaluations than random.

    python benchmarks/search_quality.py                 # 6 functions x 5 methods x 10 seeds x 60 trials
    python benchmarks/search_quality.py --quick         # smoke run: 2 functions, 2 seeds, 12 trials
    python benchmarks/search_quality.py --seeds 20 --trials 100 --functions hartmann6 branin
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")  # GP's torch: one thread per concurrent search

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout
sys.path.insert(0, str(HERE))

import _bench_run as run  # noqa: E402
import _objectives as objectives  # noqa: E402
import _sq_stats as st  # noqa: E402

from hpsearch.store.reader import Reader  # noqa: E402
from hpsearch.store.rows import COMPLETED  # noqa: E402
from hpsearch.store.runs import STORE_FILE  # noqa: E402

METHODS = ("random", "tpe", "gp", "cmaes", "qmc")
TRIAL_SCRIPT = HERE / "_sq_trial.py"
GOAL_FUNCTION, GOAL_METHOD, GOAL_FACTOR = "hartmann6", "tpe", 2.0


@dataclass(frozen=True)
class Job:
    function: str
    method: str
    seed: int
    trials: int
    parallel: int
    runs_dir: Path


@dataclass
class RunResult:
    job: Job
    values: list[float]  # y of each trial in trial-id (ask) order; inf for a trial with none
    seconds: float       # wall time of the search, driver start to return


def spec_dict(job: Job, fn: objectives.Function, site_packages: str) -> dict:
    """The experiment spec of one search, as YAML would load it."""
    space = {f"x{i}": {"type": "float", "low": lo, "high": hi}
             for i, (lo, hi) in enumerate(zip(fn.low, fn.high))}
    return {
        "name": f"{job.function}-{job.method}-s{job.seed}",
        "command": f"exec {{python}} -S {TRIAL_SCRIPT} {job.function} "
                   + " ".join(f"{{{name}}}" for name in space),
        "env": {"PYTHONPATH": site_packages},  # -S skips site: ioh comes from here
        "search": {"strategy": job.method, "trials": job.trials, "parallel": job.parallel,
                   "seed": job.seed, "space": space},
        "objective": {"metric": "y", "direction": "minimize"},
        "executor": {"type": "local"},
    }


def run_search(job: Job) -> RunResult:
    """One search as `hpsearch submit` runs it in the foreground: session.new_experiment
    validates the spec, session.drive creates the store and runs the real driver with the
    local executor to the end."""
    fn = objectives.describe(job.function)
    exp_dir, seconds = run.drive(spec_dict(job, fn, run.site_packages()), job.runs_dir)
    store = Reader(exp_dir / STORE_FILE)
    rows = sorted(store.trials(), key=lambda t: t.id)
    store.close()
    values = [t.objective_values[0] if t.state == COMPLETED and t.objective_values
              else float("inf") for t in rows]
    return RunResult(job, values, seconds)


def _preload(methods: list[str]) -> None:
    """Import what the methods' samplers import on first use, once per worker process (not in
    the parent: torch is not imported before a fork), so no search's time includes it."""
    if "gp" in methods:
        import optuna.samplers._gp.sampler  # noqa: F401  (torch)
    if "qmc" in methods:
        import scipy.stats.qmc  # noqa: F401
    if "cmaes" in methods:
        import cmaes  # noqa: F401


@dataclass
class Cell:
    """The numbers of one (function, method) row."""

    evals: list[float]   # per seed: evaluations to the target (inf: never reached)
    final: list[float]   # per seed: final regret
    seconds: list[float]
    failed: int          # trials without a value, over all seeds


def summarize(results: list[RunResult], fraction: float
              ) -> tuple[dict[str, float], dict[tuple[str, str], Cell]]:
    """Targets per function and the cells per (function, method)."""
    regrets: dict[tuple[str, str], list[tuple[list[float], float, int]]] = {}
    for res in results:
        f_opt = objectives.describe(res.job.function).f_opt
        curve = st.best_so_far([v - f_opt for v in res.values])
        failed = sum(1 for v in res.values if v == float("inf"))
        regrets.setdefault((res.job.function, res.job.method), []).append(
            (curve, res.seconds, failed))
    targets = {fn: fraction * st.upper_median([c[-1] for c, _, _ in runs_])
               for (fn, method), runs_ in regrets.items() if method == "random"}
    cells = {key: Cell([st.evals_to_target(c, targets[key[0]]) for c, _, _ in runs_],
                       [c[-1] for c, _, _ in runs_], [s for _, s, _ in runs_],
                       sum(f for _, _, f in runs_))
             for key, runs_ in regrets.items()}
    return targets, cells


def table(functions: list[str], methods: list[str], targets: dict[str, float],
          cells: dict[tuple[str, str], Cell], trials: int) -> list[str]:
    head = (f"{'function':<25} {'method':<7} {'target':>8} {'evals med':>9} {'IQR':>12} "
            f"{'reached':>7} {'/random':>7} {'final regret med':>16} {'s/search':>8}")
    lines = [head, "-" * len(head)]
    for fn in functions:
        random_median = st.median(cells[(fn, "random")].evals)
        for method in methods:
            cell = cells[(fn, method)]
            med = st.median(cell.evals)
            iqr = (f"[{st.fmt_evals(st.quantile(cell.evals, 0.25), trials)}, "
                   f"{st.fmt_evals(st.quantile(cell.evals, 0.75), trials)}]")
            reached = sum(1 for e in cell.evals if e != float("inf"))
            lines.append(
                f"{fn:<25} {method:<7} {st.fmt_regret(targets[fn]):>8} "
                f"{st.fmt_evals(med, trials):>9} {iqr:>12} {reached:>3}/{len(cell.evals):<3} "
                f"{st.ratio_text(med, random_median, trials):>7} "
                f"{st.fmt_regret(st.median(cell.final)):>16} "
                f"{statistics.median(cell.seconds):>8.1f}"
                + (f"  ({cell.failed} trials failed)" if cell.failed else ""))
    return lines


def goal_line(cells: dict[tuple[str, str], Cell], trials: int) -> str:
    text = (f"{GOAL_METHOD.upper()} reaches the {GOAL_FUNCTION.capitalize()} target with at "
            f"least {GOAL_FACTOR:g}x fewer evaluations than random")
    if (GOAL_FUNCTION, GOAL_METHOD) not in cells or (GOAL_FUNCTION, "random") not in cells:
        return f"MISS: {text} (not measured: run it with {GOAL_FUNCTION} and {GOAL_METHOD})"
    method = st.median(cells[(GOAL_FUNCTION, GOAL_METHOD)].evals)
    random = st.median(cells[(GOAL_FUNCTION, "random")].evals)
    ok = not (method == float("inf") or random == float("inf")) and \
        method * GOAL_FACTOR <= random
    return (f"{'ok' if ok else 'MISS'}: {text} (median {st.fmt_evals(method, trials)} "
            f"evaluations against {st.fmt_evals(random, trials)}, ratio "
            f"{st.ratio_text(method, random, trials)}; goal <= {1 / GOAL_FACTOR:g})")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=10, help="seeds per method (default 10)")
    parser.add_argument("--trials", type=int, default=60,
                        help="trials per search (default 60)")
    parser.add_argument("--parallel", type=int, default=1,
                        help="trials in flight in each search (default 1)")
    parser.add_argument("--jobs", type=int, default=2,
                        help="searches run at once, each in its own process (default 2)")
    parser.add_argument("--functions", nargs="+", choices=objectives.NAMES,
                        default=list(objectives.NAMES), metavar="F",
                        help=f"test functions (default all: {' '.join(objectives.NAMES)})")
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS),
                        help="samplers (default all; random is always run: it sets the target)")
    parser.add_argument("--target-fraction", type=float, default=1.0,
                        help="target = this x random's upper-median final regret (default 1)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: branin and hartmann6, 2 seeds, 12 trials "
                             "(explicit --seeds/--trials/--functions still apply)")
    parser.add_argument("--keep", action="store_true", help="keep the runs dir and say where")
    parser.add_argument("--dir", type=Path, default=None,
                        help="make the runs dir under this folder (default: the system temp dir)")
    given = set(a.split("=")[0] for a in (argv if argv is not None else sys.argv[1:]))
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds = args.seeds if "--seeds" in given else 2
        args.trials = args.trials if "--trials" in given else 12
        if "--functions" not in given:
            args.functions = ["branin", "hartmann6"]
    if min(args.seeds, args.trials, args.parallel, args.jobs) < 1 or args.target_fraction <= 0:
        parser.error("--seeds, --trials, --parallel and --jobs must be >= 1, "
                     "--target-fraction > 0")
    args.methods = ["random"] + [m for m in args.methods if m != "random"]
    bbob = [f for f in args.functions if f in objectives.BBOB]
    if bbob and importlib.util.find_spec("ioh") is None:
        parser.error(f"{', '.join(bbob)} need the package ioh, which is not installed here: "
                     "pip install -e '.[bench]' (or leave them out with --functions)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import optuna

    print(f"python {platform.python_version()}, optuna {optuna.__version__}, "
          f"{os.cpu_count()} CPUs ({platform.machine()}); {len(args.functions)} functions x "
          f"{len(args.methods)} methods x {args.seeds} seeds x {args.trials} trials, "
          f"parallel {args.parallel}, {args.jobs} searches at once")
    for name in args.functions:
        fn = objectives.describe(name)
        print(f"  {name}: {fn.dim}-d, f_opt {fn.f_opt:g}, {fn.source}")
    runs_dir = Path(tempfile.mkdtemp(prefix="hpsearch-search-quality-", dir=args.dir))
    jobs = [Job(fn, method, seed, args.trials, args.parallel, runs_dir)
            for seed in range(1, args.seeds + 1) for fn in args.functions
            for method in args.methods]
    results, wall = run.run_all(run_search, jobs, args.jobs, _preload, (args.methods,),
                                runs_dir, args.keep)

    targets, cells = summarize(results, args.target_fraction)
    print(f"\ntarget = {args.target_fraction:g} x random's upper-median final regret; evals: "
          f"evaluations to reach it, median and IQR over {args.seeds} seeds "
          f"(>{args.trials}: not reached in {args.trials} trials)\n")
    for line in table(args.functions, args.methods, targets, cells, args.trials):
        print(line)
    print(f"\n{len(results)} searches, {len(results) * args.trials} trials in {wall:.0f} s\n")
    print(goal_line(cells, args.trials))
    return 0  # a benchmark: the verdict is for people, not for CI


if __name__ == "__main__":
    sys.exit(main())

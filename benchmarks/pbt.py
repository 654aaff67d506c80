"""Population-based training against random search, ASHA and Ray Tune at the same step
budget (issue 41), on two problems, every row from one run:

    python benchmarks/pbt.py                       # toy seeds 0-4, digits seeds 0-2
    python benchmarks/pbt.py --seeds 10 --digits-seeds 5
    python benchmarks/pbt.py --problems toy --no-ray --seeds 1 --steps 8   # a minute

The problems (benchmarks/_pbt_problems.py): the PBT paper's toy (Jaderberg et al. 2017,
section 4.1; examples/pbt_toy/): maximise Q(theta) = 1.2 - (theta0^2 + theta1^2) by
gradient steps on the surrogate Q(theta | h) = 1.2 - (h0 theta0^2 + h1 theta1^2), h in
[0, 1]^2; and the digits example (examples/digits_ddp/train.py --pbt): an MLP trained by
SGD for `--epochs`, its lr in [1e-4, 0.1] the one hyperparameter, val_acc the score.
Every hpsearch row runs the real driver, SQLite store and local executor, one process per
segment (digits: forked from a warm server), 2 slots. With a population of n, every row
gets n x steps steps (epochs):

- `pbt`, `pb2`: strategy pbt / pb2, the population drawn at random, `perturbation_interval`
  steps per segment, `max_resource` steps per member;
- `random`: strategy random with n trials, each the same steps with h fixed;
- `asha`: random search with ASHA promoting (pause and resume) over the rungs steps/8 ...
  steps, reduction factor 2, with as many trials as that budget buys on average
  (_pbt_problems.py says how; the steps each row really trained are printed);
- toy only, `pbt, paper start` and `fixed, paper start`: the paper's figure 2, a population
  of 2 started at h = (1, 0) and (0, 1) (search.enqueue), with and without PBT: without it
  neither member can move both coordinates and Q never passes 1.2 - 0.81 = 0.39;
- `ray pbt`: Ray Tune's PopulationBasedTraining with the same population, interval,
  quantile, resample probability and factors, 2 trials at a time, on the same training
  code in Ray's function API (benchmarks/_pbt_ray.py, run by benchmarks/.venv-peers from
  peers-setup.sh; its wall time is Tuner.fit()'s, ray.init not counted). Without that venv
  (or with --no-ray) the rows are left out and a line says so.

It prints, per row, the median best score over the seeds, each seed's best, the median
steps trained and the median wall time, then goal lines on each problem: PBT's best beats
random search's at the same step budget and is no worse than Ray's, in no more wall time
than Ray's (medians), and on the toy PBT from the paper's start passes 0.39.

Each hpsearch search runs in a forked child; one still going after --row-limit seconds
(120) is stopped and counts as no result (-inf in the median, "no end" in its seed's
place). The first run of this table (2026-11-29) had the digits pbt search of seed 1 going
round for 7 minutes: three members each took member 3's checkpoint of epoch 9 ~265
times, while member 3 (paused at epoch 9, tied on progress with the three, the highest
id) never got a slot again.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import platform
import shutil
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
import _pbt_problems as problems  # noqa: E402

PEERS_PYTHON = HERE / ".venv-peers" / "bin" / "python"
PAPER_START = [{"h0": 1.0, "h1": 0.0}, {"h0": 0.0, "h1": 1.0}]


@dataclass(frozen=True)
class Row:
    label: str
    method: str             # pbt, pb2, random, asha, ray
    members: int            # the population, or the budget's members
    enqueue: tuple = ()


def rows_of(problem: str, populations: tuple[int, ...], ray: bool) -> list[Row]:
    rows = []
    for n in populations:
        rows += [Row(f"pbt, population {n}", "pbt", n), Row(f"pb2, population {n}", "pb2", n),
                 Row(f"random, {n} trials", "random", n),
                 Row(f"asha, budget of {n}", "asha", n)]
        rows += [Row(f"ray pbt, population {n}", "ray", n)] if ray else []
    if problem == "toy":
        rows += [Row("pbt, paper start (2)", "pbt", 2, tuple(PAPER_START)),
                 Row("fixed, paper start (2)", "random", 2, tuple(PAPER_START))]
    return rows


def run_ray(problem: problems.Problem, population: int, seed: int) -> tuple[float, int, float]:
    """(best, steps trained, wall seconds of Tuner.fit()) of Ray Tune's PBT, in the peers'
    venv."""
    proc = subprocess.run([str(PEERS_PYTHON), str(HERE / "_pbt_ray.py"), problem.name,
                           str(population), str(problem.steps), str(problem.interval),
                           str(seed), run.site_packages()], capture_output=True, text=True,
                          timeout=900, check=True)
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    return float(found["best"]), int(found["steps"]), float(found["seconds"])


def drive(problem: problems.Problem, spec: dict, runs_dir: Path,
          limit: float) -> tuple[float, int, float]:
    """(best, steps trained, wall seconds) of one hpsearch search, run by a forked child;
    a search still going after `limit` seconds is stopped (SIGTERM to that child) and
    counted as no result (best nan, wall `limit`): a livelocked search must not hold the
    benchmark forever."""
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=lambda: send.send(run.drive(spec, runs_dir)[1]))
    child.start()
    ended = receive.poll(limit)
    wall = receive.recv() if ended else limit
    child.join() if ended else child.terminate()
    exp_dir = runs_dir / spec["name"]
    if not ended:
        child.join(30)
        return math.nan, problems.steps_trained(exp_dir, problem.steps), wall
    return problems.best(exp_dir), problems.steps_trained(exp_dir, problem.steps), wall


def measure(problem: problems.Problem, row: Row, seed: int, name: str, runs_dir: Path,
            limit: float) -> tuple[float, int, float]:
    """(best, steps trained, wall seconds) of one row on one seed."""
    if row.method == "ray":
        return run_ray(problem, row.members, seed)
    return drive(problem, problems.spec(problem, name, row.method, row.members, seed,
                                        list(row.enqueue)), runs_dir, limit)


Results = dict[str, list[tuple[float, int, float]]]


def print_table(name: str, results: Results) -> dict[str, tuple[float, float]]:
    """The rows' table; returns row -> (median best, median wall). A search stopped at
    --row-limit has no best: it counts as the worst (-inf) in the median."""
    medians = {}
    for label, got in results.items():
        bests = [-math.inf if math.isnan(b) else b for b, _, _ in got]
        best, wall = statistics.median(bests), statistics.median(w for *_, w in got)
        medians[label] = (best, wall)
        print(f"| {name} | {label} | {best:.4f} | "
              f"{', '.join('no end' if math.isinf(b) else f'{b:.3f}' for b in bests)} "
              f"| {statistics.median(s for _, s, _ in got):.0f} | {wall:.1f} |", flush=True)
    return medians


def print_goals(name: str, medians: dict[str, tuple[float, float]],
                populations: tuple[int, ...], steps: int) -> None:
    for n in populations:
        (pbt, ours), (rnd, _) = medians[f"pbt, population {n}"], medians[f"random, {n} trials"]
        print(f"{'ok' if pbt > rnd else 'MISS'}: {name}: pbt (population {n}) best {pbt:.4f} "
              f"beats random search's {rnd:.4f} at the same step budget ({n} x {steps})")
        if f"ray pbt, population {n}" not in medians:
            continue
        ray_best, theirs = medians[f"ray pbt, population {n}"]
        print(f"{'ok' if pbt >= ray_best else 'MISS'}: {name}: pbt (population {n}) best "
              f"{pbt:.4f} >= Ray Tune PBT's {ray_best:.4f} at the same step budget")
        print(f"{'ok' if ours <= theirs else 'MISS'}: {name}: pbt (population {n}) wall "
              f"{ours:.1f} s <= Ray Tune PBT's {theirs:.1f} s (Tuner.fit(), ray.init not "
              "counted)")
    if "pbt, paper start (2)" in medians:
        paper, fixed = medians["pbt, paper start (2)"][0], medians["fixed, paper start (2)"][0]
        print(f"{'ok' if paper > 0.39 + 1e-3 else 'MISS'}: {name}: pbt from the paper's start "
              f"{paper:.4f} > 0.39, where fixed h stays ({fixed:.4f})")


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", nargs="+", choices=("toy", "digits"),
                        default=["toy", "digits"])
    parser.add_argument("--seeds", type=int, default=5, help="toy seeds (default 5)")
    parser.add_argument("--steps", type=int, default=40, help="toy max_resource (default 40)")
    parser.add_argument("--interval", type=int, default=4,
                        help="toy perturbation_interval (default 4)")
    parser.add_argument("--digits-seeds", type=int, default=3, help="default 3")
    parser.add_argument("--epochs", type=int, default=16,
                        help="digits max_resource in epochs (default 16)")
    parser.add_argument("--digits-interval", type=int, default=2,
                        help="digits perturbation_interval in epochs (default 2)")
    parser.add_argument("--digits-population", type=int, default=4, help="default 4")
    parser.add_argument("--no-ray", action="store_true", help="leave Ray Tune's rows out")
    parser.add_argument("--row-limit", type=float, default=120, metavar="SECONDS",
                        help="stop an hpsearch search still going after this long and count "
                             "it as no result (default 120)")
    parser.add_argument("--keep", action="store_true", help="keep the runs dir")
    return parser.parse_args(argv)


def setups(args: argparse.Namespace) -> list[tuple[problems.Problem, int, tuple[int, ...]]]:
    """(problem, seeds, populations) of each problem asked for."""
    made = {"toy": (problems.toy(args.steps, args.interval), args.seeds, (2, 4)),
            "digits": (problems.digits(args.epochs, args.digits_interval), args.digits_seeds,
                       (args.digits_population,))}
    return [made[name] for name in args.problems]


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    ray = PEERS_PYTHON.exists() and not args.no_ray
    print(f"# pbt.py: Python {platform.python_version()}, 2 slots; "
          + "; ".join(f"{p.name}: {p.steps} steps a member, interval {p.interval}, seeds "
                      f"0-{seeds - 1}" for p, seeds, _ in setups(args)))
    runs_dir = Path(tempfile.mkdtemp(prefix="hpsearch-pbt-bench-"))
    print("\n| problem | row | median best | best per seed | median steps trained "
          "| median wall s |\n|---|---|---|---|---|---|", flush=True)
    goals, stopped = [], []
    try:
        for problem, seeds, populations in setups(args):
            results: Results = {}
            rows = rows_of(problem.name, populations, ray)
            for seed in range(seeds):
                for i, row in enumerate(rows):
                    results.setdefault(row.label, []).append(
                        measure(problem, row, seed, f"{problem.name}{i}-s{seed}", runs_dir,
                                args.row_limit))
            goals.append((problem, populations, print_table(problem.name, results)))
            stopped += [(problem.name, label, seed, steps) for label, got in results.items()
                        for seed, (best, steps, _) in enumerate(got) if math.isnan(best)]
    finally:
        if args.keep:
            print(f"runs dir kept: {runs_dir}")
        else:
            shutil.rmtree(runs_dir, ignore_errors=True)
    print()
    for problem, populations, found in goals:
        print_goals(problem.name, found, populations, problem.steps)
    for problem, label, seed, steps in stopped:
        print(f"no end: {problem}: {label}, seed {seed}: still going after "
              f"{args.row_limit:.0f} s ({steps} steps trained); stopped, counted as no result")
    if not ray:
        print("not measured: Ray Tune's PopulationBasedTraining ("
              + ("--no-ray" if args.no_ray else f"{PEERS_PYTHON} is missing; "
                 "benchmarks/peers-setup.sh installs the peers there") + ")")
    return 0


if __name__ == "__main__":
    sys.exit(main())

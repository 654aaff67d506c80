"""Population-based training against random search at the same step budget (issue 41).

    python benchmarks/pbt.py                 # populations 2 and 4, seeds 0-4
    python benchmarks/pbt.py --seeds 10      # more seeds

The problem is the PBT paper's toy (Jaderberg et al. 2017, section 4.1; examples/pbt_toy/):
maximise Q(theta) = 1.2 - (theta0^2 + theta1^2) by gradient steps on the surrogate
Q(theta | h) = 1.2 - (h0 theta0^2 + h1 theta1^2), h = (h0, h1) in [0, 1]^2 the
hyperparameters. Every row runs the real driver, SQLite store and local executor, one
process per segment (examples/pbt_toy/train.py), 2 slots:

- `pbt`: strategy pbt, the population drawn at random, `perturbation_interval` steps per
  segment, `max_resource` steps per member;
- `random`: strategy random with as many trials as the population, each run the same
  `max_resource` steps with its h fixed: the same step budget;
- `pbt, paper start` and `fixed, paper start`: the paper's figure 2, a population of 2
  started at h = (1, 0) and (0, 1) (search.enqueue), with and without PBT: without it
  neither member can move both coordinates and Q never passes 1.2 - 0.81 = 0.39.

- `ray pbt`: Ray Tune's PopulationBasedTraining with the same population, interval,
  quantile, resample probability and factors, 2 trials at a time (benchmarks/_pbt_ray.py,
  run by benchmarks/.venv-peers from peers-setup.sh; its wall time is Tuner.fit()'s,
  ray.init not counted). Without that venv the row is left out and a line says so.

It prints, per row, the median best Q over the seeds, the best Q of each seed and the
median wall time, then goal lines: PBT's best no worse than random search's and than Ray's
at the same step budget (medians), in no more wall time than Ray's, and PBT from the
paper's start above 0.39.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout
sys.path.insert(0, str(HERE))

import _bench_run as run  # noqa: E402

from hpsearch.store.reader import Reader  # noqa: E402
from hpsearch.store.runs import STORE_FILE  # noqa: E402

TOY = HERE.parent / "examples" / "pbt_toy" / "train.py"
PEERS_PYTHON = HERE / ".venv-peers" / "bin" / "python"
SPACE = {"h0": {"type": "float", "low": 0.0, "high": 1.0},
         "h1": {"type": "float", "low": 0.0, "high": 1.0}}
PAPER_START = [{"h0": 1.0, "h1": 0.0}, {"h0": 0.0, "h1": 1.0}]


def spec(name: str, strategy: str, population: int, seed: int, steps: int, interval: int,
         enqueue: list | None = None) -> dict:
    search: dict = {"strategy": strategy, "trials": population, "parallel": 2, "seed": seed,
                    "space": SPACE}
    if strategy == "pbt":
        search.update(population=population, perturbation_interval=interval,
                      max_resource=steps)
    if enqueue:
        search["enqueue"] = enqueue
    return {"name": name, "command": f"{sys.executable} {TOY} {steps}", "search": search,
            "objective": {"metric": "Q", "direction": "maximize"},
            "executor": {"type": "local"}}


def best_q(experiment_dir: Path) -> float:
    reader = Reader(experiment_dir / STORE_FILE)
    try:
        return max(t.objective_values[0] for t in reader.trials() if t.objective_values)
    finally:
        reader.close()


ROWS = {  # row -> (strategy, population, paper start)
    "pbt, population 2": ("pbt", 2, False),
    "random, 2 trials": ("random", 2, False),
    "pbt, population 4": ("pbt", 4, False),
    "random, 4 trials": ("random", 4, False),
    "pbt, paper start (2)": ("pbt", 2, True),
    "fixed, paper start (2)": ("random", 2, True),
}


def run_ray(population: int, seed: int, steps: int, interval: int) -> tuple[float, float]:
    """(best Q, wall seconds of Tuner.fit()) of Ray Tune's PBT, in the peers' venv."""
    proc = subprocess.run([str(PEERS_PYTHON), str(HERE / "_pbt_ray.py"), str(population),
                           str(steps), str(interval), str(seed)], capture_output=True,
                          text=True, timeout=900, check=True)
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    return float(found["best"]), float(found["seconds"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=40, help="max_resource (default 40)")
    parser.add_argument("--interval", type=int, default=4,
                        help="perturbation_interval (default 4)")
    parser.add_argument("--keep", action="store_true", help="keep the runs dir")
    args = parser.parse_args(argv)
    print(f"# pbt.py: Python {platform.python_version()}, the toy of the PBT paper, "
          f"{args.steps} steps a member, interval {args.interval}, 2 slots, seeds "
          f"0-{args.seeds - 1}")
    runs_dir = Path(tempfile.mkdtemp(prefix="hpsearch-pbt-bench-"))
    results: dict[str, list[tuple[float, float]]] = {row: [] for row in ROWS}
    try:
        for seed in range(args.seeds):
            for i, (row, (strategy, population, paper)) in enumerate(ROWS.items()):
                name = f"r{i}-s{seed}"
                exp_dir, wall = run.drive(spec(name, strategy, population, seed, args.steps,
                                               args.interval, PAPER_START if paper else None),
                                          runs_dir)
                results[row].append((best_q(exp_dir), wall))
            for n in (2, 4) if PEERS_PYTHON.exists() else ():
                results.setdefault(f"ray pbt, population {n}", []).append(
                    run_ray(n, seed, args.steps, args.interval))
    finally:
        if args.keep:
            print(f"runs dir kept: {runs_dir}")
        else:
            shutil.rmtree(runs_dir, ignore_errors=True)
    print("\n| row | median best Q | best Q per seed | median wall s |\n|---|---|---|---|")
    medians = {}
    for row, got in results.items():
        medians[row] = statistics.median(q for q, _ in got)
        print(f"| {row} | {medians[row]:.4f} | {', '.join(f'{q:.3f}' for q, _ in got)} | "
              f"{statistics.median(w for _, w in got):.1f} |")
    print()
    for n in (2, 4):
        pbt, rnd = medians[f"pbt, population {n}"], medians[f"random, {n} trials"]
        verdict = "ok" if pbt >= rnd else "MISS"
        print(f"{verdict}: pbt (population {n}) best Q {pbt:.4f} >= random search's "
              f"{rnd:.4f} at the same step budget ({n} x {args.steps} steps)")
        if f"ray pbt, population {n}" not in medians:
            continue
        ray_q = medians[f"ray pbt, population {n}"]
        walls = {k: statistics.median(w for _, w in results[k])
                 for k in (f"pbt, population {n}", f"ray pbt, population {n}")}
        ours, theirs = walls.values()
        print(f"{'ok' if pbt >= ray_q else 'MISS'}: pbt (population {n}) best Q {pbt:.4f} >= "
              f"Ray Tune PBT's {ray_q:.4f} at the same step budget")
        print(f"{'ok' if ours <= theirs else 'MISS'}: pbt (population {n}) wall {ours:.1f} s "
              f"<= Ray Tune PBT's {theirs:.1f} s (Tuner.fit(), ray.init not counted)")
    paper = medians["pbt, paper start (2)"]
    print(f"{'ok' if paper > 0.39 + 1e-3 else 'MISS'}: pbt from the paper's start "
          f"{paper:.4f} > 0.39, where fixed h stays "
          f"({medians['fixed, paper start (2)']:.4f})")
    if not PEERS_PYTHON.exists():
        print(f"not measured: Ray Tune's PopulationBasedTraining ({PEERS_PYTHON} is missing; "
              "benchmarks/peers-setup.sh installs the peers there)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

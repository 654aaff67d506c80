"""Scheduling overhead of the driver against the ideal and against a plain Optuna loop.

N trials, each a shell command that sleeps t seconds and reports one metric, run on P slots:
once by hpsearch (the real driver, store and local executor) and once by
`study.optimize(n_jobs=P)` running the same command with subprocess.run. Prints, side by side,
each makespan against the ideal N*t/P and the per-trial overhead (makespan - ideal) * P / N,
then hpsearch's driver bookkeeping per trial (launch + finalize, waiting excluded) around trial
100 and over the last 100 trials, which must stay flat as the store grows.

Goal: hpsearch <= 1.10 x ideal, and no slower than plain Optuna.

    python benchmarks/overhead.py                      # 2,000 trials of 0.05 s on 8 slots
    python benchmarks/overhead.py --trials 300 --keep  # quick run; keep the runs dir
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

import optuna  # noqa: E402

import hpsearch  # noqa: E402
from hpsearch import runs  # noqa: E402
from hpsearch.driver import Driver  # noqa: E402
from hpsearch.ingest import STDOUT_PREFIX  # noqa: E402
from hpsearch.search import make_search  # noqa: E402
from hpsearch.session import make_executor  # noqa: E402
from hpsearch.spec import load_spec  # noqa: E402
from hpsearch.store import rows as r  # noqa: E402
from hpsearch.store.store import STORE_FILE, Store  # noqa: E402

LOW, HIGH = 0.0, 1.0  # the one tuned parameter, x; the trial reports loss = x

SPEC = """\
name: overhead
command: "sleep {sleep}; echo @hpsearch step=0 loss={{x}}"
search:
  strategy: random
  trials: {trials}
  parallel: {parallel}
  seed: {seed}
  space:
    x: {{type: float, low: {low}, high: {high}}}
objective: {{metric: loss, direction: minimize}}
executor: {{type: local}}
"""


def trial_command(sleep: float, x: float) -> str:
    """The command both sides run: what hpsearch renders from SPEC for this x."""
    return f"sleep {sleep:g}; echo @hpsearch step=0 loss={shlex.quote(repr(x))}"


@dataclass
class Outcome:
    makespan: float
    completed: int
    own_cpu: float = 0.0     # CPU seconds of this process (driver, or Optuna and its threads)
    trials_cpu: float = 0.0  # CPU seconds of the trial processes (sh, sleep)


class CpuMeter:
    """CPU used by this process and by its reaped children between start() and stop()."""

    def start(self) -> None:
        self.own = time.process_time()
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.children = usage.ru_utime + usage.ru_stime

    def stop(self, out: Outcome) -> Outcome:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        out.own_cpu = time.process_time() - self.own
        out.trials_cpu = usage.ru_utime + usage.ru_stime - self.children
        return out


def run_hpsearch(args: argparse.Namespace, runs_dir: Path) -> tuple[Outcome, list[float]]:
    """Run the search through the real driver. Returns the outcome and, per trial id, the
    driver's bookkeeping seconds (its launch plus its finalize)."""
    spec_path = runs_dir / "overhead.yaml"
    spec_path.write_text(SPEC.format(sleep=f"{args.sleep:g}", trials=args.trials,
                                     parallel=args.parallel, seed=args.seed, low=LOW, high=HIGH))
    spec = load_spec(spec_path, runs_dir)
    spec = dataclasses.replace(spec, source=spec_path.resolve())
    lock = runs.DriverLock(spec.experiment_dir)
    lock.acquire()
    try:
        cpu = CpuMeter()
        cpu.start()
        began = time.perf_counter()
        store = Store(spec.experiment_dir / STORE_FILE)
        search = make_search(spec)
        store.create_experiment(spec.name, spec_path.read_text(), str(spec_path),
                                str(spec_path.parent), spec.search.strategy,
                                [o.direction for o in spec.objectives], search.total)
        driver = Driver(spec, store, make_executor(spec), search)
        driver.run()
        makespan = time.perf_counter() - began
        completed = store.state_counts().get(r.COMPLETED, 0)
        store.close()
    finally:
        lock.release()
    per_trial = [0.0] * args.trials
    for trial_id, seconds in driver.bookkeeping:
        per_trial[trial_id] += seconds
    return cpu.stop(Outcome(makespan, completed)), per_trial


def run_optuna(args: argparse.Namespace) -> Outcome:
    """The baseline: study.optimize with n_jobs threads, each running the same command."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)

    def objective(trial: optuna.Trial) -> float:
        x = trial.suggest_float("x", LOW, HIGH)
        proc = subprocess.run(["/bin/sh", "-c", trial_command(args.sleep, x)],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True)
        for line in proc.stdout.splitlines():
            if line.startswith(STDOUT_PREFIX):
                pairs = dict(p.partition("=")[::2] for p in line[len(STDOUT_PREFIX):].split())
                return float(pairs["loss"])
        raise RuntimeError(f"trial reported no loss (exit {proc.returncode}): {proc.stderr}")

    cpu = CpuMeter()
    cpu.start()
    began = time.perf_counter()
    study = optuna.create_study(direction="minimize",
                                sampler=optuna.samplers.RandomSampler(seed=args.seed))
    study.optimize(objective, n_trials=args.trials, n_jobs=args.parallel)
    makespan = time.perf_counter() - began
    done = len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)))
    return cpu.stop(Outcome(makespan, done))


def median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000 if values else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=2000, help="N trials (default 2000)")
    parser.add_argument("--parallel", type=int, default=8, help="P slots (default 8)")
    parser.add_argument("--sleep", type=float, default=0.05,
                        help="seconds each trial sleeps (default 0.05)")
    parser.add_argument("--seed", type=int, default=1, help="sampler seed (default 1)")
    parser.add_argument("--keep", action="store_true", help="keep the runs dir and say where")
    args = parser.parse_args(argv)
    if args.trials < 1 or args.parallel < 1 or args.sleep <= 0:
        parser.error("--trials and --parallel must be >= 1 and --sleep > 0")

    ideal = args.trials * args.sleep / args.parallel
    print(f"python {platform.python_version()}, optuna {optuna.__version__}, "
          f"hpsearch {getattr(hpsearch, '__version__', '?')}, {os.cpu_count()} CPUs "
          f"({platform.machine()}, {platform.system()} {platform.release()})")
    print(f"N = {args.trials} trials of `sleep {args.sleep:g}` on P = {args.parallel} slots; "
          f"ideal N*t/P = {ideal:.2f} s")

    runs_dir = Path(tempfile.mkdtemp(prefix="hpsearch-overhead-"))
    try:
        hp, bookkeeping = run_hpsearch(args, runs_dir)
        op = run_optuna(args)
    finally:
        if args.keep:
            print(f"runs dir kept: {runs_dir}")
        else:
            shutil.rmtree(runs_dir, ignore_errors=True)

    print()
    print(f"{'':10} {'completed':>9} {'makespan s':>11} {'ideal s':>8} {'ratio':>6} "
          f"{'overhead ms/trial':>18} {'CPU ms/trial: own':>17} {'trials':>6}")
    for name, out in (("hpsearch", hp), ("optuna", op)):
        overhead = (out.makespan - ideal) * args.parallel / args.trials * 1000
        print(f"{name:10} {out.completed:>9} {out.makespan:>11.2f} {ideal:>8.2f} "
              f"{out.makespan / ideal:>6.3f} {overhead:>18.2f} "
              f"{out.own_cpu / args.trials * 1000:>17.2f} {out.trials_cpu / args.trials * 1000:>6.2f}")

    early = bookkeeping[50:150]
    late = bookkeeping[-100:]
    early_ms, late_ms = median_ms(early), median_ms(late)
    print()
    print("hpsearch driver bookkeeping per trial (launch + finalize, median):")
    print(f"  trials 50-{min(150, args.trials) - 1}: "
          f"{early_ms:7.3f} ms")
    print(f"  trials {args.trials - len(late)}-{args.trials - 1}: {late_ms:7.3f} ms")
    print(f"  late / early: {late_ms / early_ms:.2f}")

    ratio = hp.makespan / ideal
    verdicts = [
        ("hpsearch <= 1.10 x ideal", ratio <= 1.10),
        ("hpsearch no slower than optuna", hp.makespan <= op.makespan),
        ("bookkeeping flat (late/early <= 1.5)", late_ms / early_ms <= 1.5),
        ("every trial completed", hp.completed == op.completed == args.trials),
    ]
    print()
    for text, ok in verdicts:
        print(f"  {'ok  ' if ok else 'MISS'} {text}")
    return 0 if all(ok for _, ok in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())

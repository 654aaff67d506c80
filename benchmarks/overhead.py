"""Scheduling overhead of the driver, against the ideal and against a plain Optuna loop.

N trials, each a shell command that sleeps t seconds and reports one metric, run on P slots:
once by hpsearch (the real driver, store and local executor) and once by
`study.optimize(n_jobs=P)` running the same command through subprocess.run. Prints, side by
side, each makespan against the ideal N*t/P, the per-trial overhead (makespan - ideal) * P / N
and the CPU time per trial, then hpsearch's driver bookkeeping per trial (launch + finalize,
waiting excluded) around trial 100 and over the last 100 trials, which must stay flat as the
store grows.

A third line, the floor, starts the same processes from bare threads (posix_spawn and
waitpid, nothing else): what the processes themselves cost on this machine.

Goal: hpsearch <= 1.05 x ideal, and no slower than plain Optuna.

    python benchmarks/overhead.py                      # 2,000 trials of 0.05 s on 8 slots
    python benchmarks/overhead.py --trials 300 --keep  # a quick run; keep the runs dir
    python benchmarks/overhead.py --repeat 3           # medians of 3 alternating pairs
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
import threading
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

import optuna  # noqa: E402

import hpsearch  # noqa: E402
from hpsearch.driver.session import driver_for, make_executor  # noqa: E402
from hpsearch.ingest.trial_files import STDOUT_PREFIX  # noqa: E402
from hpsearch.preflight import load_spec  # noqa: E402
from hpsearch.search import make_search  # noqa: E402
from hpsearch.store import rows  # noqa: E402
from hpsearch.store.lockfile import DriverLock  # noqa: E402
from hpsearch.store.runs import STORE_FILE  # noqa: E402
from hpsearch.store.store import Store  # noqa: E402

LOW, HIGH = 0.0, 1.0  # the one tuned parameter, x; each trial reports loss = x

SPEC = """\
name: {name}
command: "sleep {sleep}; echo @hpsearch step=0 loss={{x}}"
search:
  strategy: random
  trials: {trials}
  parallel: {parallel}
  seed: {seed}
  space:
    x: {{type: float, low: {low}, high: {high}}}
objective: {{metric: loss, direction: minimize}}
executor: {executor}
"""
LOCAL = "{type: local}"


def trial_command(sleep: float, x: float) -> str:
    """The command the Optuna side runs: what hpsearch renders from SPEC for this x."""
    return f"sleep {sleep:g}; echo @hpsearch step=0 loss={shlex.quote(repr(x))}"


@dataclass
class Outcome:
    makespan: float
    completed: int
    own_cpu: float = 0.0     # CPU seconds of this process: the driver, or Optuna and its threads
    trials_cpu: float = 0.0  # CPU seconds of the trial processes (sh, sleep)


class CpuMeter:
    """CPU used by this process and by its reaped children between start() and stop()."""

    def start(self) -> None:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.own, self.children = time.process_time(), usage.ru_utime + usage.ru_stime

    def stop(self, out: Outcome) -> Outcome:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        out.own_cpu = time.process_time() - self.own
        out.trials_cpu = usage.ru_utime + usage.ru_stime - self.children
        return out


def run_hpsearch(args: argparse.Namespace, runs_dir: Path, name: str = "overhead",
                 on_event=lambda line: None, executor: str = LOCAL,
                 resources: str = "") -> tuple[Outcome, list[float]]:
    """Run the search through the real driver, store and executor (the local one unless
    `executor` says otherwise, as YAML; `resources` is the spec's resources line), as
    `session.drive` builds them. Returns the outcome and, by trial id, the driver's
    bookkeeping seconds (its launch plus its finalize of that trial)."""
    spec_path = runs_dir / f"{name}.yaml"
    spec_path.write_text(SPEC.format(name=name, sleep=f"{args.sleep:g}", trials=args.trials,
                                     parallel=args.parallel, seed=args.seed, low=LOW, high=HIGH,
                                     executor=executor) + resources)
    spec = load_spec(spec_path, runs_dir)
    spec = dataclasses.replace(spec, source=spec_path.resolve())
    lock = DriverLock(spec.experiment_dir)
    lock.acquire()
    try:
        cpu = CpuMeter()
        cpu.start()
        began = time.perf_counter()
        store = Store(spec.experiment_dir / STORE_FILE)
        search = make_search(spec.search, spec.objectives)
        store.create_experiment(spec.name, spec_path.read_text(), str(spec_path),
                                str(spec_path.parent), spec.search.strategy,
                                [o.direction for o in spec.objectives], search.total)
        driver = driver_for(spec, store, make_executor(spec, store), search, on_event)
        driver.run()
        outcome = cpu.stop(Outcome(time.perf_counter() - began, 0))
        outcome.completed = store.state_counts().get(rows.COMPLETED, 0)
        store.close()
    finally:
        lock.release()
    per_trial = [0.0] * args.trials
    for trial_id, seconds in driver.bookkeeping:
        per_trial[trial_id] += seconds
    return outcome, per_trial


def _filesystem(path: Path) -> str:
    """The type of the file system holding path, from /proc/mounts (longest mount prefix)."""
    best, kind = "", "unknown"
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            _, mount, fstype = line.split()[:3]
            if str(path.resolve()).startswith(mount) and len(mount) > len(best):
                best, kind = mount, fstype
    except OSError:
        pass
    return f"{kind} at {best}" if best else kind


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
    outcome = cpu.stop(Outcome(time.perf_counter() - began, 0))
    outcome.completed = len(study.get_trials(deepcopy=False,
                                             states=(optuna.trial.TrialState.COMPLETE,)))
    return outcome


def run_floor(args: argparse.Namespace) -> Outcome:
    """The floor: P threads, each starting the same command (posix_spawn, output to
    /dev/null) and waiting for it, N times in all, with nothing else to do. What the
    trial processes cost on this machine, which no driver can beat."""
    left, lock = [args.trials], threading.Lock()
    devnull = [(os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0)]

    def worker() -> None:
        while True:
            with lock:
                if left[0] == 0:
                    return
                left[0] -= 1
            pid = os.posix_spawn("/bin/sh", ["/bin/sh", "-c", trial_command(args.sleep, 0.5)],
                                 os.environ, file_actions=devnull)
            os.waitpid(pid, 0)

    cpu = CpuMeter()
    cpu.start()
    began = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(args.parallel)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return cpu.stop(Outcome(time.perf_counter() - began, args.trials))


def median_outcome(outcomes: list[Outcome]) -> Outcome:
    """The run with the median makespan (the lower middle one for an even count)."""
    ordered = sorted(outcomes, key=lambda o: o.makespan)
    return ordered[(len(ordered) - 1) // 2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=2000, help="N trials (default 2000)")
    parser.add_argument("--parallel", type=int, default=8, help="P slots (default 8)")
    parser.add_argument("--sleep", type=float, default=0.05,
                        help="seconds each trial sleeps (default 0.05)")
    parser.add_argument("--seed", type=int, default=1, help="sampler seed (default 1)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run the pair this many times, alternating which goes first, and "
                             "report the median run of each side (default 1)")
    parser.add_argument("--keep", action="store_true", help="keep the runs dir and say where")
    parser.add_argument("--dir", type=Path, default=None,
                        help="make the runs dir under this folder (default: the system temp "
                             "dir); trial dirs cost file-system work, so say which it is")
    args = parser.parse_args(argv)
    if args.trials < 1 or args.parallel < 1 or args.sleep <= 0 or args.repeat < 1:
        parser.error("--trials, --parallel and --repeat must be >= 1, --sleep > 0")

    ideal = args.trials * args.sleep / args.parallel
    print(f"python {platform.python_version()}, optuna {optuna.__version__}, "
          f"hpsearch {getattr(hpsearch, '__version__', '?')}, {os.cpu_count()} CPUs "
          f"({platform.machine()}, {platform.system()} {platform.release()})")
    print(f"N = {args.trials} trials of `sleep {args.sleep:g}` on P = {args.parallel} slots, "
          f"random sampler; ideal N*t/P = {ideal:.2f} s"
          + (f"; {args.repeat} alternating pairs" if args.repeat > 1 else ""))

    runs_dir = Path(tempfile.mkdtemp(prefix="hpsearch-overhead-", dir=args.dir))
    print(f"runs dir: {runs_dir} ({_filesystem(runs_dir)})")
    hp_runs: list[Outcome] = []
    op_runs: list[Outcome] = []
    floor_runs: list[Outcome] = []
    bookkeeping: list[list[float]] = []
    try:
        for rep in range(args.repeat):
            sides = ["hpsearch", "optuna"] if rep % 2 == 0 else ["optuna", "hpsearch"]
            for side in sides:
                if side == "hpsearch":
                    outcome, per_trial = run_hpsearch(args, runs_dir, f"overhead-{rep + 1}")
                    hp_runs.append(outcome)
                    bookkeeping.append(per_trial)
                else:
                    op_runs.append(run_optuna(args))
            floor_runs.append(run_floor(args))
    finally:
        if args.keep:
            print(f"runs dir kept: {runs_dir}")
        else:
            shutil.rmtree(runs_dir, ignore_errors=True)

    def ms_per_trial(seconds: float) -> float:
        return seconds / args.trials * 1000

    print()
    print(f"{'':9} {'completed':>9} {'makespan s':>10} {'ideal s':>7} {'ratio':>6} "
          f"{'overhead ms/trial':>17} {'CPU ms/trial: own':>17} {'trials':>6}")
    hp, op = median_outcome(hp_runs), median_outcome(op_runs)
    floor = median_outcome(floor_runs)
    for name, out in (("hpsearch", hp), ("optuna", op), ("floor", floor)):
        overhead = (out.makespan - ideal) * args.parallel / args.trials * 1000
        print(f"{name:9} {out.completed:>9} {out.makespan:>10.2f} {ideal:>7.2f} "
              f"{out.makespan / ideal:>6.3f} {overhead:>17.2f} "
              f"{ms_per_trial(out.own_cpu):>17.2f} {ms_per_trial(out.trials_cpu):>6.2f}")
    if args.repeat > 1:
        for name, outs in (("hpsearch", hp_runs), ("optuna", op_runs)):
            print(f"  {name} makespans: " + " ".join(f"{o.makespan:.2f}" for o in outs))
    print("  (own: this process, i.e. the driver or Optuna with its threads; "
          "trials: the sh and sleep processes;")
    print("   floor: the same processes started and awaited by bare threads, no store, no "
          "sampler: what they cost on this machine)")

    # Bookkeeping windows, pooled over the repeats: around trial 100, and the last 100 trials.
    early_lo, early_hi = min(50, args.trials - 1), min(150, args.trials)
    late_lo = max(0, args.trials - 100)
    early = [s for per_trial in bookkeeping for s in per_trial[early_lo:early_hi]]
    late = [s for per_trial in bookkeeping for s in per_trial[late_lo:]]
    early_ms, late_ms = statistics.median(early) * 1000, statistics.median(late) * 1000
    print()
    print("hpsearch driver bookkeeping per trial (launch + finalize, waiting excluded), median:")
    print(f"  trials {early_lo}-{early_hi - 1}: {early_ms:7.3f} ms")
    print(f"  trials {late_lo}-{args.trials - 1}: {late_ms:7.3f} ms")
    print(f"  last / early: {late_ms / early_ms:.2f}")

    verdicts = [
        (f"hpsearch <= 1.05 x ideal (the floor is {floor.makespan / ideal:.3f} x here)",
         hp.makespan <= 1.05 * ideal),
        ("hpsearch no slower than optuna", hp.makespan <= op.makespan),
        ("bookkeeping flat (last / early <= 1.5)", late_ms <= 1.5 * early_ms),
        ("every trial completed", all(o.completed == args.trials for o in hp_runs + op_runs)),
    ]
    print()
    for text, ok in verdicts:
        print(f"  {'ok  ' if ok else 'MISS'} {text}")
    return 0  # a benchmark: the verdicts are for people, not for CI


if __name__ == "__main__":
    sys.exit(main())

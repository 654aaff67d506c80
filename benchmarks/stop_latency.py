"""Early stopping that reacts at once: how soon a rejected trial is told, and what it saves.

One search per (executor, reading): 60 trials (`--trials`) of a learning curve that reports
every 0.05 s (`--step-seconds`) for 30 steps (`--steps`), 4 in flight, Optuna's median
pruner with its defaults (`pruner: median`), the random sampler with one seed (every search
sees the same trials in the same order). Executors: `local` (`hpsearch submit`, the real CLI)
and `pilot` (the real driver, pilot executor and pilot program on this host, with a
stand-in for Slurm: benchmarks/_pilot_local.py). Reading: `inotify` (the default on a local
filesystem: hpsearch.ingest.output_watch) and `polling` (HPSEARCH_INOTIFY=off: every running
trial read once a second, as on NFS or Lustre), side by side.

The trial (benchmarks/_stop_trial.py) notes when the STOP file and SIGTERM reached it; each
report's `time` in metrics.jsonl is when it was written. Per pruned trial: "told" is the
first of the two, less the write of the report the pruner rejected (the stop request's
step, from the store); for pilots also "pilot side": SIGTERM less the STOP file (the driver
writes the STOP file; the pilot reads its cancel file every 0.02 s and sends SIGTERM). Per
search: the steps all trials ran (their reports) over the steps they would have run
unpruned (trials x steps).

Goals (issue 24 item 2): local and pilot trials told within 0.1 s of the report that
condemned them (p95); the local median search runs at most 0.6 of the unpruned steps.

    python benchmarks/stop_latency.py                 # ~1.5 min on 2 cores
    python benchmarks/stop_latency.py --quick         # 24 trials a search
    python benchmarks/stop_latency.py --executors local --keep
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout
sys.path.insert(0, str(HERE))

import _sq_stats as st  # noqa: E402

from hpsearch.store.reader import Reader  # noqa: E402
from hpsearch.store.runs import STORE_FILE  # noqa: E402

GOAL_TOLD = 0.1  # seconds, p95
GOAL_FRACTION = 0.6
READINGS = {"inotify": {}, "polling": {"HPSEARCH_INOTIFY": "off"}}
SPEC = """\
name: {name}
command: "{{python}} {trial} {{x}} {{steps}} {{pause}}"
search:
  strategy: random
  trials: {trials}
  parallel: 4
  seed: 7
  space:
    x: {{type: float, low: 0.0, high: 1.0}}
    steps: {steps}
    pause: {pause}
  pruner: median
objective: {{metric: loss, direction: minimize}}
executor: {executor}
"""
EXECUTORS = {
    "local": "{type: local}",
    "pilot": "{type: slurm, pilots: {max: 1, nodes: 1, slots_per_node: 4, heartbeat: 0.5}}",
}


@dataclass
class Run:
    executor: str
    reading: str
    seconds: float = 0.0
    trials: int = 0
    pruned: int = 0
    steps_run: int = 0
    unpruned: int = 0
    told: list[float] = field(default_factory=list)  # s from the rejected report
    stop_file: list[float] = field(default_factory=list)
    signal: list[float] = field(default_factory=list)
    pilot_side: list[float] = field(default_factory=list)  # SIGTERM - STOP file
    overrun: list[int] = field(default_factory=list)  # steps reported after the rejected one
    untimed: int = 0  # pruned trials that noted no stop (killed before they could)

    @property
    def fraction(self) -> float:
        return self.steps_run / self.unpruned if self.unpruned else float("nan")


def run_search(executor: str, reading: str, args, runs: Path) -> Run:
    name = f"{executor}-{reading}"
    spec = runs / f"{name}.yaml"
    spec.write_text(SPEC.format(name=name, trial=HERE / "_stop_trial.py", trials=args.trials,
                                steps=args.steps, pause=args.step_seconds,
                                executor=EXECUTORS[executor]))
    env = {**os.environ, **READINGS[reading], "HPSEARCH_RUNS_DIR": str(runs),
           "PYTHONPATH": str(HERE.parent)}
    command = ([sys.executable, "-m", "hpsearch", "submit", str(spec)] if executor == "local"
               else [sys.executable, str(HERE / "_pilot_local.py"), str(spec), str(runs)])
    began = time.perf_counter()
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    seconds = time.perf_counter() - began
    if proc.returncode != 0:
        raise SystemExit(f"{name}: exit {proc.returncode}\n{proc.stdout[-2000:]}\n"
                         f"{proc.stderr[-2000:]}")
    said = [line for line in proc.stdout.splitlines() if "early stopping:" in line]
    want = "as they are written" if reading == "inotify" else "every"
    if not said or want not in said[0]:
        raise SystemExit(f"{name}: the driver did not read as asked: {said}")
    return measure(Run(executor, reading, seconds), runs / name, args.steps)


def measure(run: Run, exp_dir: Path, steps: int) -> Run:
    reader = Reader(exp_dir / STORE_FILE)
    try:
        trials = reader.trials()
    finally:
        reader.close()
    run.trials, run.unpruned = len(trials), len(trials) * steps
    for t in trials:
        moments = _moments(Path(t.trial_dir) / "stop_times.log")
        wrote = _reports(Path(t.trial_dir) / "metrics.jsonl")
        run.steps_run += len(wrote)
        if t.state != "pruned" or t.stop_request is None:
            continue
        run.pruned += 1
        decided = int(t.stop_request["step"])
        run.overrun.append(max(wrote, default=decided) - decided)
        told = [moments[k] for k in ("stop_file", "signal") if k in moments]
        if decided not in wrote or not told:
            run.untimed += 1
            continue
        run.told.append(min(told) - wrote[decided])
        if "stop_file" in moments:
            run.stop_file.append(moments["stop_file"] - wrote[decided])
        if "signal" in moments:
            run.signal.append(moments["signal"] - wrote[decided])
        if "stop_file" in moments and "signal" in moments:
            run.pilot_side.append(moments["signal"] - moments["stop_file"])
    return run


def _moments(path: Path) -> dict[str, float]:
    """When the trial noted each way of being told (benchmarks/_stop_trial.py)."""
    out: dict[str, float] = {}
    for line in path.read_text().splitlines() if path.exists() else ():
        what, when = line.split()
        out.setdefault(what, float(when))
    return out


def _reports(path: Path) -> dict[int, float]:
    """Each reported step, and when its report was written."""
    out: dict[int, float] = {}
    for line in path.read_text().splitlines() if path.exists() else ():
        record = json.loads(line)
        out.setdefault(int(record["step"]), float(record["time"]))
    return out


def _ms(values: list[float], q: float) -> str:
    return f"{st.quantile(values, q) * 1000:.0f}" if values else "-"


def table(results: list[Run]) -> None:
    head = (f"{'executor':8} {'reading':8} {'trials':>6} {'pruned':>6} {'steps run':>9} "
            f"{'told ms med/p95/max':>21} {'STOP file ms med/p95':>21} "
            f"{'SIGTERM ms med/p95':>19} {'pilot side ms med/p95':>22} "
            f"{'overrun steps med/max':>22} {'s':>6}")
    print(head)
    print("-" * len(head))
    for r in results:
        def pair(v: list[float]) -> str:
            return f"{_ms(v, 0.5)}/{_ms(v, 0.95)}"
        overrun = (f"{st.median([float(o) for o in r.overrun]):.0f}/{max(r.overrun)}"
                   if r.overrun else "-")
        told = f"{pair(r.told)}/{_ms(r.told, 1.0)}"
        print(f"{r.executor:8} {r.reading:8} {r.trials:>6} {r.pruned:>6} {r.fraction:>9.2f} "
              f"{told:>21} {pair(r.stop_file):>21} {pair(r.signal):>19} "
              f"{pair(r.pilot_side) if r.executor == 'pilot' else '-':>22} "
              f"{overrun:>22} {r.seconds:>6.1f}"
              + (f"  ({r.untimed} pruned trials noted no stop)" if r.untimed else ""))


def verdicts(results: list[Run]) -> None:
    by = {(r.executor, r.reading): r for r in results}
    for executor in EXECUTORS:
        fast, slow = by.get((executor, "inotify")), by.get((executor, "polling"))
        if fast is None or not fast.told:
            continue
        p95 = st.quantile(fast.told, 0.95)
        against = (f"; polling: {st.quantile(slow.told, 0.5):.3f} s median, "
                   f"{st.quantile(slow.told, 0.95):.3f} s p95, "
                   f"{st.quantile(slow.told, 0.5) / max(st.quantile(fast.told, 0.5), 1e-6):.0f}"
                   "x the median" if slow and slow.told else "")
        print(f"{'ok' if p95 <= GOAL_TOLD else 'MISS'}: {executor} trials told within "
              f"{GOAL_TOLD:g} s of the report that condemned them: p95 {p95:.3f} s, median "
              f"{st.quantile(fast.told, 0.5):.3f} s over {len(fast.told)} pruned trials"
              f"{against}")
    for executor in EXECUTORS:
        fast, slow = by.get((executor, "inotify")), by.get((executor, "polling"))
        if fast is None:
            continue
        ratio = f"; polling {slow.fraction:.2f}, ratio {fast.fraction / slow.fraction:.2f}" \
            if slow else ""
        goal = executor == "local"
        verdict = ("ok" if fast.fraction <= GOAL_FRACTION else "MISS") if goal else "info"
        print(f"{verdict}: {executor} median-pruner search ran {fast.fraction:.2f} of the "
              f"unpruned steps (goal <= {GOAL_FRACTION:g}){ratio}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=60)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--step-seconds", type=float, default=0.05)
    parser.add_argument("--executors", nargs="+", choices=list(EXECUTORS),
                        default=list(EXECUTORS))
    parser.add_argument("--quick", action="store_true", help="24 trials a search")
    parser.add_argument("--keep", action="store_true", help="keep the runs dir")
    args = parser.parse_args()
    if args.quick:
        args.trials = 24
    print(f"# Python {platform.python_version()}, {os.cpu_count()} CPUs, load average "
          f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}; {args.trials} trials x "
          f"{args.steps} steps of {args.step_seconds:g} s, 4 in flight, pruner median")
    runs = Path(tempfile.mkdtemp(prefix="hps-stop-"))
    results = []
    try:
        for executor in args.executors:
            for reading in READINGS:
                results.append(run_search(executor, reading, args, runs))
    finally:
        if args.keep:
            print(f"runs dir kept: {runs}")
        else:
            shutil.rmtree(runs, ignore_errors=True)
    print(f"# load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    table(results)
    print()
    verdicts(results)


if __name__ == "__main__":
    main()

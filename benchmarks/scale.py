"""10,000 trials on the local executor or the emulated Slurm cluster: driver memory and bookkeeping stay flat, the store
stays small, and the read-only commands answer in under a second.

Runs N short trials (default 10,000 of `sleep 0.01` on 8 slots) through the real driver,
store and local executor (as benchmarks/overhead.py does), and prints:

- the driver's resident memory (VmRSS) when 1,000 trials have completed and at the end;
- its bookkeeping per trial (launch + finalize, waiting excluded), median around trial
  1,000 and over the last 1,000;
- the store's size per trial (store.sqlite with its -wal) and the trial dirs' per trial;
- the wall time of `hpsearch status`, `best`, `export --format csv` and `watch --once` on
  the finished experiment, each a fresh process as a user runs it (median of 3), against
  the same commands on an experiment of 100 trials;
- on Slurm, the most job records slurmctld held (sampled every 30 s, _job_records.py)
  against its MaxJobCount, at which it refuses every user's jobs.

`--executor arrays` or `pilots` runs the big search on the emulated Slurm cluster instead
(scripts/slurm-cluster.sh start; SLURM_CONF set): job arrays, or pilots of `--pilot-nodes`
nodes x 4 slots, as many as `--parallel` needs; one CPU a trial. The 100-trial experiment
the commands are compared against always runs locally (it is the store that differs).

Goals (issue 14): RSS at N at most 1.25 x RSS at 1,000 (+ 10 MiB), bookkeeping last/early
<= 1.5, each command under 1 s at N; on Slurm, job records at most half MaxJobCount.

    python benchmarks/scale.py                        # 10,000 trials
    python benchmarks/scale.py --trials 2000 --keep
    python benchmarks/scale.py --executor pilots --parallel 32 --sleep 0.05
    python benchmarks/scale.py --executor arrays --parallel 32 --sleep 0.05
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import overhead  # noqa: E402
from _job_records import JobRecords  # noqa: E402

SLOTS_PER_NODE = 4  # the emulated cluster's nodes have 4 CPUs; a trial takes one
RESOURCES = 'resources: {nodes: 1, cpus_per_task: 1, time: "00:05:00"}\n'
COMMANDS = (("status",), ("best",), ("export", "--format", "csv", "--out", "{out}"),
            ("watch", "--once"))


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run(trials: int, args: argparse.Namespace, runs_dir: Path, name: str):
    """Drive the search; returns (outcome, bookkeeping per trial, {completed: RSS MiB})."""
    rss: dict[int, float] = {}
    done = [0]

    def on_event(line: str) -> None:
        if " completed: " in line:
            done[0] += 1
            if done[0] in (1000, trials):
                rss[done[0]] = rss_mib()

    bench = argparse.Namespace(trials=trials, parallel=args.parallel, sleep=args.sleep,
                               seed=1)
    if args.executor == "local":
        outcome, per_trial = overhead.run_hpsearch(bench, runs_dir, name, on_event)
    else:
        outcome, per_trial = overhead.run_hpsearch(bench, runs_dir, name, on_event,
                                                   executor_yaml(args), RESOURCES)
    return outcome, per_trial, rss


def executor_yaml(args: argparse.Namespace) -> str:
    if args.executor == "arrays":
        return f"{{type: slurm, array: true, poll_interval: {args.poll:g}}}"
    pilots = math.ceil(args.parallel / (args.pilot_nodes * SLOTS_PER_NODE))
    return (f"{{type: slurm, poll_interval: {args.poll:g}, pilots: {{nodes: {args.pilot_nodes}, "
            f"time: \"01:00:00\", max: {pilots}, slots_per_node: {SLOTS_PER_NODE}, "
            f"idle_timeout: 30, heartbeat: 1}}}}")


def command_seconds(runs_dir: Path, name: str, repeat: int = 3) -> dict[str, float]:
    """Median wall seconds of each read-only command, run as a user runs it."""
    env = {**os.environ, "HPSEARCH_RUNS_DIR": str(runs_dir)}
    found = {}
    for command in COMMANDS:
        argv = [a.format(out=runs_dir / f"{name}.csv") for a in command]
        times = []
        for _ in range(repeat):
            began = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "hpsearch", argv[0], name, *argv[1:]],
                                  env=env, capture_output=True, text=True)
            times.append(time.perf_counter() - began)
            if proc.returncode not in (0, 1):
                raise RuntimeError(f"hpsearch {' '.join(argv)}: {proc.stderr}")
        found[command[0]] = statistics.median(times)
    return found


def size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=10_000, help="N (default 10000)")
    parser.add_argument("--parallel", type=int, default=8, help="slots (default 8)")
    parser.add_argument("--sleep", type=float, default=0.01, help="trial seconds (0.01)")
    parser.add_argument("--executor", choices=("local", "arrays", "pilots"), default="local",
                        help="where the big search runs (default local)")
    parser.add_argument("--poll", type=float, default=1.0,
                        help="Slurm executor poll_interval, seconds (default 1)")
    parser.add_argument("--pilot-nodes", type=int, default=2, help="nodes per pilot (2)")
    parser.add_argument("--keep", action="store_true", help="keep the runs dir")
    parser.add_argument("--dir", type=Path, default=None, help="make the runs dir here")
    args = parser.parse_args(argv)
    if args.executor != "local" and "SLURM_CONF" not in os.environ:
        parser.error("--executor arrays/pilots: set SLURM_CONF (scripts/slurm-cluster.sh start)")
    if args.trials < 1000:
        parser.error("--trials must be at least 1000 (RSS is compared at 1,000)")
    runs_dir = Path(tempfile.mkdtemp(prefix="hpsearch-scale-", dir=args.dir))
    print(f"{os.cpu_count()} CPUs; runs dir {runs_dir} ({overhead._filesystem(runs_dir)}); "
          f"N = {args.trials} trials of `sleep {args.sleep:g}` on {args.parallel} slots; "
          f"executor {args.executor}"
          + (f" ({executor_yaml(args)})" if args.executor != "local" else "")
          + f"; {time.strftime('%Y-%m-%d')}", flush=True)
    records = JobRecords() if args.executor != "local" else None
    try:
        if records is None:
            outcome, per_trial, rss = run(args.trials, args, runs_dir, "scale")
        else:
            with records:
                outcome, per_trial, rss = run(args.trials, args, runs_dir, "scale")
        small_args = argparse.Namespace(trials=100, parallel=min(args.parallel, 8),
                                        sleep=args.sleep, seed=1)
        overhead.run_hpsearch(small_args, runs_dir, "small")
        big_cmd = command_seconds(runs_dir, "scale")
        small_cmd = command_seconds(runs_dir, "small")
        exp = runs_dir / "scale"
        store_bytes = sum(p.stat().st_size for p in exp.glob("store.sqlite*"))
        trial_bytes = size(exp / "trials")
    finally:
        if args.keep:
            print(f"runs dir kept: {runs_dir}")
        else:
            shutil.rmtree(runs_dir, ignore_errors=True)
    n = args.trials
    early = statistics.median(per_trial[900:1100]) * 1000
    late = statistics.median(per_trial[n - 1000:]) * 1000
    print()
    print(f"completed {outcome.completed} of {n} in {outcome.makespan:.1f} s "
          f"({n / outcome.makespan:.0f} trials/s)")
    print(f"driver RSS: {rss.get(1000, float('nan')):.1f} MiB at 1,000 completed, "
          f"{rss.get(n, float('nan')):.1f} MiB at {n:,}")
    print(f"bookkeeping per trial: {early:.3f} ms around trial 1,000, {late:.3f} ms over "
          f"the last 1,000 ({late / early:.2f} x)")
    print(f"store: {store_bytes / n / 1024:.2f} KiB per trial ({store_bytes / 2**20:.1f} MiB); "
          f"trial dirs: {trial_bytes / n / 1024:.2f} KiB per trial")
    if records is not None:
        records_line, records_ok = records.report()
        print(records_line)
    print()
    print(f"{'command':<28} {'100 trials s':>12} {f'{n:,} trials s':>14}")
    for command in COMMANDS:
        key = command[0]
        print(f"hpsearch {' '.join(command).replace(' --out {out}', ''):<19} "
              f"{small_cmd[key]:>12.3f} {big_cmd[key]:>14.3f}")
    print()
    verdicts = [
        (f"RSS at {n:,} <= 1.25 x RSS at 1,000 + 10 MiB",
         rss[n] <= 1.25 * rss[1000] + 10),
        ("bookkeeping flat (last / early <= 1.5)", late <= 1.5 * early),
        *((f"hpsearch {c[0]} under 1 s at {n:,} trials", big_cmd[c[0]] < 1.0)
          for c in COMMANDS),
        ("every trial completed", outcome.completed == n),
    ]
    if records is not None:
        verdicts.append(("slurmctld job records at most half MaxJobCount", records_ok))
    for text, ok in verdicts:
        print(f"  {'ok  ' if ok else 'MISS'} {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

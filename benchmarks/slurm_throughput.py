"""Slurm throughput: N one-second trials on the emulated 8-node cluster, one job per trial
against job arrays, side by side.

Prints for each: the makespan over the ideal N * t / P (P trials in flight, default 32 = the
cluster's 8 nodes x 4 CPUs), and how many sbatch and sacct calls the executor made.

    scripts/slurm-cluster.sh start && export SLURM_CONF=/tmp/hpsearch-slurm/etc/slurm.conf
    python benchmarks/slurm_throughput.py                # 100 trials of 1 s, P = 32
    python benchmarks/slurm_throughput.py --trials 40 --parallel 16
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from hpsearch import runs  # noqa: E402
from hpsearch.driver import Driver  # noqa: E402
from hpsearch.executors.slurm import SlurmExecutor  # noqa: E402
from hpsearch.search import make_search  # noqa: E402
from hpsearch.slurm.commands import Slurm  # noqa: E402
from hpsearch.spec import load_spec  # noqa: E402
from hpsearch.store import STORE_FILE, Store  # noqa: E402

SPEC = """\
name: {name}
command: "sleep {sleep}; echo @hpsearch step=0 loss={{x}}"
search:
  strategy: random
  trials: {trials}
  parallel: {parallel}
  seed: 1
  space:
    x: {{low: 0.0, high: 1.0}}
objective: {{metric: loss}}
resources: {{nodes: 1, cpus_per_task: 1, time: "00:05:00"}}
executor: {{type: slurm, array: {array}, poll_interval: {poll}}}
"""


def run(args: argparse.Namespace, runs_dir: Path, array: bool) -> dict:
    name = f"throughput-{'array' if array else 'jobs'}-{os.getpid()}"
    path = runs_dir / f"{name}.yaml"
    path.write_text(SPEC.format(name=name, sleep=args.sleep, trials=args.trials,
                                parallel=args.parallel, array=str(array).lower(),
                                poll=args.poll))
    spec = dataclasses.replace(load_spec(path, runs_dir), source=path.resolve())
    lock = runs.DriverLock(spec.experiment_dir)
    lock.acquire()
    try:
        slurm = Slurm()
        search = make_search(spec)
        store = Store.create(spec.experiment_dir / STORE_FILE, name=name,
                             spec_yaml=path.read_text(), spec_file=str(path),
                             base_dir=str(path.parent), strategy="random",
                             directions=["minimize"], trials_requested=search.total)
        began = time.perf_counter()
        code = Driver(spec, store, SlurmExecutor(spec, slurm), search).run()
        makespan = time.perf_counter() - began
        completed = store.state_counts().get("completed", 0)
        store.close()
    finally:
        lock.release()
    return {"makespan": makespan, "completed": completed, "exit": code,
            "sbatch": slurm.calls["sbatch"], "sacct": slurm.calls["sacct"],
            "squeue": slurm.calls["squeue"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--parallel", type=int, default=32)
    parser.add_argument("--sleep", type=float, default=1.0)
    parser.add_argument("--poll", type=float, default=1.0, help="executor poll_interval (s)")
    args = parser.parse_args()
    if "SLURM_CONF" not in os.environ:
        sys.exit("set SLURM_CONF (scripts/slurm-cluster.sh start prints it)")
    ideal = args.trials * args.sleep / args.parallel
    print(f"N = {args.trials} trials of `sleep {args.sleep:g}` with P = {args.parallel} in "
          f"flight on the emulated 8-node cluster; poll_interval {args.poll:g} s; "
          f"ideal N*t/P = {ideal:.2f} s\n")
    runs_dir = Path(tempfile.mkdtemp(prefix="hpsearch-throughput-"))
    try:
        results = {"job per trial": run(args, runs_dir, array=False),
                   "job arrays": run(args, runs_dir, array=True)}
    finally:
        shutil.rmtree(runs_dir, ignore_errors=True)
    print(f"{'':14}{'completed':>10}{'makespan s':>12}{'/ ideal':>9}{'sbatch':>8}"
          f"{'sacct':>7}{'squeue':>8}")
    for label, r in results.items():
        print(f"{label:14}{r['completed']:>10}{r['makespan']:>12.2f}"
              f"{r['makespan'] / ideal:>9.2f}{r['sbatch']:>8}{r['sacct']:>7}{r['squeue']:>8}")


if __name__ == "__main__":
    main()

"""10,000 or 100,000 trials on the local executor or the emulated Slurm cluster: driver memory and
bookkeeping stay flat, the store stays small, and the read-only commands answer in under a
second; side by side with Optuna's own storages loading as many trials.

Runs N short trials (default 10,000 of `sleep 0.01` on 8 slots) through the real driver,
store and local executor (as benchmarks/overhead.py does), and prints:

- the driver's resident memory (VmRSS) when 1,000 trials have completed, at 10,000 (when
  N is larger) and at the end;
- its bookkeeping per trial (launch + finalize, waiting excluded), median around trial
  1,000 and over the last 1,000;
- the store's size per trial (store.sqlite with its -wal) and the trial dirs' per trial;
- the wall time of `hpsearch status`, `best`, `export --format csv` and `watch --once` on
  the finished experiment, each a fresh process as a user runs it (median of 3), against
  the same commands on an experiment of 100 trials; the time from starting `export` (to
  stdout) to its first trial's row on the pipe; and, in a fresh process, the seconds of
  `hpsearch.load(name)` and of its `trials_dataframe()` (imports not counted);
- Optuna's JournalStorage (JournalFileBackend) and RDBStorage (sqlite:///) holding N
  finished trials (benchmarks/_optuna_load.py) and the seconds of
  `optuna.load_study(...).trials` on each in a fresh process (median of 3; --no-optuna
  skips them);
- on Slurm, the most job records slurmctld held (sampled every 30 s, _job_records.py)
  against its MaxJobCount, at which it refuses every user's jobs.

`--executor arrays` or `pilots` runs the big search on the emulated Slurm cluster instead
(scripts/slurm-cluster.sh start; SLURM_CONF set): job arrays, or pilots of `--pilot-nodes`
nodes x 4 slots, as many as `--parallel` needs; one CPU a trial. The 100-trial experiment
the commands are compared against always runs locally (it is the store that differs).

Goals, one `ok:`/`MISS:` line each (issue 14; issue 42 item 5 at N = 100,000): RSS at N at
most 1.25 x RSS at 1,000 (+ 10 MiB) and, past 10,000, at most 1.2 x RSS at 10,000;
bookkeeping last/early <= 1.5; status, best, watch --once, export's first row and
trials_dataframe() each under 1 s at N; on Slurm, job records at most half MaxJobCount.

    python benchmarks/scale.py                        # 10,000 trials
    python benchmarks/scale.py --trials 100000        # issue 42: 100,000, beside Optuna's
    python benchmarks/scale.py --trials 2000 --keep --no-optuna
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
            if done[0] in (1000, 10_000, trials):
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


def first_row_seconds(runs_dir: Path, name: str, repeat: int = 3) -> float:
    """Median wall seconds from starting `hpsearch export NAME --format csv` (to stdout) to
    its first trial's row (the line after the header) arriving on the pipe."""
    env = {**os.environ, "HPSEARCH_RUNS_DIR": str(runs_dir)}
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "hpsearch", "export", name, "--format",
                                 "csv"], env=env, stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        proc.stdout.readline()  # the header
        row = proc.stdout.readline()
        times.append(time.perf_counter() - began)
        proc.terminate()  # the whole export is timed by command_seconds
        proc.stdout.close()
        proc.wait()
        if not row.split(",")[0].isdigit():
            raise RuntimeError(f"hpsearch export {name}: no trial's row ({row!r})")
    return statistics.median(times)


API = """import sys, time
import hpsearch, pandas
began = time.perf_counter()
exp = hpsearch.load(sys.argv[1])
loaded = time.perf_counter()
frame = exp.trials_dataframe()
print(loaded - began, time.perf_counter() - loaded, len(frame))
"""


def api_seconds(runs_dir: Path, name: str, repeat: int = 3) -> tuple[float, float]:
    """Median seconds of `hpsearch.load(name)` and of its `trials_dataframe()`, each in a
    fresh process (the imports of hpsearch and pandas not counted)."""
    env = {**os.environ, "HPSEARCH_RUNS_DIR": str(runs_dir)}
    found = []
    for _ in range(repeat):
        out = subprocess.run([sys.executable, "-c", API, name], env=env, capture_output=True,
                             text=True, check=True).stdout.split()
        found.append((float(out[0]), float(out[1])))
    return (statistics.median(f[0] for f in found), statistics.median(f[1] for f in found))


def optuna_rows(trials: int, where: Path, repeat: int = 3) -> dict[str, tuple]:
    """Optuna's storages holding `trials` finished trials (benchmarks/_optuna_load.py):
    kind -> (seconds to build, median seconds of load_study(...).trials in a fresh process,
    bytes on disk)."""
    script = str(Path(__file__).resolve().parent / "_optuna_load.py")
    found = {}
    for kind, file in (("journal", "optuna-journal.log"), ("rdb", "optuna-rdb.sqlite")):
        path = str(where / file)
        built = float(subprocess.run([sys.executable, script, "build", kind, path,
                                      str(trials)], capture_output=True, text=True,
                                     check=True).stdout)
        loads = []
        for _ in range(repeat):
            seconds, count = subprocess.run([sys.executable, script, "load", kind, path],
                                            capture_output=True, text=True,
                                            check=True).stdout.split()
            if int(count) != trials:
                raise RuntimeError(f"optuna {kind}: loaded {count} of {trials} trials")
            loads.append(float(seconds))
        found[kind] = (built, statistics.median(loads), Path(path).stat().st_size)
    return found


def size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=10_000, help="N (default 10000)")
    parser.add_argument("--parallel", type=int, default=8, help="slots (default 8)")
    parser.add_argument("--sleep", type=float, default=0.01, help="trial seconds (0.01)")
    parser.add_argument("--executor", choices=("local", "arrays", "pilots"), default="local",
                        help="where the big search runs (default local)")
    parser.add_argument("--poll", type=float, default=1.0,
                        help="Slurm executor poll_interval, seconds (default 1)")
    parser.add_argument("--pilot-nodes", type=int, default=2, help="nodes per pilot (2)")
    parser.add_argument("--no-optuna", action="store_true",
                        help="skip Optuna's storages (JournalStorage, RDB) of N trials")
    parser.add_argument("--keep", action="store_true", help="keep the runs dir")
    parser.add_argument("--dir", type=Path, default=None, help="make the runs dir here")
    args = parser.parse_args(argv)
    if args.executor != "local" and "SLURM_CONF" not in os.environ:
        parser.error("--executor arrays/pilots: set SLURM_CONF (scripts/slurm-cluster.sh start)")
    if args.trials < 1000:
        parser.error("--trials must be at least 1000 (RSS is compared at 1,000)")
    return args


def measure(args: argparse.Namespace, runs_dir: Path) -> dict:
    """Run the big and the small search, then time the read-only commands on each."""
    records = JobRecords() if args.executor != "local" else None
    found: dict = {"records": None}
    if records is None:
        found["outcome"], found["per_trial"], found["rss"] = run(args.trials, args, runs_dir,
                                                                 "scale")
    else:
        with records:
            found["outcome"], found["per_trial"], found["rss"] = run(args.trials, args,
                                                                     runs_dir, "scale")
        found["records"] = records.report()
    small_args = argparse.Namespace(trials=100, parallel=min(args.parallel, 8),
                                    sleep=args.sleep, seed=1)
    overhead.run_hpsearch(small_args, runs_dir, "small")
    for name in ("scale", "small"):
        found[name] = command_seconds(runs_dir, name)
        found[name]["first row"] = first_row_seconds(runs_dir, name)
        found[name]["load"], found[name]["dataframe"] = api_seconds(runs_dir, name)
    exp = runs_dir / "scale"
    found["store_bytes"] = sum(p.stat().st_size for p in exp.glob("store.sqlite*"))
    found["trial_bytes"] = size(exp / "trials")
    found["optuna"] = {} if args.no_optuna else optuna_rows(args.trials, runs_dir)
    return found


ROWS = (("hpsearch status", "status"), ("hpsearch best", "best"),
        ("hpsearch export --format csv", "export"), ("  its first row (streamed)", "first row"),
        ("hpsearch watch --once", "watch"), ("hpsearch.load(name)", "load"),
        ("  .trials_dataframe()", "dataframe"))


def report(args: argparse.Namespace, m: dict) -> list[tuple[str, bool]]:
    """Print the rows; returns the goals as (text, met)."""
    n, rss, outcome, per_trial = args.trials, m["rss"], m["outcome"], m["per_trial"]
    early = statistics.median(per_trial[900:1100]) * 1000
    late = statistics.median(per_trial[n - 1000:]) * 1000
    nan = float("nan")
    print()
    print(f"completed {outcome.completed} of {n} in {outcome.makespan:.1f} s "
          f"({n / outcome.makespan:.0f} trials/s)")
    print(f"driver RSS: {rss.get(1000, nan):.1f} MiB at 1,000 completed"
          + (f", {rss.get(10_000, nan):.1f} MiB at 10,000" if n > 10_000 else "")
          + f", {rss.get(n, nan):.1f} MiB at {n:,}")
    print(f"bookkeeping per trial: {early:.3f} ms around trial 1,000, {late:.3f} ms over "
          f"the last 1,000 ({late / early:.2f} x)")
    print(f"store: {m['store_bytes'] / n / 1024:.2f} KiB per trial "
          f"({m['store_bytes'] / 2**20:.1f} MiB); trial dirs: "
          f"{m['trial_bytes'] / n / 1024:.2f} KiB per trial")
    if m["records"] is not None:
        print(m["records"][0])
    print()
    print(f"{'read':<36} {'100 trials s':>12} {f'{n:,} trials s':>14}")
    for text, key in ROWS:
        print(f"{text:<36} {m['small'][key]:>12.3f} {m['scale'][key]:>14.3f}")
    for kind, label in (("journal", "JournalStorage (JournalFileBackend)"),
                        ("rdb", "RDBStorage (sqlite:///)")):
        if kind in m["optuna"]:
            built, loaded, size_bytes = m["optuna"][kind]
            print(f"{'optuna.load_study(...).trials':<36} {'':>12} {loaded:>14.3f}  "
                  f"{label}: {size_bytes / 2**20:.1f} MiB, built in {built:.0f} s")
    print()
    big = m["scale"]
    goals = [(f"RSS at {n:,} <= 1.25 x RSS at 1,000 + 10 MiB", rss[n] <= 1.25 * rss[1000] + 10)]
    if n > 10_000:
        goals.append((f"RSS at {n:,} <= 1.2 x RSS at 10,000 (flat after warm-up)",
                      rss[n] <= 1.2 * rss[10_000]))
    goals += [("bookkeeping flat (last / early <= 1.5)", late <= 1.5 * early),
              *((f"hpsearch {c[0]} under 1 s at {n:,} trials", big[c[0]] < 1.0)
                for c in COMMANDS if c[0] != "export"),
              (f"hpsearch export's first row under 1 s at {n:,} trials (streamed; the "
               f"whole export {big['export']:.1f} s)", big["first row"] < 1.0),
              (f"trials_dataframe() under 1 s at {n:,} trials (load() before it: "
               f"{big['load']:.2f} s)", big["dataframe"] < 1.0),
              ("every trial completed", outcome.completed == n)]
    if m["records"] is not None:
        goals.append(("slurmctld job records at most half MaxJobCount", m["records"][1]))
    return goals


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    runs_dir = Path(tempfile.mkdtemp(prefix="hpsearch-scale-", dir=args.dir))
    print(f"{os.cpu_count()} CPUs; runs dir {runs_dir} ({overhead._filesystem(runs_dir)}); "
          f"N = {args.trials} trials of `sleep {args.sleep:g}` on {args.parallel} slots; "
          f"executor {args.executor}"
          + (f" ({executor_yaml(args)})" if args.executor != "local" else "")
          + f"; {time.strftime('%Y-%m-%d')}", flush=True)
    try:
        found = measure(args, runs_dir)
    finally:
        if args.keep:
            print(f"runs dir kept: {runs_dir}")
        else:
            shutil.rmtree(runs_dir, ignore_errors=True)
    for text, ok in report(args, found):
        print(f"{'ok' if ok else 'MISS'}: {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Slurm controller load of one search: RPCs per minute against the number of trials in flight.

For each N in --in-flight, submits a search of N trials that each sleep longer than the
measurement (`hpsearch submit`, the real CLI, on the emulated cluster), waits until all N
are submitted (running or pending), resets slurmctld's RPC statistics (`sdiag -r`), and
counts for --window seconds the RPCs that hpsearch's own commands cause: on slurmctld (sdiag
by message type: squeue, sinfo, sbatch, scancel, scontrol) and on slurmdbd (sacct, from
`sacctmgr show stats`). Then it stops the search (`hpsearch cancel`) and counts the RPCs of
the stop. With --pilots K the trials run inside pilots of K nodes (2 of them, N/2K slots a
node, more slots than the emulated nodes' CPUs: the trials only sleep). With --nodes 2 every trial asks for two nodes under one leaf switch
(`placement: leaf`): most of them wait for a leaf, the case that polled once a second.

Goal (issue 14): the RPCs per minute do not grow with the number in flight (at the largest N
at most 1.25 x those at the smallest, plus 2), and a stop costs a bounded number of commands.

    scripts/slurm-cluster.sh start && export SLURM_CONF=/tmp/hpsearch-slurm/etc/slurm.conf
    python benchmarks/slurm_rpc.py                          # N = 25, 200; 60 s windows
    python benchmarks/slurm_rpc.py --in-flight 10 100 --nodes 2 --mode nodelist
    python benchmarks/slurm_rpc.py --pilots 4                            # 2 pilots of 4 nodes
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from tests.helpers import read_store  # noqa: E402

COMMANDS = ("sacct", "squeue", "sinfo", "sbatch", "scancel", "scontrol")
# slurmctld RPCs only hpsearch's commands send here (the nodes' own messages, job
# completions and epilogs, and other users' sinfo are left out): squeue, scontrol show job,
# sbatch, scancel. sinfo's node and partition reads are counted as commands (PATH shims).
CTLD = ("REQUEST_JOB_INFO", "REQUEST_JOB_INFO_SINGLE", "REQUEST_SUBMIT_BATCH_JOB",
        "REQUEST_KILL_JOB", "REQUEST_JOB_STEP_CREATE")  # a pilot's srun onto its other nodes
COLUMNS = (*COMMANDS, "ctld RPCs", "dbd RPCs")

SPEC = """\
name: {name}
command: 'sleep 900; echo "@hpsearch step=0 loss={{x}}"'
search:
  strategy: random
  trials: {trials}
  parallel: {trials}
  seed: 1
  space:
    x: {{low: 0.0, high: 1.0}}
objective: {{metric: loss}}
resources: {{nodes: {nodes}, cpus_per_task: 1, time: "00:20:00"}}
placement: {placement}
executor: {{type: slurm, poll_interval: {poll}{pilots}}}
"""


def ctld_counts() -> dict[str, int]:
    """slurmctld's RPC counts by message type since its statistics were last reset."""
    text = subprocess.run(["sdiag"], capture_output=True, text=True, check=True).stdout
    section = text.split("Remote Procedure Call statistics by message type", 1)[1]
    section = section.split("Remote Procedure Call statistics by user", 1)[0]
    return {m.group(1): int(m.group(2))
            for m in re.finditer(r"^\s*(\w+)\s+\(\s*\d+\)\s+count:(\d+)", section, re.M)}


def dbd_jobs_queries() -> int:
    """How many job queries (sacct) slurmdbd has answered since it started."""
    text = subprocess.run(["sacctmgr", "show", "stats"], capture_output=True, text=True,
                          check=True).stdout
    found = re.search(r"DBD_GET_JOBS_COND\s+\(\s*\d+\)\s+count:(\d+)", text)
    return int(found.group(1)) if found else 0


def shims(work: Path) -> tuple[Path, Path]:
    """A folder of wrappers, put first on the driver's PATH, that log each Slurm command the
    driver runs before running the real one; and the log."""
    folder, log = work / "shims", work / "commands.log"
    folder.mkdir()
    for name in COMMANDS:
        real = shutil.which(name)
        (folder / name).write_text(f'#!/bin/sh\necho {name} >> "{log}"\nexec {real} "$@"\n')
        (folder / name).chmod(0o755)
    log.touch()
    return folder, log


def counts(log: Path, since: int) -> tuple[dict[str, int], int]:
    """Commands logged after the first `since` lines, by name; and the lines in all."""
    lines = log.read_text().split()
    found = dict.fromkeys(COMMANDS, 0)
    for name in lines[since:]:
        found[name] += 1
    return found, len(lines)


def sample(log: Path, since: int, dbd0: int) -> tuple[dict[str, float], int]:
    commands, lines = counts(log, since)
    ctld = ctld_counts()
    found: dict[str, float] = dict(commands)
    found["ctld RPCs"] = sum(ctld.get(kind, 0) for kind in CTLD)
    found["dbd RPCs"] = dbd_jobs_queries() - dbd0
    return found, lines


def measure(n: int, args: argparse.Namespace, work: Path) -> tuple[dict, dict, float]:
    """(calls per minute in the window, calls of the stop, the stop's seconds) for N in
    flight."""
    name = f"rpc-{n}-{args.nodes}"
    spec = work / f"{name}.yaml"
    pilots = "" if not args.pilots else (
        f", pilots: {{nodes: {args.pilots}, max: 2, slots_per_node: "
        f"{-(-n // (2 * args.pilots))}, time: \"01:00:00\", idle_timeout: 60}}")
    spec.write_text(SPEC.format(name=name, trials=n, nodes=args.nodes, poll=args.poll,
                                pilots=pilots,
                                placement=f"{{policy: leaf-switch, mode: {args.mode}}}"
                                if args.nodes > 1 else "any"))
    (work / name).mkdir()
    folder, log = shims(work / name)
    env = {**os.environ, "HPSEARCH_RUNS_DIR": str(work / "runs"),
           "PATH": f"{folder}:{os.environ['PATH']}"}
    hps = [sys.executable, "-m", "hpsearch"]
    driver_log = work / name / "driver.log"
    with open(driver_log, "w") as out:
        driver = subprocess.Popen([*hps, "submit", str(spec), "--no-tui"], env=env, cwd=work,
                                  stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:  # every trial asked and handed to Slurm or held
            if driver.poll() is not None:
                raise SystemExit(f"hpsearch submit exited {driver.returncode}:\n"
                                 + driver_log.read_text()[-2000:])
            try:
                rows = read_store(work / "runs", name)[1]
            except Exception:  # noqa: BLE001 - the store is not created yet
                rows = []
            if len(rows) == n:
                break
            time.sleep(1)
        time.sleep(args.settle)
        subprocess.run(["sdiag", "-r"], check=True, capture_output=True)
        since, dbd0, began = counts(log, 0)[1], dbd_jobs_queries(), time.monotonic()
        time.sleep(args.window)
        minutes = (time.monotonic() - began) / 60
        found, since = sample(log, since, dbd0)
        window = {k: v / minutes for k, v in found.items()}
        in_flight = sum(t.state in ("submitting", "running") for t in
                        read_store(work / "runs", name)[1])
        subprocess.run(["sdiag", "-r"], check=True, capture_output=True)
        dbd0, began = dbd_jobs_queries(), time.monotonic()
        subprocess.run([*hps, "cancel", name], env=env, cwd=work, capture_output=True,
                       timeout=300)
        driver.wait(timeout=300)
        stop_seconds = time.monotonic() - began
        stop, _ = sample(log, since, dbd0)
    finally:
        if driver.poll() is None:
            driver.kill()
        subprocess.run(["scancel", "--name", name], capture_output=True)
    window["in flight"] = in_flight
    return window, stop, stop_seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--in-flight", type=int, nargs="+", default=[25, 200],
                        help="numbers of trials in flight to measure (default 25 200)")
    parser.add_argument("--nodes", type=int, default=1, help="nodes per trial (default 1)")
    parser.add_argument("--mode", choices=("auto", "switches", "nodelist"), default="auto",
                        help="placement.mode of multi-node trials (default auto: switches "
                             "with the tree plugin); nodelist holds launches until a leaf "
                             "has room, planning from sinfo")
    parser.add_argument("--pilots", type=int, default=0, metavar="K",
                        help="run the trials in 2 pilots of K nodes (default 0: no pilots)")
    parser.add_argument("--window", type=float, default=60.0,
                        help="seconds of steady state measured per N (default 60)")
    parser.add_argument("--settle", type=float, default=10.0,
                        help="seconds to wait after the last trial was asked (default 10)")
    parser.add_argument("--poll", type=float, default=5.0,
                        help="executor.poll_interval in seconds (default 5)")
    args = parser.parse_args(argv)
    if shutil.which("sdiag") is None or not os.environ.get("SLURM_CONF"):
        parser.error("needs the Slurm cluster: scripts/slurm-cluster.sh start; "
                     "export SLURM_CONF=/tmp/hpsearch-slurm/etc/slurm.conf")
    print(f"emulated cluster ({os.environ['SLURM_CONF']}), {os.cpu_count()} CPUs; "
          f"trials of {args.nodes} node(s)"
          + (f" (placement.mode {args.mode})" if args.nodes > 1 else "")
          + (f", in 2 pilots of {args.pilots} nodes" if args.pilots else "") + f", poll_interval {args.poll:g} s, "
          f"{args.window:g} s windows")
    work = Path(tempfile.mkdtemp(prefix="hpsearch-rpc-"))
    rows = []
    try:
        for n in args.in_flight:
            rows.append((n, *measure(n, args, work)))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print()
    print("per minute of steady state (commands the driver ran, and the RPCs they caused)")
    print(f"{'N':>5} {'in flight':>9} " + " ".join(f"{c:>9}" for c in COLUMNS)
          + "   the stop: calls (seconds)")
    totals = []
    for n, window, stop, seconds in rows:
        totals.append(window["ctld RPCs"] + window["dbd RPCs"] + window["sinfo"] * 2)
        print(f"{n:>5} {window['in flight']:>9} " + " ".join(
            f"{window[c]:>9.1f}" for c in COLUMNS) + "   " + ", ".join(
            f"{c} {stop[c]:g}" for c in COLUMNS if stop[c]) + f" ({seconds:.0f} s)")
    print("  (ctld RPCs: squeue, scontrol show job, sbatch and scancel on slurmctld, from "
          "sdiag; dbd RPCs: sacct's job queries on slurmdbd, from sacctmgr show stats; "
          "each sinfo is 2 more slurmctld RPCs)")
    print()
    smallest, largest = totals[0], totals[-1]
    ok = largest <= 1.25 * smallest + 2
    print(f"  {'ok  ' if ok else 'MISS'} RPCs per minute at N={rows[-1][0]} ({largest:.1f}) "
          f"<= 1.25 x those at N={rows[0][0]} ({smallest:.1f}) + 2")
    stops = [stop["scancel"] for _, _, stop, _ in rows]
    print(f"  {'ok  ' if max(stops) <= 3 else 'MISS'} a stop runs at most 3 scancel "
          f"commands (ran {', '.join(f'{x:g}' for x in stops)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

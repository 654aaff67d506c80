"""Brokerage across Slurm sites (issue 40 item 5, docs/brokerage.md) on the emulated cluster:
three scenarios, each a few rows run side by side (one after the other, `--repeat` times,
alternating), every trial a whole node (4 CPUs) so that a partition of 4 nodes holds 4.

- busy: partitions left (node1-4) and right (node5-8), left kept busy by another user's
  stream of whole-node jobs (benchmarks/_slurm_busy.py, only in left; the same seeded
  stream in every row), whose jobs come first: every row's trials go with `--nice` (the
  test cluster's priority/basic is first come, first served, and without it the trials,
  which ask for one node, take every node that frees before a job of the stream that wants
  more). Rows: one search over both sites (`executor.sites`, `bind: late`: each job waits
  in both partitions), the same with `bind: early` (each job at the broker's pick), each
  site alone, and the same trials as plain jobs with Slurm's own
  `--partition=left,right`, kept `parallel` in the queue as a user's loop would. Goals:
  the search over both ends in at most 0.8 x the better single site's makespan, and no
  later than the plain jobs.
- clusters: one search over left and the second cluster (hpsearch2, `cluster:`); once its
  first trial completed, hpsearch2's slurmctld is stopped, and started again once
  every other trial completed (only the trials it ran are left; at most `--down` s later).
  Goals: nothing lost (every trial completed, in one attempt); the site backs off (of the
  trials launched while it is down, none runs there and under half are sent there first:
  one sent before the broker saw the outage moves to left at once); the search ends on left
  (every trial launched after the stop runs there).
- scouts: trials of 20 s that ask for 30 minutes, on a cluster where a long job holds
  node1-4 and a job ahead of them wants node1-6 once it ends (in under 30 minutes): Slurm
  reserves node1-6 for it, so only a job whose limit ends before that may start on node5-6,
  and node7-8 take any. Rows: `time: auto 00:30:00` with 2 scouts, and `time: 00:30:00`.
  Goals: the median queue wait with scouts at most half of that without, and no trial lost
  to the tighter limit (none ended TIMEOUT, every one completed).

Makespan: from just before a row's first sbatch (or its driver's start) to the last end of
its jobs, as sacct has it (whole seconds). Queue wait: sacct's Start - Submit of each
trial's last job, the median over the row. The other users' jobs and the long jobs go to
sbatch directly, not through hpsearch's Slurm package.

    scripts/slurm-cluster.sh start && export SLURM_CONF=/tmp/hpsearch-slurm/etc/slurm.conf
    python benchmarks/brokerage.py                       # every scenario, about 9 minutes
    python benchmarks/brokerage.py --scenarios scouts --repeat 2
    python benchmarks/brokerage.py --quick               # every row, small: about 80 s
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from _brokerage_slurm import Controller, Reservation, plain_jobs, sacct_times  # noqa: E402
from _slurm_busy import OtherUsers  # noqa: E402

from hpsearch.driver.session import drive, new_experiment  # noqa: E402
from hpsearch.store.reader import Reader  # noqa: E402
from hpsearch.store.runs import STORE_FILE  # noqa: E402

GOAL_SITES = 0.8      # busy: the search over both sites, against the better single one
GOAL_SCOUT_WAIT = 2.0  # scouts: median queue wait without / with
BUSY, RESERVED = "left", "node[1-6]"
BUSY_TIME = "00:02:00"  # busy: every trial's time limit
CPUS = 4  # a trial takes a whole node of the emulated cluster

SPEC = """\
name: {name}
command: 'sleep {sleep}; echo "@hpsearch step=0 loss={{x}}"'
search:
  strategy: random
  trials: {trials}
  parallel: {parallel}
  seed: 1
  space:
    x: {{low: 0.0, high: 1.0}}
objective: {{metric: loss}}
resources: {{nodes: 1, cpus_per_task: {cpus}, time: "{time}"{more}}}
executor: {executor}
retries: 0
"""


@dataclass
class Row:
    """One row's outcome: its trials, where they ran, how long it took."""

    label: str
    trials: int
    completed: int = 0
    attempts: int = 0
    timeouts: int = 0
    makespan: float = float("nan")
    waits: list[float] = field(default_factory=list)
    sites: dict[str, int] = field(default_factory=dict)  # site -> trials that ended there
    extra: dict = field(default_factory=dict)
    where_note: str = ""  # said after where it ran

    @property
    def median_wait(self) -> float:
        return statistics.median(self.waits) if self.waits else float("nan")


# -- one hpsearch search -----------------------------------------------------------------
def run_search(args: argparse.Namespace, runs_dir: Path, label: str, trials: int,
               parallel: int, sleep: float, time_: str, executor: str, more: str = "",
               during=None, where: str = "debug") -> Row:
    """One search in this process (the driver of `hpsearch submit`), then what its store
    and sacct say. `during(exp_dir, stop_event)` runs in a thread beside the driver."""
    name = f"brokerage-{label.split()[0]}-{os.getpid()}-{time.monotonic_ns() % 10**6}"
    path = runs_dir / f"{name}.yaml"
    path.write_text(SPEC.format(name=name, sleep=sleep, trials=trials, parallel=parallel,
                                cpus=CPUS, time=time_, more=more, executor=executor))
    spec, _ = new_experiment(path, runs_dir, None, False)
    done = threading.Event()
    side = threading.Thread(target=during, args=(spec.experiment_dir, done)) if during else None
    began = time.time()
    if side:
        side.start()
    try:
        drive(spec, True, lambda line: None)
    finally:
        done.set()
        if side:
            side.join()
    return read_row(label, trials, spec.experiment_dir, began, where)


def read_row(label: str, trials: int, exp_dir: Path, began: float, where: str) -> Row:
    """What the store and sacct say of a search; `where`: the site of a search without
    sites (its partition)."""
    with Reader(exp_dir / STORE_FILE) as reader:
        states = [t["state"] for t in reader.db.query("select state from trials")]
        attempts = list(reader.db.query("select trial, attempt, site, job_id, failure, "
                                        "started, finished "
                                        "from attempts order by trial, attempt"))
        events = list(reader.db.query("select time, trial, message from events where kind = "
                                      "'brokerage' order by id"))
    row = Row(label, trials, completed=states.count("completed"), attempts=len(attempts),
              timeouts=sum(1 for a in attempts if a["failure"] == "timeout"))
    last = {a["trial"]: a for a in attempts}  # each trial's last attempt
    by_cluster: dict[str | None, list[str]] = {}
    for a in last.values():
        if a["job_id"]:
            by_cluster.setdefault(cluster_of(a["site"]), []).append(a["job_id"])
            site = a["site"] or where
            row.sites[site] = row.sites.get(site, 0) + 1
    ends = []
    for cluster, job_ids in by_cluster.items():
        for job in sacct_times(job_ids, cluster).values():
            if job.wait is not None:
                row.waits.append(job.wait)
            if job.end is not None:
                ends.append(job.end)
    row.makespan = max(ends) - began if ends else float("nan")
    row.extra["events"] = events
    row.extra["attempts"] = attempts
    return row


SECOND = "hpsearch2"  # scripts/slurm-cluster.sh's second cluster


def cluster_of(site: str | None) -> str | None:
    return SECOND if site == SECOND else None


# -- busy: two sites, one busy -------------------------------------------------------------
def busy_rows(args: argparse.Namespace, runs_dir: Path) -> list[Row]:
    n, p, sleep = args.busy_trials, args.parallel, args.busy_sleep
    base = f"{{type: slurm, poll_interval: {args.poll}, array: false"
    both = (base + f", move_after: {args.move_after}, bind: late, sites: "
            "[{partition: left}, {partition: right}]}")
    early = both.replace("bind: late", "bind: early")
    nice = f", sbatch_extra: ['--nice={args.nice}']" if args.nice else ""
    rows = {"sites left+right": lambda: run_search(args, runs_dir, "sites left+right", n, p,
                                                   sleep, BUSY_TIME, both, nice),
            "sites bind early": lambda: run_search(args, runs_dir, "sites bind early", n, p,
                                                    sleep, BUSY_TIME, early, nice),
            "left alone": lambda: run_search(args, runs_dir, "left alone", n, p, sleep,
                                             BUSY_TIME, base + "}",
                                             ", partition: left" + nice, where="left"),
            "right alone": lambda: run_search(args, runs_dir, "right alone", n, p, sleep,
                                              BUSY_TIME, base + "}",
                                              ", partition: right" + nice, where="right"),
            "plain --partition=left,right": lambda: plain_row(args, n, p, sleep)}
    results = []
    user = stream_user()
    for i in range(args.repeat):
        for label, run in rows.items():
            others = OtherUsers(args.busy_rate, args.seed, partition=BUSY, user=user)
            others.start()
            time.sleep(args.busy_warmup)
            try:
                row = run()
            finally:
                others.stop()
            row.label = label + (f" #{i + 1}" if args.repeat > 1 else "")
            row.where_note = f"others {len(others.job_ids)}" + (
                f" ({len(others.refused)} refused)" if others.refused else "")
            print_row(row)
            results.append(row)
    return results


def stream_user() -> str | None:
    """The other users' stream's user (benchmarks/_slurm_busy.py): its second user where
    Slurm takes that user's jobs (the cluster enforces associations, and only the tests'
    fixture gives it one), else this one (its jobs then still come first, by --nice)."""
    user = OtherUsers(0.1).user
    if user is None:
        return None
    proc = subprocess.run(["runuser", "-u", user, "--", "sbatch", "--test-only",
                           f"--partition={BUSY}", "--output=/dev/null", "--chdir=/tmp",
                           "--wrap=true"], capture_output=True, text=True)
    if proc.returncode == 0:
        return user
    print(f"(Slurm refuses jobs of {user}: {proc.stderr.strip()}; the stream is this user's)")
    return None


def plain_row(args: argparse.Namespace, trials: int, parallel: int, sleep: float) -> Row:
    began = time.time()
    job_ids = plain_jobs(f"brokerage-plain-{os.getpid()}", trials, parallel, f"sleep {sleep}",
                         ["--partition=left,right", "--nodes=1", f"--cpus-per-task={CPUS}",
                          f"--time={BUSY_TIME}"] + ([f"--nice={args.nice}"] if args.nice else []),
                         args.poll)
    found = sacct_times(job_ids)
    row = Row("plain", trials, completed=sum(1 for j in found.values()
                                             if j.state == "COMPLETED"),
              attempts=len(job_ids))
    row.waits = [j.wait for j in found.values() if j.wait is not None]
    row.makespan = max((j.end for j in found.values() if j.end), default=float("nan")) - began
    parts = partitions(job_ids)
    for part in parts.values():
        row.sites[part] = row.sites.get(part, 0) + 1
    return row


def partitions(job_ids: list[str]) -> dict[str, str]:
    """Where each job ran (sacct's Partition: asked again for a few seconds while a record
    has none yet)."""
    found: dict[str, str] = {}
    for _ in range(10):
        out = subprocess.run(["sacct", "-X", "-n", "-P", "-o", "JobID,Partition", "-j",
                              ",".join(job_ids)], capture_output=True, text=True).stdout
        found = dict(line.split("|")[:2] for line in out.splitlines() if "|" in line)
        if all(found.get(j) for j in job_ids):
            break
        time.sleep(1.0)
    return found


def busy_goals(rows: list[Row]) -> None:
    def median(prefix: str) -> float:
        return statistics.median(r.makespan for r in rows if r.label.startswith(prefix))
    sites, left, right = median("sites left+right"), median("left alone"), median("right alone")
    plain = median("plain")
    better = min(left, right)
    print(f"{'ok' if sites <= GOAL_SITES * better else 'MISS'}: sites left+right makespan "
          f"{sites:.0f} s = {sites / better:.2f} x the better single site ({better:.0f} s) "
          f"(goal <= {GOAL_SITES} x)")
    print(f"{'ok' if sites <= plain else 'MISS'}: sites left+right makespan {sites:.0f} s "
          f"against plain --partition=left,right {plain:.0f} s (goal: no later)")
    early = median("sites bind early")
    print(f"(bind: early, the broker's pick alone: {early:.0f} s, {early / better:.2f} x the "
          "better single site)")


# -- clusters: one cluster's controller stopped midway ----------------------------------
def clusters_rows(args: argparse.Namespace, runs_dir: Path) -> list[Row]:
    n, p, sleep = args.cluster_trials, args.parallel, args.cluster_sleep
    executor = (f"{{type: slurm, poll_interval: {args.poll}, array: false, move_after: "
                f"{args.move_after}, sites: [{{partition: left}}, {{cluster: {SECOND}}}]}}")
    results = []
    for i in range(args.repeat):
        controller = Controller(SECOND)
        outage: dict[str, float] = {}
        row = run_search(args, runs_dir, f"clusters left+{SECOND}", n, p, sleep, "00:05:00",
                         executor, during=functools.partial(
                             stop_midway, controller, trials=n, down=args.down,
                             outage=outage))
        if not controller.up():  # the search ended while it was down
            controller.start()
            outage.setdefault("started", time.time())
        row.label += f" #{i + 1}" if args.repeat > 1 else ""
        row.extra["outage"] = outage
        row.extra["sent_down"] = sent_between(row, outage.get("stopped", 1e18),
                                              outage.get("started", 1e18))
        print_row(row)
        results.append(row)
    return results


def sent_between(row: Row, began: float, ended: float) -> dict[int, tuple[str, str]]:
    """Trials launched (their attempt's start: just before its sbatch) between `began` and
    `ended`: the site the broker first sent each to, and the one it ended at."""
    first: dict[int, str] = {}
    for event in row.extra["events"]:
        if event["trial"] is not None and " to site " in event["message"]:
            first.setdefault(event["trial"], event["message"].split(" to site ")[1].split()[0])
    return {a["trial"]: (first.get(a["trial"], "?"), a["site"])
            for a in row.extra["attempts"] if began <= (a["started"] or 0) <= ended}


def stop_midway(controller: Controller, exp_dir: Path, done: threading.Event, *, trials: int,
                down: float, outage: dict[str, float]) -> None:
    """Stop the controller once the first trial completed (the first wave launched, the
    rest to come: a fifth, as first written, came after the broker, which now fills the
    idle nodes of both sites at once, had launched every trial); start it again once every
    other trial has completed (only those it holds are left: they end when it is back), at
    most `down` seconds later, or as the search ends."""
    if not wait_for_store(exp_dir, done, lambda done_, there: done_ >= 1):
        return
    controller.stop()
    outage["stopped"] = time.time()
    deadline = time.monotonic() + down
    wait_for_store(exp_dir, done, lambda done_, there: done_ + there >= trials
                   or time.monotonic() > deadline)
    controller.start()
    outage["started"] = time.time()


def wait_for_store(exp_dir: Path, done: threading.Event, until) -> bool:
    """Until `until(completed, held by the second cluster)` holds (True) or the search ended
    (False), asking the store (read-only) every half second."""
    while not done.wait(0.5):
        with Reader(exp_dir / STORE_FILE) as reader:
            rows = list(reader.db.query("select state, site from trials"))
        completed = sum(1 for r in rows if r["state"] == "completed")
        there = sum(1 for r in rows if r["state"] != "completed" and r["site"] == SECOND)
        if until(completed, there):
            return True
    return False


def clusters_goals(rows: list[Row]) -> None:
    for row in rows:
        lost = row.trials - row.completed
        print(f"{'ok' if not lost and row.attempts == row.trials else 'MISS'}: nothing lost: "
              f"{row.completed} of {row.trials} trials completed, {row.attempts} attempts "
              f"(goal: all, one attempt each)")
        sent = row.extra["sent_down"]
        there = sorted(t for t, (first, _) in sent.items() if first == SECOND)
        ran = sorted(t for t, (_, last) in sent.items() if last == SECOND)
        print(f"{'ok' if sent and not ran and len(there) < len(sent) / 2 else 'MISS'}: site "
              f"{SECOND} backed off: of the {len(sent)} trials launched while its controller "
              f"was down, {len(there)} went there first (moved at once) and {len(ran)} ran "
              f"there (goal: none ran there, under half went there)")
        outage = row.extra["outage"]
        waited = outage.get("started", math.nan) - outage.get("stopped", math.nan)
        elsewhere = sorted(t for t, (_, last) in sent.items() if last != "left")
        print(f"{'ok' if sent and not elsewhere else 'MISS'}: the search ended on left: "
              f"{len(sent) - len(elsewhere)} of the {len(sent)} trials launched after the stop "
              f"ran there; {SECOND} came back {waited:.0f} s after the stop, when only what it "
              f"held was left (goal: all, and some)")


# -- scouts: a backfill window shorter than the request ---------------------------------
def scouts_rows(args: argparse.Namespace, runs_dir: Path) -> list[Row]:
    n, p, sleep = args.scout_trials, args.parallel_scouts, args.scout_sleep
    executor = f"{{type: slurm, poll_interval: {args.poll}, array: false}}"
    rows = {"scouts (auto 00:30:00)": ("auto 00:30:00", f", scouts: {args.scouts}"),
            "no scouts (00:30:00)": ("00:30:00", "")}
    results = []
    with Reservation("node[1-4]", RESERVED, args.hold_minutes) as held:
        print(f"(a long job holds node[1-4] for {args.hold_minutes} min; the job ahead of the "
              f"trials wants {RESERVED} from {held.start_planned() or 'its end'})")
        for i in range(args.repeat):
            for label, (time_, more) in rows.items():
                row = run_search(args, runs_dir, label.split()[0] + " " + label, n, p, sleep,
                                 time_, executor, more)
                row.label = label + (f" #{i + 1}" if args.repeat > 1 else "")
                print_row(row)
                results.append(row)
    return results


def scouts_goals(rows: list[Row]) -> None:
    with_ = statistics.median(r.median_wait for r in rows if r.label.startswith("scouts"))
    without = statistics.median(r.median_wait for r in rows if r.label.startswith("no "))
    ratio = without / with_ if with_ > 0 else float("inf")
    print(f"{'ok' if ratio >= GOAL_SCOUT_WAIT else 'MISS'}: median queue wait with scouts "
          f"{with_:.1f} s against {without:.1f} s without ({ratio:.1f} x shorter; goal >= "
          f"{GOAL_SCOUT_WAIT:g} x)")
    scouted = [r for r in rows if r.label.startswith("scouts")]
    lost = sum(r.trials - r.completed for r in scouted)
    timeouts = sum(r.timeouts for r in scouted)
    print(f"{'ok' if not lost and not timeouts else 'MISS'}: no trial lost to the tighter "
          f"limit: {timeouts} ended TIMEOUT, {lost} not completed (goal: none)")


# -- printing ------------------------------------------------------------------------------
HEADER = (f"{'row':34}{'trials':>7}{'done':>6}{'attempts':>9}{'makespan s':>12}"
          f"{'median wait s':>15}  where")


def print_row(row: Row) -> None:
    where = ", ".join(f"{site} {count}" for site, count in sorted(row.sites.items()))
    print(f"{row.label:34}{row.trials:>7}{row.completed:>6}{row.attempts:>9}"
          f"{row.makespan:>12.0f}{row.median_wait:>15.1f}  {where}"
          + (f"; {row.where_note}" if row.where_note else ""), flush=True)


SCENARIOS = {"busy": (busy_rows, busy_goals), "clusters": (clusters_rows, clusters_goals),
             "scouts": (scouts_rows, scouts_goals)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenarios", default="busy,clusters,scouts")
    parser.add_argument("--quick", action="store_true", help="few, short trials (the test)")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each row, alternating")
    parser.add_argument("--poll", type=float, default=1.0, help="executor poll_interval (s)")
    parser.add_argument("--parallel", type=int, default=8, help="busy and clusters: in flight")
    parser.add_argument("--move-after", type=float, default=10.0, help="executor.move_after")
    parser.add_argument("--busy-rate", type=float, default=0.15,
                        help="other users' jobs per second, in left")
    parser.add_argument("--busy-warmup", type=float, default=10.0)
    parser.add_argument("--nice", type=int, default=10000,
                        help="busy: every row's trials go with sbatch --nice=N, so that the "
                             "other users' jobs come first (0: FIFO, as submitted)")
    parser.add_argument("--seed", type=int, default=1, help="of the other users' stream")
    parser.add_argument("--down", type=float, default=120.0,
                        help="clusters: the most seconds the second cluster's controller is "
                             "stopped (it starts once only what it holds is left)")
    parser.add_argument("--hold-minutes", type=int, default=20,
                        help="scouts: the long job's time limit (the reservation's start)")
    parser.add_argument("--scouts", type=int, default=2)
    parser.add_argument("--keep", action="store_true", help="keep the runs dir")
    args = parser.parse_args()
    size = dict(busy_trials=(4, 24), busy_sleep=(2, 8), cluster_trials=(10, 16),
                cluster_sleep=(1, 5), scout_trials=(5, 10), scout_sleep=(2, 20),
                parallel_scouts=(4, 4))
    for key, (quick, full) in size.items():
        setattr(args, key, quick if args.quick else full)
    if args.quick:
        args.parallel, args.busy_warmup, args.down = 4, 1.0, 30.0
    if "SLURM_CONF" not in os.environ:
        sys.exit("set SLURM_CONF (scripts/slurm-cluster.sh start prints it)")
    chosen = [s for s in args.scenarios.split(",") if s]
    if not set(chosen) <= set(SCENARIOS):
        sys.exit(f"--scenarios: expected some of {','.join(SCENARIOS)}, got {args.scenarios}")
    print(f"brokerage on the emulated cluster ({os.environ['SLURM_CONF']}), poll_interval "
          f"{args.poll:g} s, each trial a whole node; {os.cpu_count()} CPUs here, load "
          f"{os.getloadavg()[0]:.1f}, {time.strftime('%Y-%m-%d %H:%M')}")
    runs_dir = Path(tempfile.mkdtemp(prefix="hpsearch-brokerage-"))
    began = time.monotonic()
    try:
        for name in chosen:
            rows_of, goals = SCENARIOS[name]
            print(f"\n{name}: " + {
                "busy": f"{args.busy_trials} trials of {args.busy_sleep} s, {args.parallel} in "
                        f"flight; other users submit {args.busy_rate:g} whole-node jobs/s to "
                        f"left (1-4 nodes, 2-10 s, seed {args.seed})",
                "clusters": f"{args.cluster_trials} trials of {args.cluster_sleep} s, "
                            f"{args.parallel} in flight; {SECOND}'s slurmctld stopped once a "
                            f"first trial completed, started once only what it holds is left "
                            f"(at most {args.down:g} s later)",
                "scouts": f"{args.scout_trials} trials of {args.scout_sleep} s asking for 30 "
                          f"min, {args.parallel_scouts} in flight, {args.scouts} scouts"}[name])
            print(HEADER)
            goals(rows_of(args, runs_dir))
    finally:
        if not args.keep:
            shutil.rmtree(runs_dir, ignore_errors=True)
    print(f"\n(took {time.monotonic() - began:.0f} s; load {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()

"""Other users on the cluster: a background thread that submits a seeded stream of short
whole-node jobs, so a search has to compete for nodes (benchmarks/slurm_throughput.py --busy).

Each job is a plain `sbatch --exclusive -N k --wrap 'sleep s'` with k in 1..max_nodes and s
in [sleep_min, sleep_max], arriving as a Poisson stream of `rate` jobs per second; the
arrival times, sizes and lengths come from `random.Random(seed)` alone, so every row of the
benchmark meets the same stream. With `partition` they go to that partition alone
(benchmarks/brokerage.py keeps one of two sites busy). Run as the user `hpsearch-other` (the
test cluster's second user, made by tests/slurm/test_job_identity.py's fixture) when this
process is root and that user exists; as the current user otherwise (then the jobs still
compete, but squeue shows one user). These are not hpsearch's jobs: they go straight to
sbatch, not through its Slurm package, and are not counted in its calls.
"""

from __future__ import annotations

import os
import pwd
import random
import subprocess
import threading
import time
from dataclasses import dataclass, field

OTHER_USER = "hpsearch-other"
JOB_NAME = "bench-other-user"


def _other_user() -> str | None:
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(OTHER_USER)
    except KeyError:
        return None
    return OTHER_USER


@dataclass
class OtherUsers:
    rate: float  # jobs per second
    seed: int = 1
    max_nodes: int = 4
    sleep_min: float = 2.0
    sleep_max: float = 10.0
    user: str | None = field(default_factory=_other_user)
    partition: str | None = None  # None: the cluster's default partition
    job_ids: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    node_seconds: float = 0.0  # asked for, over the jobs submitted

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="other-users", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        rng = random.Random(self.seed)
        began = time.monotonic()
        due = 0.0
        while True:
            due += rng.expovariate(self.rate)
            nodes = rng.randint(1, self.max_nodes)
            sleep = round(rng.uniform(self.sleep_min, self.sleep_max), 1)
            if self._stop.wait(max(0.0, began + due - time.monotonic())):
                return
            self._submit(nodes, sleep)

    def _submit(self, nodes: int, sleep: float) -> None:
        argv = ["sbatch", "--parsable", "--exclusive", f"--nodes={nodes}", "--time=1",
                f"--job-name={JOB_NAME}", "--output=/dev/null", "--chdir=/tmp",
                f"--wrap=sleep {sleep:g}"]
        if self.partition:
            argv.insert(1, f"--partition={self.partition}")
        if self.user:
            argv = ["runuser", "-u", self.user, "--", *argv]
        proc = subprocess.run(argv, capture_output=True, text=True)
        if proc.returncode == 0:
            self.job_ids.append(proc.stdout.strip().split(";")[0])
            self.node_seconds += nodes * sleep
        else:
            self.refused.append(proc.stderr.strip())

    def stop(self, timeout: float = 120.0) -> None:
        """Stop the stream, cancel every job it submitted, and wait until none is left in
        the queue (so the next row starts on an empty cluster)."""
        self._stop.set()
        self._thread.join()
        if not self.job_ids:
            return
        subprocess.run(["scancel", *self.job_ids], capture_output=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            out = subprocess.run(["squeue", "-h", "-o", "%i", f"--name={JOB_NAME}"],
                                 capture_output=True, text=True).stdout.split()
            if not set(out) & set(self.job_ids):
                return
            time.sleep(0.5)


def foreign_jobs(began: float, ended: float, ours: tuple[str, ...]) -> list[str]:
    """Jobs that held nodes for part of [began, ended] (epoch seconds) and are neither this
    benchmark's (a name containing one of `ours`) nor its other-users stream: someone else's
    work on a shared test cluster, which makes a row's numbers worse than the cluster's."""
    fmt = "%Y-%m-%dT%H:%M:%S"
    out = subprocess.run(["sacct", "-a", "-X", "-n", "-P", "-o", "jobid,jobname,start,end",
                          "-S", time.strftime(fmt, time.localtime(began - 1)),
                          "-E", time.strftime(fmt, time.localtime(ended + 1))],
                         capture_output=True, text=True).stdout
    found = []
    for line in out.splitlines():
        job_id, name, start, end = (line.split("|") + ["", "", "", ""])[:4]
        if name == JOB_NAME or any(mark in name for mark in ours) or not start[:1].isdigit():
            continue
        start_s = time.mktime(time.strptime(start, fmt))
        end_s = time.mktime(time.strptime(end, fmt)) if end[:1].isdigit() else ended
        if start_s <= ended and end_s >= began:
            found.append(f"{job_id} {name}")
    return found

"""The Slurm side of benchmarks/brokerage.py, in plain Slurm commands (not hpsearch's Slurm
package: these calls are the benchmark's): what sacct says of a row's jobs, the same trials
as plain jobs with Slurm's own `--partition=a,b`, a long job that holds a reservation (a
backfill window shorter than the trials' request), and a cluster's controller stopped and
started again.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

STAMP = "%Y-%m-%dT%H:%M:%S"
FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL",
         "PREEMPTED", "BOOT_FAIL", "DEADLINE")


@dataclass(frozen=True)
class JobTimes:
    """One job as sacct has it: epoch seconds (whole seconds, Slurm's resolution)."""

    submit: float
    start: float | None
    end: float | None
    state: str

    @property
    def wait(self) -> float | None:
        return None if self.start is None else self.start - self.submit


def _epoch(text: str) -> float | None:
    return time.mktime(time.strptime(text, STAMP)) if text[:1].isdigit() else None


def sacct_times(job_ids: list[str], cluster: str | None = None,
                timeout: float = 60.0) -> dict[str, JobTimes]:
    """Each job's submit, start, end and state, asked again until every record is final
    (slurmdbd writes a short job's end just after it)."""
    if not job_ids:
        return {}
    argv = ["sacct", "-X", "-n", "-P", "-o", "JobID,Submit,Start,End,State",
            "-j", ",".join(job_ids)] + (["-M", cluster] if cluster else [])
    deadline = time.monotonic() + timeout
    while True:
        found = {}
        for line in subprocess.run(argv, capture_output=True, text=True).stdout.splitlines():
            job_id, submit, start, end, state = (line.split("|") + [""] * 5)[:5]
            if _epoch(submit) is not None:
                found[job_id] = JobTimes(_epoch(submit), _epoch(start), _epoch(end),
                                         state.split()[0] if state else "")
        if all(j in found and found[j].state in FINAL for j in job_ids) \
                or time.monotonic() > deadline:
            return found
        time.sleep(1.0)


def in_queue(job_ids: list[str], cluster: str | None = None) -> set[str]:
    argv = ["squeue", "-h", "-o", "%i", "-j", ",".join(job_ids)] + (
        ["-M", cluster] if cluster else [])
    return set(subprocess.run(argv, capture_output=True, text=True).stdout.split())


def plain_jobs(name: str, trials: int, parallel: int, command: str, options: list[str],
               poll: float) -> list[str]:
    """The trials as plain jobs (`sbatch OPTIONS --wrap COMMAND`), at most `parallel` in the
    queue at once, topped up every `poll` seconds as a user's loop would: returns their ids
    once every one has left the queue."""
    submitted: list[str] = []
    queued: set[str] = set()
    while len(submitted) < trials or queued:
        while len(submitted) < trials and len(queued) < parallel:
            proc = subprocess.run(["sbatch", "--parsable", f"--job-name={name}-{len(submitted)}",
                                   "--output=/dev/null", "--chdir=/tmp", *options,
                                   f"--wrap={command}"], capture_output=True, text=True)
            if proc.returncode != 0:
                raise RuntimeError(f"sbatch: {proc.stderr.strip()}")
            job_id = proc.stdout.strip().split(";")[0]
            submitted.append(job_id)
            queued.add(job_id)
        time.sleep(poll)
        queued &= in_queue(sorted(queued))
    return submitted


class Reservation:
    """A long job holding `held` nodes and, ahead of everything submitted after it, a job
    asking for `wanted` nodes (the held ones and more): Slurm's backfill reserves those for
    it from the long job's end (`minutes` from now), so on the nodes of `wanted` that are
    free now only a job whose time limit ends before then may start; the rest of the
    partition stays free for any job. Both are cancelled on leaving."""

    def __init__(self, held: str, wanted: str, minutes: int, partition: str = "debug") -> None:
        self.held, self.wanted, self.minutes, self.partition = held, wanted, minutes, partition
        self.job_ids: list[str] = []

    def _sbatch(self, name: str, nodes: str, minutes: int) -> str:
        proc = subprocess.run(["sbatch", "--parsable", f"--job-name={name}", "--exclusive",
                               f"--partition={self.partition}", f"--nodelist={nodes}",
                               f"--time={minutes}", "--output=/dev/null", "--chdir=/tmp",
                               f"--wrap=sleep {minutes * 60}"], capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"sbatch: {proc.stderr.strip()}")
        return proc.stdout.strip().split(";")[0]

    def __enter__(self) -> Reservation:
        self.job_ids.append(self._sbatch("brokerage-long", self.held, self.minutes))
        deadline = time.monotonic() + 60
        while _state(self.job_ids[0]) != "RUNNING":
            if time.monotonic() > deadline:
                raise RuntimeError(f"the long job {self.job_ids[0]} did not start")
            time.sleep(0.5)
        self.job_ids.append(self._sbatch("brokerage-head", self.wanted, 5))
        time.sleep(3)  # a backfill pass (bf_interval=1) plans its reservation
        return self

    def __exit__(self, *exc) -> None:
        subprocess.run(["scancel", *self.job_ids], capture_output=True)
        deadline = time.monotonic() + 60
        while in_queue(self.job_ids) and time.monotonic() < deadline:
            time.sleep(0.5)

    def start_planned(self) -> str:
        """When Slurm plans to start the job at the head (squeue's %S)."""
        return subprocess.run(["squeue", "-h", "-o", "%S", "-j", self.job_ids[1]],
                              capture_output=True, text=True).stdout.strip()


def _state(job_id: str) -> str:
    return subprocess.run(["squeue", "-h", "-o", "%T", "-j", job_id], capture_output=True,
                          text=True).stdout.strip()


class Controller:
    """Another cluster's slurmctld (scripts/slurm-cluster.sh keeps its slurm.conf in a folder
    of the cluster's name beside the first one's): stopped by the pid in its pid file, and
    started again as the script starts it; it recovers its jobs from its saved state."""

    def __init__(self, cluster: str) -> None:
        self.cluster = cluster
        self.conf = Path(os.environ["SLURM_CONF"]).parent / cluster / "slurm.conf"
        pid_lines = [line.split("=", 1)[1] for line in self.conf.read_text().splitlines()
                     if line.startswith("SlurmctldPidFile=")]
        self.pid_file = Path(pid_lines[0])

    def _env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def up(self) -> bool:
        proc = subprocess.run(["scontrol", "ping"], env=self._env(), capture_output=True,
                              text=True)
        return "is UP" in proc.stdout

    def stop(self) -> None:
        pid = int(self.pid_file.read_text().strip())
        os.kill(pid, 15)
        deadline = time.monotonic() + 30
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            if "Z" in _proc_state(pid):
                break
            time.sleep(0.2)

    def start(self) -> None:
        subprocess.run(["slurmctld"], env=self._env(), stdin=subprocess.DEVNULL,
                       capture_output=True, check=True)
        deadline = time.monotonic() + 60
        while not self.up() and time.monotonic() < deadline:
            time.sleep(0.5)


def _proc_state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "X"

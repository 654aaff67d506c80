"""The driver as a Slurm job of its own (`submit --driver-job`): it outlives its time limit
and preemption, and only `hpsearch cancel` makes it cancel trials.

The batch script (driver_script, below) asks Slurm for SIGUSR1 a while
before the time limit (`--signal=B:USR1@LEAD`) and marks the run with HPSEARCH_DRIVER_JOB.
In such a run:

- SIGUSR1 (the time limit is near) or SIGTERM without a cancel request (the limit reached,
  preemption, an admin's scancel, a requeue) make the driver *leave*: it records that it
  left, exits without touching its trials, and the job is requeued (`scontrol requeue`,
  same job id; else a new driver job is submitted). The next run resumes and adopts them.
- `hpsearch cancel` first writes `<exp>/cancel.request`, then sends SIGTERM: that SIGTERM
  stops the search and cancels the trials, as Ctrl-C does for an attached driver.

The request counts only if it is a regular file of the owner's, and `driver.job` is read
only if it is a small one (hpsearch.store.trusted): a file another user put there cancels
nothing and names no job to signal; the driver's log (or `cancel`'s stderr) says so once.
"""

from __future__ import annotations

import os
import shlex
import signal
import sys
import time
from pathlib import Path

from hpsearch.errors import Conflict
from hpsearch.procs import module_argv
from hpsearch.slurm.sbatch import directive
from hpsearch.spec.model import Spec
from hpsearch.store.atomic import replace_file
from hpsearch.store.trusted import Untrusted, present, read_trusted

CANCEL_REQUEST = "cancel.request"
DRIVER_JOB_FILE = "driver.job"  # the driver job's id, for `cancel` and `--wait`
ENV = "HPSEARCH_DRIVER_JOB"
ENV_TIME = "HPSEARCH_DRIVER_TIME"
MIN_LEAD, MAX_LEAD, DEFAULT_LEAD = 30, 300, 300  # seconds of warning before the limit
NEAR_LIMIT = "its Slurm time limit is near"
ENDED = "Slurm ended its job (time limit, preemption or scancel)"


def signal_lead(time_limit: str | None) -> int:
    """Seconds before the driver job's time limit at which Slurm sends SIGUSR1: a fifth of
    the limit, at least MIN_LEAD and at most MAX_LEAD (DEFAULT_LEAD when the partition's
    limit applies). Slurm may send it up to a minute earlier than asked."""
    from hpsearch.spec.durations import parse_time_limit
    seconds = parse_time_limit(time_limit) if time_limit else None
    if not seconds:
        return DEFAULT_LEAD
    return int(min(MAX_LEAD, max(MIN_LEAD, seconds / 5)))


def in_driver_job() -> bool:
    """Is this process the driver run of a driver job (not a trial it submitted)?"""
    job = os.environ.get("SLURM_JOB_ID")
    return bool(job) and os.environ.get(ENV) == job


_early: list[int] = []  # signals that came before the driver could take them


def arm() -> None:
    """In a driver job, from the start: a SIGUSR1 that comes before the driver runs (Slurm
    may send it up to a minute early) is kept for it (take_early), not fatal."""
    signal.signal(signal.SIGUSR1, lambda signum, frame: _early.append(signum))


def take_early() -> list[int]:
    signals = list(_early)
    _early.clear()
    return signals


def request_cancel(exp_dir: Path) -> None:
    """Write the request (0600) by rename: whatever was at its path (a link, another user's
    file) is replaced, and a link at the temporary file's path is never written through."""
    replace_file(exp_dir / CANCEL_REQUEST, f"{time.time()}\n")


def cancel_requested(exp_dir: Path) -> bool:
    return present(exp_dir / CANCEL_REQUEST, on_refused=_refused)


_told: set[str] = set()


def _refused(message: str) -> None:
    """Say once (in the driver job's log, or on cancel's stderr) why a file was not obeyed.
    One write(2): leave_on runs in a signal handler, where print may be reentrant."""
    if message not in _told:
        _told.add(message)
        os.write(sys.stderr.fileno(), f"hpsearch: {message}\n".encode())


def _driver_job_id(exp_dir: Path) -> str | None:
    """The recorded driver job's id; None if there is none, or the file is not a small
    regular file of this user's."""
    path = exp_dir / DRIVER_JOB_FILE
    try:
        raw = read_trusted(path, 256)
    except Untrusted as exc:
        _refused(f"refused {path}: {exc}")
        return None
    return (raw or b"").decode("ascii", "replace").strip() or None


def clear_cancel(exp_dir: Path) -> None:
    (exp_dir / CANCEL_REQUEST).unlink(missing_ok=True)


def leave_on(exp_dir: Path):
    """The Driver's leave_on for a driver job: why a signal makes it leave, or None when it
    must stop and cancel (a SIGTERM that `hpsearch cancel` sent, or Ctrl-C)."""
    def reason(signum: int) -> str | None:
        if signum == signal.SIGUSR1:
            return NEAR_LIMIT
        if signum == signal.SIGTERM and not cancel_requested(exp_dir):
            return ENDED
        return None
    return reason


def continue_elsewhere(spec: Spec, why: str) -> str:
    """After the driver left: requeue this driver job (same id) so that a new run resumes
    the search. If Slurm refuses and the driver left because its time limit was near, a new
    driver job is submitted; after a SIGTERM (an scancel, a preemption that cancels) it is
    not: the trials go on, and `hpsearch resume` continues. Returns what was done."""
    from hpsearch.slurm.commands import Slurm
    from hpsearch.slurm.failures import SlurmError, retrying
    slurm = Slurm()
    job_id = os.environ["SLURM_JOB_ID"]
    try:
        retrying(lambda: slurm.requeue(job_id), attempts=3)
        return f"driver job {job_id} requeued"
    except SlurmError as exc:
        if why != NEAR_LIMIT:
            return (f"driver job {job_id} ended and could not be requeued ({exc}); its trials "
                    f"keep running: `hpsearch resume {spec.name}` continues the search")
        new_id = submit(spec, os.environ.get(ENV_TIME) or None, slurm)
        return f"driver job {job_id} could not be requeued ({exc}); new driver job {new_id}"


def submit(spec: Spec, time_limit: str | None, slurm=None) -> str:
    """sbatch the driver job and record its id in the experiment dir."""
    import sys

    from hpsearch.slurm.commands import Slurm
    job_id = (slurm or Slurm()).sbatch(driver_script(spec, sys.executable, time_limit))
    replace_file(spec.experiment_dir / DRIVER_JOB_FILE, job_id + "\n")  # `cancel` finds it here
    return job_id


def stop(exp_dir: Path, wait: float) -> str | None:
    """If the driver runs as a Slurm job: ask it to cancel its trials (request file, then
    SIGTERM) and wait until it let go of the experiment. A driver job still pending (never
    started, or requeued) is simply cancelled, and None returned: the caller then cancels
    the trials itself, as with no driver. None too when there is no driver job."""
    job_id = _driver_job_id(exp_dir)
    if job_id is None:
        return None
    from hpsearch.slurm.commands import Slurm
    from hpsearch.slurm.failures import retrying
    slurm = Slurm()
    queued = retrying(lambda: slurm.squeue([job_id]))
    if not queued:
        return None  # it has ended
    if queued[0].state == "PENDING":
        retrying(lambda: slurm.scancel([job_id]))
        return None
    request_cancel(exp_dir)
    retrying(lambda: slurm.scancel([job_id], signal="TERM"))
    deadline = time.monotonic() + wait
    while retrying(lambda: slurm.squeue([job_id])) and time.monotonic() < deadline:
        time.sleep(0.5)
    if retrying(lambda: slurm.squeue([job_id])):
        raise Conflict(f"driver job {job_id} did not stop within {wait:g}s")
    return f"stopped the driver job {job_id}; its running trials were cancelled"


def driver_name(spec: Spec) -> str:
    """The job name of the experiment's driver job (`submit --driver-job`)."""
    return f"hps-driver.{spec.name}" + (f".{spec.instance}" if spec.instance else "")


def driver_script(spec: Spec, python: str, time_limit: str | None) -> str:
    """The batch script that runs the experiment's driver as its own small job."""
    exp_dir = spec.experiment_dir
    opts = [f"--job-name={driver_name(spec)}", f"--output={exp_dir / 'driver.log'}",
            "--open-mode=append", "--nodes=1", "--ntasks=1", "--cpus-per-task=1",
            "--requeue", f"--signal=B:USR1@{signal_lead(time_limit)}",
            f"--chdir={spec.workdir}"]
    res = spec.resources
    for key, value in (("time", time_limit), ("partition", res.partition),
                       ("account", res.account), ("qos", res.qos)):
        if value is not None:
            opts.append(f"--{key}={value}")
    command = module_argv(python, "hpsearch", "resume", spec.name, "--runs-dir",
                          str(spec.runs_dir), "--executor", "slurm", "--quiet")
    lines = ["#!/bin/bash"] + [directive(opt) for opt in opts]
    lines.append(f"# hpsearch: the driver of experiment {spec.name}, as a Slurm job; near its")
    lines.append("# time limit (SIGUSR1) or when preempted it leaves its trials running and")
    lines.append("# requeues itself (hpsearch/driver/slurm_job.py)")
    lines.append(f'export {ENV}="$SLURM_JOB_ID" '
                 f"{ENV_TIME}={shlex.quote(time_limit or '')}")
    lines.append("exec " + shlex.join(command))
    return "\n".join(lines) + "\n"

"""Local executor: each attempt is a `/bin/sh -c` process group on this machine.

`parallel` slots, optional GPU slots (each trial gets its own CUDA_VISIBLE_DEVICES), a per-attempt
timeout, and stop by process group (SIGTERM, then SIGKILL after `grace`). Waiting uses pidfds,
so a finishing trial frees its slot at once, and processes adopted after a driver restart
(no longer our children) are watched the same way; their exit code comes from the
`exit_code` file the wrapper shell writes on exit.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from hpsearch.executors import procs
from hpsearch.executors.base import Adoptable, Ended, Executor, Launch, Started

# Runs before the user's command in the same shell; records its exit status for a driver
# that may have been restarted meanwhile (and so cannot waitpid on it).
EXIT_TRAP = "trap 'printf \"%s\\n\" \"$?\" > \"$HPSEARCH_TRIAL_DIR/exit_code\"' EXIT\n"


@dataclass
class _Running:
    trial_id: int
    attempt: int
    pid: int
    trial_dir: Path
    popen: subprocess.Popen | None   # None when adopted after a restart
    fd: int | None                   # pidfd
    gpus: list[str]
    deadline: float | None           # timeout
    kill_at: float | None = None     # SIGKILL time once SIGTERM was sent
    reason: str | None = None        # timeout | cancelled, once we decided to stop it


def detect_gpus() -> list[str]:
    """GPU ids from CUDA_VISIBLE_DEVICES, else from nvidia-smi, else none."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [g for g in visible.split(",") if g.strip() and g.strip() != "-1"]
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    except (subprocess.SubprocessError, OSError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


class LocalExecutor(Executor):
    def __init__(self, parallel: int, gpus: list[str] | None = None, gpus_per_trial: int = 1,
                 timeout: float | None = None, grace: float = 10.0) -> None:
        self.parallel = parallel
        self.free_gpus = list(gpus) if gpus else None
        self.gpus_per_trial = max(1, gpus_per_trial)
        self.timeout, self.grace = timeout, grace
        self.host = socket.gethostname()
        self.running_: dict[int, _Running] = {}
        self.poller = select.poll()
        self.by_fd: dict[int, int] = {}

    # -- Executor ---------------------------------------------------------------------------
    def free_slots(self) -> int:
        free = self.parallel - len(self.running_)
        if self.free_gpus is not None:
            free = min(free, len(self.free_gpus) // self.gpus_per_trial)
        return max(0, free)

    def running(self) -> list[int]:
        return list(self.running_)

    def submit(self, launch: Launch) -> Started:
        gpus = self._take_gpus()
        env = {**os.environ, **launch.env}
        if self.free_gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
        launch.trial_dir.mkdir(parents=True, exist_ok=True)
        with open(launch.trial_dir / "stdout.log", "ab") as out, \
                open(launch.trial_dir / "stderr.log", "ab") as err:
            popen = subprocess.Popen(["/bin/sh", "-c", EXIT_TRAP + launch.command],
                                     cwd=launch.workdir, env=env, stdin=subprocess.DEVNULL,
                                     stdout=out, stderr=err, start_new_session=True)
        pid_start = procs.start_time(popen.pid)
        self._watch(_Running(launch.trial_id, launch.attempt, popen.pid, launch.trial_dir, popen,
                             None, gpus, self._deadline()))
        return Started(launch.trial_id, launch.attempt, self.host, popen.pid, pid_start,
                       ",".join(gpus) if self.free_gpus is not None else None)

    def adopt(self, known: Adoptable) -> Started | Ended | None:
        pid = known.pid if procs.alive(known.pid, known.pid_start) else None
        if pid is None:
            pid = procs.find_trial_leader(known.trial_dir, known.attempt)
        if pid is not None:
            gpus = known.gpus.split(",") if known.gpus else []
            if self.free_gpus is not None:
                self.free_gpus = [g for g in self.free_gpus if g not in gpus]
            self._watch(_Running(known.trial_id, known.attempt, pid, known.trial_dir, None, None,
                                 gpus, self._deadline()))
            return Started(known.trial_id, known.attempt, self.host, pid, procs.start_time(pid),
                           known.gpus)
        code = self._exit_code_file(known.trial_dir)
        if code is not None:
            return Ended(known.trial_id, known.attempt, code, "exited",
                         "ended while no driver was running")
        if known.pid is None:
            return None
        return Ended(known.trial_id, known.attempt, None, "lost",
                     "the process ended while no driver was running and left no exit code")

    def cancel(self, trial_id: int) -> None:
        run = self.running_.get(trial_id)
        if run is not None and run.kill_at is None:
            self._stop(run, "cancelled")

    def poll(self, timeout: float) -> list[Ended]:
        now = time.monotonic()
        wait = timeout
        for run in self.running_.values():
            for moment in (run.deadline, run.kill_at):
                if moment is not None:
                    wait = min(wait, max(0.0, moment - now))
        if any(run.fd is None for run in self.running_.values()):
            wait = min(wait, 0.01)  # no pidfd for some process: fall back to short sleeps
        if self.by_fd:
            self.poller.poll(wait * 1000)
        elif wait > 0:
            time.sleep(wait)
        ended = []
        now = time.monotonic()
        for run in list(self.running_.values()):
            code = self._exit_status(run)
            if code is not _STILL_RUNNING:
                ended.append(self._finish(run, code))
            elif run.kill_at is not None and now >= run.kill_at:
                procs.signal_group(run.pid, signal.SIGKILL)
            elif run.kill_at is None and run.deadline is not None and now >= run.deadline:
                self._stop(run, "timeout")
        return ended

    def close(self) -> None:
        for fd in list(self.by_fd):
            os.close(fd)
        self.by_fd.clear()

    # -- helpers ---------------------------------------------------------------------------
    def _deadline(self) -> float | None:
        return time.monotonic() + self.timeout if self.timeout else None

    def _take_gpus(self) -> list[str]:
        if self.free_gpus is None:
            return []
        taken, self.free_gpus = (self.free_gpus[:self.gpus_per_trial],
                                 self.free_gpus[self.gpus_per_trial:])
        return taken

    def _watch(self, run: _Running) -> None:
        run.fd = procs.pidfd(run.pid)
        if run.fd is not None:
            self.poller.register(run.fd, select.POLLIN)
            self.by_fd[run.fd] = run.trial_id
        self.running_[run.trial_id] = run

    def _stop(self, run: _Running, reason: str) -> None:
        run.reason = reason
        run.kill_at = time.monotonic() + self.grace
        procs.signal_group(run.pid, signal.SIGTERM)

    def _exit_status(self, run: _Running):
        if run.popen is not None:
            code = run.popen.poll()
            if code is None:
                return _STILL_RUNNING
            return 128 - code if code < 0 else code  # killed by signal N -> 128+N, as shells say
        if procs.start_time(run.pid) is not None:
            return _STILL_RUNNING
        return self._exit_code_file(run.trial_dir)

    def _finish(self, run: _Running, code: int | None) -> Ended:
        procs.signal_group(run.pid, signal.SIGKILL)  # reap whatever the trial left behind
        if run.fd is not None:
            self.poller.unregister(run.fd)
            os.close(run.fd)
            del self.by_fd[run.fd]
        del self.running_[run.trial_id]
        if self.free_gpus is not None:
            self.free_gpus.extend(run.gpus)
        if run.reason is not None:
            return Ended(run.trial_id, run.attempt, code, run.reason,
                         f"stopped after {self.timeout:g}s timeout" if run.reason == "timeout"
                         else "cancelled")
        if code is None:
            return Ended(run.trial_id, run.attempt, None, "lost",
                         "the process ended and left no exit code")
        return Ended(run.trial_id, run.attempt, code, "exited", _signal_detail(code))

    @staticmethod
    def _exit_code_file(trial_dir: Path) -> int | None:
        try:
            return int((trial_dir / "exit_code").read_text().strip())
        except (OSError, ValueError):
            return None


_STILL_RUNNING = object()


def _signal_detail(code: int) -> str:
    if code <= 128:
        return ""
    try:
        return f"killed by {signal.Signals(code - 128).name}"
    except ValueError:
        return ""

"""Local executor: each attempt is a `/bin/sh -c` process group on this machine.

`parallel` slots, optional GPU slots (each trial gets its own CUDA_VISIBLE_DEVICES), a per-attempt
timeout, and stop by process group: SIGTERM, then SIGKILL after `grace`. Meanwhile the trial
may save and exit: the wrapper shell outlives its command (launch.attempt.STOP_TRAP), and a
stopped attempt's other processes keep the rest of the grace once the shell has ended.
Waiting uses pidfds, so a finishing trial frees its slot at once, and processes adopted after
a driver restart (no longer our children) are watched the same way; their exit code comes
from the `exit_code` file the wrapper shell writes on exit.

Processes are spawned on the driver's thread (subprocess uses vfork: well under a millisecond
here; worker threads cost more in lock hand-offs than they saved, benchmarks/overhead.py).
With `ahead`, an attempt submitted while every slot is busy waits with its trial dir made and
starts inside poll() the moment a trial exits 0, before the driver finalizes that one: short
trials then wait for no bookkeeping. A slot freed by a failure waits for the driver to look
(a retry, or search.max_failures stopping the search) until its next poll(). poll() reports
each start (or launch error).
"""

from __future__ import annotations

import errno
import os
import select
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hpsearch import procs
from hpsearch.errors import BadInput
from hpsearch.executors.base import Adoptable, Ended, EndReason, Executor, Started
from hpsearch.launch.affinity import not_narrowed, slot_cpus, spawning_on
from hpsearch.launch.attempt import (
    Launch,
    open_unlinked,
    prepare_trial_dir,
    read_exit_code,
    shell_body,
)

if TYPE_CHECKING:
    from hpsearch.spec.model import Spec
    from hpsearch.store.store import Store


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
    reason: EndReason | None = None  # timeout | cancelled, once we decided to stop it
    signal_at: float | None = None   # when to send the checkpoint signal (before the deadline)
    timeout: float | None = None     # this attempt's timeout (the retry rules may raise it)
    look_again: float = 0.0          # stopped, its shell ended: when to scan for its group again
    peak_rss_mb: float | None = None  # once reaped: its peak memory (Ended)
    tree_peak_kib: int = 0           # the most its process tree held at one sample


class _Ready:
    """An attempt laid out to start: its trial dir made, its log files open for appending
    (done when it is submitted, so a slot that frees waits only for the fork)."""

    def __init__(self, launch: Launch) -> None:
        self.launch = launch
        prepare_trial_dir(launch)
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
        self.out = open_unlinked(launch.trial_dir / "stdout.log", flags)
        try:
            self.err = open_unlinked(launch.trial_dir / "stderr.log", flags)
        except OSError:
            os.close(self.out)
            raise

    def close(self) -> None:
        for fd in (self.out, self.err):
            if fd >= 0:
                os.close(fd)
        self.out = self.err = -1


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
    @classmethod
    def from_spec(cls, spec: Spec, store: Store | None, ask_ahead: bool) -> LocalExecutor:
        ex = spec.executor
        gpus = None
        if ex.gpus == "auto":
            gpus = detect_gpus() or None
        elif ex.gpus:
            gpus = list(ex.gpus)
        per_trial = spec.resources.gpus_per_node or 1  # the largest trial's
        if gpus is not None and len(gpus) < per_trial:
            raise BadInput(f"executor.gpus lists {len(gpus)} device(s) but a trial needs "
                           f"{per_trial} (resources.gpus_per_node)", str(spec.source or ""),
                           key="executor.gpus")
        return cls(spec.search.parallel, gpus, spec.least_gpus_per_node() or 1,
                   ex.timeout, ex.grace, spec.checkpoints.signal, spec.checkpoints.signal_before,
                   ahead=1 if ask_ahead else 0)

    def __init__(self, parallel: int, gpus: list[str] | None = None, gpus_per_trial: int = 1,
                 timeout: float | None = None, grace: float = 10.0,
                 signal_name: str | None = None, signal_before: float = 120.0,
                 ahead: int = 0) -> None:
        """signal_name: sent to the trial's process group `signal_before` seconds before its
        timeout (checkpoints.signal), so it can save and exit to be resumed. ahead: how many
        attempts may wait, trial dir made, for a slot; each starts the moment one frees,
        before the driver has finalized the trial that ended (hpsearch.driver.session says when).
        gpus_per_trial: the GPU slots of a launch that does not say (Launch.resources), and
        the fewest any trial takes (per-trial resources: what free_slots counts with). A
        trial takes max(1, its gpus_per_node) slots; attempts start in the order submitted,
        so a large one waiting for its slots is never overtaken by smaller ones."""
        self.parallel = parallel
        self.signal = getattr(signal, f"SIG{signal_name}") if signal_name else None
        self.signal_before = signal_before
        self.signal_name = signal_name
        self.free_gpus = list(gpus) if gpus else None
        self.gpus_per_trial = max(1, gpus_per_trial)
        self.timeout, self.grace = timeout, grace
        self.ahead = ahead
        self.host = socket.gethostname()
        self.base_env = dict(os.environ)
        self.running_: dict[int, _Running] = {}
        self.waiting: dict[int, _Ready] = {}  # submitted while every slot was busy, in order
        self.events: list[Started | Ended] = []  # spawns and launch errors, for the next poll
        self.poller = select.poll()
        self.by_fd: dict[int, int] = {}
        self.next_sample = 0.0  # when _sample_memory next looks

    # -- Executor ---------------------------------------------------------------------------
    def free_slots(self) -> int:
        return max(0, self._runnable()) + self.ahead - len(self.waiting)

    def _runnable(self) -> int:
        """How many more attempts could start now."""
        free = self.parallel - len(self.running_)
        if self.free_gpus is not None:
            free = min(free, len(self.free_gpus) // self.gpus_per_trial)
        return free

    def _gpus_of(self, launch: Launch) -> int:
        """The GPU slots this attempt takes: its trial's own gpus_per_node, at least 1."""
        if launch.resources is None:
            return self.gpus_per_trial
        return max(1, launch.resources.gpus_per_node)

    def _fits(self, launch: Launch) -> bool:
        """Whether the attempt could start now: a slot, and its GPU slots, are free."""
        return len(self.running_) < self.parallel and (
            self.free_gpus is None or len(self.free_gpus) >= self._gpus_of(launch))

    def submit(self, launch: Launch) -> None:
        """Start it now, or (every slot busy) let it wait for one; poll() reports it as
        Started when it starts, or as Ended if it could not."""
        self._start_waiting()  # those submitted earlier first
        try:
            ready = _Ready(launch)  # the trial dir and its log files, before a slot frees
        except OSError as exc:
            self.events.append(_launch_failed(launch, exc))
            return
        if not self.waiting and self._fits(launch):
            self._spawn(ready)
        else:
            self.waiting[launch.trial_id] = ready

    def _spawn(self, ready: _Ready) -> None:
        """Start the attempt's process on the driver's thread (a vfork-exec of /bin/sh:
        about a millisecond, however large the driver)."""
        launch = ready.launch
        gpus = self._take_gpus(self._gpus_of(launch))
        env = {**self.base_env, **launch.env}
        if self.free_gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
        cpus = slot_cpus(launch.env) if launch.narrow_cpus else None
        try:
            with spawning_on(cpus) as narrowed:
                if launch.narrow_cpus and not narrowed:  # nor could its shell: say so
                    os.write(ready.err, not_narrowed(env).encode())
                popen = subprocess.Popen(["/bin/sh", "-c", shell_body(self.signal_name,
                                                                      launch.command)],
                                         cwd=launch.workdir, env=env,
                                         stdin=subprocess.DEVNULL, stdout=ready.out,
                                         stderr=ready.err, start_new_session=True)
        except OSError as exc:
            self._give_back_gpus(gpus)
            self.events.append(_launch_failed(launch, exc))
            return
        finally:
            ready.close()
        timeout = self.timeout * launch.time_factor if self.timeout else None
        run = _Running(launch.trial_id, launch.attempt, popen.pid, launch.trial_dir, popen,
                       None, gpus, self._deadline(timeout), timeout=timeout)
        self._arm_signal(run)
        self._watch(run)
        self.events.append(Started(launch.trial_id, launch.attempt, self.host, popen.pid,
                                   procs.start_time(popen.pid), ",".join(gpus)
                                   if self.free_gpus is not None else None, at=time.time()))

    def _start_waiting(self) -> None:
        """In the order submitted: the first waits until its GPU slots are free, and those
        after it wait too (a 2-GPU trial is not starved by a stream of 1-GPU ones)."""
        while self.waiting and self._fits(self.waiting[next(iter(self.waiting))].launch):
            self._spawn(self.waiting.pop(next(iter(self.waiting))))

    def withdraw(self) -> list[int]:
        withdrawn = list(self.waiting)
        for ready in self.waiting.values():
            ready.close()
        self.waiting.clear()
        return withdrawn

    def adopt(self, known: Adoptable) -> Started | Ended | None:
        pid = known.pid if procs.alive(known.pid, known.pid_start) else None
        if pid is None:
            pid = procs.find_trial_leader(known.trial_dir, known.attempt)
        if pid is not None:
            gpus = known.gpus.split(",") if known.gpus else []
            if self.free_gpus is not None:
                self.free_gpus = [g for g in self.free_gpus if g not in gpus]
            run = _Running(known.trial_id, known.attempt, pid, known.trial_dir, None, None,
                           gpus, self._deadline(self.timeout), timeout=self.timeout)
            self._arm_signal(run)
            self._watch(run)
            return Started(known.trial_id, known.attempt, self.host, pid, procs.start_time(pid),
                           known.gpus)
        code = read_exit_code(known.trial_dir, known.attempt)
        if code is not None:
            return Ended(known.trial_id, known.attempt, code, "exited",
                         "ended while no driver was running")
        if known.pid is None:
            return None
        return Ended(known.trial_id, known.attempt, None, "lost",
                     "the process ended while no driver was running and left no exit code")

    def wake_on(self, fd: int | None) -> None:
        if self.wake_fd is not None:
            self.poller.unregister(self.wake_fd)
        super().wake_on(fd)
        if fd is not None:  # beside the pidfds: poll() returns when it is readable
            self.poller.register(fd, select.POLLIN)

    def cancel(self, trial_id: int) -> None:
        waiting = self.waiting.pop(trial_id, None)
        if waiting is not None:
            waiting.close()
            self.events.append(Ended(trial_id, waiting.launch.attempt, None, "cancelled",
                                     "cancelled before it started"))
            return
        run = self.running_.get(trial_id)
        if run is not None and run.kill_at is None:
            self._stop(run, "cancelled")

    def poll(self, timeout: float) -> list[Started | Ended]:
        self._start_waiting()  # into slots the driver has looked at since
        events, self.events = self.events, []
        now = time.monotonic()
        wait = 0.0 if events else timeout
        if self.running_:
            wait = min(wait, self._sample_memory(now))
        for run in self.running_.values():
            for moment in (run.deadline, run.kill_at, run.signal_at):
                if moment is not None:
                    wait = min(wait, max(0.0, moment - now))
        if any(run.fd is None for run in self.running_.values()):
            wait = min(wait, 0.01)  # no pidfd for some process: fall back to short sleeps
        ready = {fd for fd, _ in self.poller.poll(wait * 1000)}
        now = time.monotonic()
        for run in list(self.running_.values()):
            if run.signal_at is not None and now >= run.signal_at and run.kill_at is None:
                run.signal_at = None
                if self.signal is not None:  # always: signal_at is set only with a signal
                    self.signal_run(run.trial_id, run.pid, self.signal)
            due = (run.kill_at or run.deadline or float("inf")) <= now
            if run.fd is not None and run.fd not in ready and not due:
                continue  # its pidfd says it still runs
            code = self._exit_status(run)
            if code is not _STILL_RUNNING and self._lingers(run, now):
                continue
            if code is not _STILL_RUNNING:
                events.append(self._finish(run, code))
                if code == 0 and run.reason is None:  # its slot at once; the driver
                    self._start_waiting()  # finalizes after. After a failure it looks first
                    # (a retry, search.max_failures), and the next poll() starts the rest
            elif run.kill_at is not None and now >= run.kill_at:
                self.signal_run(run.trial_id, run.pid, signal.SIGKILL)
            elif run.kill_at is None and run.deadline is not None and now >= run.deadline:
                self._stop(run, "timeout")
        events += self.events
        self.events = []
        return events

    def close(self) -> None:
        """Waiting attempts stay unstarted: the store has them `submitting` with no process,
        so the next driver launches them."""
        self.withdraw()
        for fd in list(self.by_fd):
            os.close(fd)
        self.by_fd.clear()

    # -- helpers ---------------------------------------------------------------------------
    def _sample_memory(self, now: float) -> float:
        """Every MEMORY_SAMPLE s, each running trial's memory summed over its processes
        (procs.tree_rss_kib); its peak is the larger of the highest sum and wait4's largest
        process (_reap). Returns the seconds to the next sample."""
        if now >= self.next_sample:
            self.next_sample = now + MEMORY_SAMPLE
            held = procs.tree_rss_kib(run.pid for run in self.running_.values()
                                      if run.popen is not None)
            for run in self.running_.values():
                run.tree_peak_kib = max(run.tree_peak_kib, held.get(run.pid, 0))
        return max(0.0, self.next_sample - now)

    def _deadline(self, timeout: float | None) -> float | None:
        return time.monotonic() + timeout if timeout else None

    def _arm_signal(self, run: _Running) -> None:
        if self.signal is not None and run.deadline is not None:
            run.signal_at = max(time.monotonic(), run.deadline - self.signal_before)

    def _take_gpus(self, count: int) -> list[str]:
        if self.free_gpus is None:
            return []
        taken, self.free_gpus = self.free_gpus[:count], self.free_gpus[count:]
        return taken

    def _give_back_gpus(self, gpus: list[str]) -> None:
        if self.free_gpus is not None:
            self.free_gpus.extend(gpus)

    def _watch(self, run: _Running) -> None:
        run.fd = procs.pidfd(run.pid)
        if run.fd is not None:
            self.poller.register(run.fd, select.POLLIN)
            self.by_fd[run.fd] = run.trial_id
        self.running_[run.trial_id] = run

    def _stop(self, run: _Running, reason: EndReason) -> None:
        run.reason = reason
        run.kill_at = time.monotonic() + self.grace
        self.signal_run(run.trial_id, run.pid, signal.SIGTERM)

    def signal_run(self, trial_id: int, pgid: int, sig: int) -> None:
        """Send a running attempt (its shell leads process group `pgid`) a stop, checkpoint
        or kill signal: to that group. A subclass whose attempts run elsewhere delivers it
        there (a pilot's trials on its other nodes: hpsearch.pilot.program)."""
        procs.signal_group(pgid, sig)

    def _lingers(self, run: _Running, now: float) -> bool:
        """Whether a stopped attempt whose shell has ended waits on: other processes of its
        group, or of the attempt in sessions of their own (torchrun's workers: found by their
        environment), still run (ranks, processes saving their part of a checkpoint),
        and the grace they were given is not up. Its slot stays taken until they end, or
        until kill_at (SIGKILL to the group, as for one whose shell still runs)."""
        if run.kill_at is None or now >= run.kill_at:
            return False
        if now >= run.look_again:  # a scan of /proc: not at every short poll
            if not procs.group_running(run.pid) and not procs.attempt_processes(
                    run.trial_dir, run.attempt, run.pid):
                return False  # zombies only, and no worker in a session of its own
            run.look_again = now + LINGER_LOOK
        if run.fd is not None:  # the shell's pidfd stays readable: look at short intervals
            self._unwatch(run)
        return True

    def _unwatch(self, run: _Running) -> None:
        if run.fd is not None:
            self.poller.unregister(run.fd)
            os.close(run.fd)
            del self.by_fd[run.fd]
            run.fd = None

    def _exit_status(self, run: _Running):
        if run.popen is not None:
            code = _reap(run)
            if code is None:
                return _STILL_RUNNING
            return 128 - code if code < 0 else code  # killed by signal N -> 128+N, as shells say
        if procs.start_time(run.pid) is not None:
            return _STILL_RUNNING
        return read_exit_code(run.trial_dir, run.attempt)

    def _finish(self, run: _Running, code: int | None) -> Ended:
        seen = time.time()  # its end, before the next waiting attempt is spawned
        procs.signal_group(run.pid, signal.SIGKILL)  # reap whatever the trial left behind
        if run.reason is not None:  # stopped: its workers in sessions of their own (torchrun)
            procs.kill(procs.attempt_processes(run.trial_dir, run.attempt, run.pid),
                       signal.SIGKILL)
        self._unwatch(run)
        del self.running_[run.trial_id]
        self._give_back_gpus(run.gpus)
        if run.reason is not None:
            return Ended(run.trial_id, run.attempt, code, run.reason,
                         f"stopped after {run.timeout:g}s timeout" if run.reason == "timeout"
                         else "cancelled", at=seen, peak_rss_mb=run.peak_rss_mb)
        if code is None:
            return Ended(run.trial_id, run.attempt, None, "lost",
                         "the process ended and left no exit code", at=seen)
        return Ended(run.trial_id, run.attempt, code, "exited", _signal_detail(code), at=seen,
                     peak_rss_mb=run.peak_rss_mb)


def _reap(run: _Running) -> int | None:
    """Its shell's exit status (Popen's returncode: -N if killed by signal N), or None while
    it runs. Reaped with wait4, whose ru_maxrss is the peak resident memory of the largest
    process of the tree (a process's own, or a waited-for descendant's); run.peak_rss_mb is
    that or the most its processes held together at a sample, whichever is larger."""
    popen = run.popen
    assert popen is not None
    if popen.returncode is not None:
        return popen.returncode
    try:
        pid, status, usage = os.wait4(run.pid, os.WNOHANG)
    except ChildProcessError:  # reaped elsewhere: Popen knows its status
        return popen.poll()
    if pid == 0:
        return None
    popen.returncode = os.waitstatus_to_exitcode(status)
    run.peak_rss_mb = max(usage.ru_maxrss, run.tree_peak_kib) / 1024  # KiB on Linux
    return popen.returncode


def _launch_failed(launch: Launch, exc: OSError) -> Ended:
    """A launch that failed: the machine's storage (stop the search), or the trial's."""
    storage = exc.errno in _STORAGE_ERRNOS and str(exc.filename or "").startswith(
        str(launch.trial_dir.parent.parent))  # the experiment's dir
    where = f": {exc.filename}" if exc.filename else ""  # a path, never its repr
    return Ended(launch.trial_id, launch.attempt, None,
                 "storage_error" if storage else "launch_error",
                 f"could not start: {exc.strerror or exc}{where}")


_STILL_RUNNING = object()
# Seconds between scans of /proc for a stopped attempt's processes that are more than
# zombies (no PID 1 reaps them in some containers), once its shell has ended; between
# scans, signal 0 to its group tells whether any is left at all.
LINGER_LOOK = 0.2
# Seconds between samples of the running trials' memory (their processes' resident memory
# summed), as Slurm's jobacct_gather samples a job's. One scan of /proc took 2.3 ms with 88
# processes here: 0.3% of a core each second. A peak shorter than this between two samples
# is seen only through wait4 (the largest single process).
MEMORY_SAMPLE = 1.0
# Errors writing the trial dir that are the machine's, not the trial's.
_STORAGE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS)


def _signal_detail(code: int) -> str:
    if code <= 128:
        return ""
    try:
        return f"killed by {signal.Signals(code - 128).name}"
    except ValueError:
        return ""

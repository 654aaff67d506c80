"""A trial's peak memory on a pilot's other node (docs/brokerage.md#scouts).

The pilot measures the memory of a trial on its own node itself (the local executor: the
trial's process tree summed at samples each second, or wait4's largest process where more).
A trial on another of the pilot's nodes runs in an `srun --overlap` step, whose process the
pilot sees is srun's. So where the scouts size memory (`resources.mem: auto`), the step
runs this program first, which starts the trial's shell, measures its tree the same way,
and writes the peak into the trial dir (PEAK_FILE, "KIB ATTEMPT", private) once the shell
has ended; the pilot reads it with the exit code.

It forwards no signal: Slurm signals every process of a step (scancel --signal, the time
limit's SIGTERM), the trial's shell among them, so a forwarded one would arrive twice. It
only outlives them, so that the step ends when the trial does. Its exit status is the
shell's (128 + N for a signal), though the pilot reads the trial's end from its exit_code.

    python -c SAFE_MODULE_RUN hpsearch.pilot.tree_watch TRIAL_DIR ATTEMPT COMMAND [ARG...]
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from hpsearch.procs import module_argv, tree_rss_kib
from hpsearch.store.atomic import replace_file
from hpsearch.store.trusted import read_attempt_value

PEAK_FILE = "peak_rss"
SAMPLE_EVERY = 1.0  # seconds between samples of the tree, as the local executor's
POLL = 0.02  # seconds between looks at whether the shell ended, where there is no pidfd
# What Slurm may send a step: outlived, not forwarded (the shell gets them from Slurm)
OUTLIVED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2,
            signal.SIGQUIT, signal.SIGALRM)


def argv(python: str, trial_dir: Path, attempt: int, command: Sequence[str]) -> list[str]:
    """The argv that runs `command` (the trial's shell) under the watch."""
    return module_argv(python, "hpsearch.pilot.tree_watch", str(trial_dir), str(attempt),
                       *command)


def read_peak_mb(trial_dir: Path, attempt: int,
                 on_refused: Callable[[str], None] | None = None) -> float | None:
    """The peak attempt `attempt` reached, in MB; None if no watch wrote one for it (or the
    file is not a small regular file of this user's: on_refused is told)."""
    kib = read_attempt_value(trial_dir / PEAK_FILE, attempt, on_refused, named=True)
    return kib / 1024 if kib is not None else None


def watch(trial_dir: Path, attempt: int, command: Sequence[str]) -> int:
    """Run `command`, sample its tree, write its peak; its exit status."""
    for sig in OUTLIVED:  # a handler, not SIG_IGN: the shell starts with the defaults
        signal.signal(sig, lambda *_: None)
    pid = os.posix_spawnp(command[0], list(command), dict(os.environ))
    ended = _waiter(pid)
    peak_kib = 0
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            break
        peak_kib = max(peak_kib, tree_rss_kib([pid]).get(pid, 0))
        ended(SAMPLE_EVERY)
    peak_kib = max(peak_kib, usage.ru_maxrss)  # KiB on Linux
    try:
        replace_file(trial_dir / PEAK_FILE, f"{peak_kib} {attempt}\n")
    except OSError:
        pass  # not measured: the pilot says none
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code


def _waiter(pid: int) -> Callable[[float], None]:
    """wait(seconds): returns after `seconds`, or as soon as the process `pid` ends (its
    pidfd turns readable), so that the step ends with the trial, not at the next sample;
    where there is no pidfd (Linux before 5.3), within POLL."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        def poll(seconds: float) -> None:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline and not os.waitid(
                    os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT):
                time.sleep(POLL)
        return poll
    return lambda seconds: select.select([fd], [], [], seconds) and None


def main(args: Sequence[str]) -> int:
    if len(args) < 3 or not args[1].isdigit():
        print("usage: tree_watch TRIAL_DIR ATTEMPT COMMAND [ARG...]", file=sys.stderr)
        return 2
    return watch(Path(args[0]), int(args[1]), args[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

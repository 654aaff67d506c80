"""Linux process facts the local executor needs: identity across pid reuse, finding a trial's
process after a driver restart, waiting on processes that are not our children, and
stopping a whole process group; and how hpsearch starts its own Python programs
(module_argv: never importing from the folder they start in)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

# `python -m MODULE` puts the folder it starts in first on sys.path. hpsearch starts its own
# programs (pilot jobs, the driver job, warm servers and clients, GPU samplers) in folders
# others may write: the folder `submit` ran from (Slurm's default for a batch job), a
# trial's workdir. A group member who plants hpsearch/__init__.py or uuid.py there would
# run code as the owner (docs/security.md). Python 3.11's -P would do; 3.10 has none. So
# -c, whose sys.path[0] is '' (the current folder), with this: drop '' before anything is
# imported (sys is built in), then run the module as -m does (sys.argv[0] its file). No
# quotes in it: it travels inside shell and batch scripts.
SAFE_MODULE_RUN = ("import sys; sys.path[0] or sys.path.pop(0); import runpy; "
                   "del sys.argv[0]; runpy._run_module_as_main(sys.argv[0])")


def module_argv(python: str, module: str, *args: str, unbuffered: bool = False) -> list[str]:
    """The argv that runs `python -m module args` without the current folder on sys.path."""
    return [python, *(["-u"] if unbuffered else []), "-c", SAFE_MODULE_RUN, module, *args]


def start_time(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat: when the process started. None if it is gone."""
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) may contain spaces or ')': split after its last ')'.
    fields = data[data.rindex(b")") + 2:].split()
    if fields[0] == b"Z":  # a zombie has ended
        return None
    return int(fields[19])


def alive(pid: int | None, expected_start: int | None) -> bool:
    """Is `pid` the same live process that started at `expected_start`?"""
    return pid is not None and expected_start is not None and start_time(pid) == expected_start


def environ(pid: int) -> dict[str, str]:
    try:
        data = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    out = {}
    for item in data.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            out[key.decode(errors="replace")] = value.decode(errors="replace")
    return out


def find_trial_leader(trial_dir: Path, attempt: int) -> int | None:
    """The pid of the live session leader running this attempt, found by its environment.

    Used when the driver died between starting a trial and recording its pid.
    """
    want_dir, want_attempt = str(trial_dir), str(attempt)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            if os.getsid(pid) != pid:
                continue
        except OSError:
            continue
        env = environ(pid)
        if (env.get("HPSEARCH_TRIAL_DIR") == want_dir
                and env.get("HPSEARCH_ATTEMPT") == want_attempt):
            return pid
    return None


def pidfd(pid: int) -> int | None:
    """A file descriptor that becomes readable when `pid` exits (Linux >= 5.3), or None."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def signal_group(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return False


def group_alive(pgid: int) -> bool:
    return signal_group(pgid, 0)


def group_running(pgid: int) -> bool:
    """Whether a process of group `pgid` still runs: not only exists (a zombie that no one
    has reaped yet, where PID 1 does not reap, answers signal 0 too), but has not ended."""
    if not group_alive(pgid):
        return False
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fd = os.open(f"/proc/{entry}/stat", os.O_RDONLY)
        except OSError:
            continue
        try:
            data = os.read(fd, 4096)
        except OSError:
            continue
        finally:
            os.close(fd)
        # after the command name (which may hold spaces or ')'): state ppid pgrp ...
        fields = data[data.rindex(b")") + 2:].split(maxsplit=3)
        if len(fields) > 2 and fields[0] != b"Z" and int(fields[2]) == pgid:
            return True
    return False


def attempt_processes(trial_dir: Path, attempt: int, outside_group: int) -> list[int]:
    """This user's running processes of one attempt that are not in its process group
    `outside_group`, found by their environment (HPSEARCH_TRIAL_DIR, HPSEARCH_ATTEMPT, which
    every process of a trial inherits): torchrun starts its workers in sessions of their own,
    so a signal to the trial's group never reaches them, and a worker stuck in a collective
    after its peers left would hold its GPU for ever."""
    want_dir, want_attempt = str(trial_dir), str(attempt)
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            if os.getpgid(pid) == outside_group:
                continue
        except OSError:
            continue
        if start_time(pid) is None:  # gone, or a zombie
            continue
        env = environ(pid)
        if (env.get("HPSEARCH_TRIAL_DIR") == want_dir
                and env.get("HPSEARCH_ATTEMPT") == want_attempt):
            found.append(pid)
    return found


def kill(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass


_PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024


def tree_rss_kib(roots: Iterable[int]) -> dict[int, int]:
    """The resident memory, in KiB, of each root process and all its descendants (found by
    their parents, so a descendant in a session of its own counts: torchrun's workers), read
    in one pass over /proc, as Slurm's jobacct_gather/linux sums a task's processes. A root
    that is gone counts 0."""
    parent: dict[int, int] = {}
    rss: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            data = Path(entry.path, "stat").read_bytes()
            fields = data[data.rindex(b")") + 2:].split()  # after the command name
            parent[int(entry.name)], rss[int(entry.name)] = \
                int(fields[1]), int(fields[21]) * _PAGE_KIB
        except (OSError, ValueError, IndexError):  # ended meanwhile (an empty or short read)
            continue
    children: dict[int, list[int]] = {}
    for pid, ppid in parent.items():
        children.setdefault(ppid, []).append(pid)
    out = {}
    for root in roots:
        total, todo, seen = 0, [root], {root}
        while todo:  # `seen`: the scan is not atomic, a reused pid could close a loop
            pid = todo.pop()
            total += rss.get(pid, 0)
            for child in children.get(pid, ()):
                if child not in seen:
                    seen.add(child)
                    todo.append(child)
        out[root] = total
    return out

"""Where an experiment lives on disk, and the lock that lets only one driver own it.

<runs_dir>/<name>/store.sqlite      the store (driver writes, everyone else reads)
<runs_dir>/<name>/driver.pid        pid of the driver, flock-ed while it runs
<runs_dir>/<name>/driver.log        the driver's log when it runs detached
<runs_dir>/<name>/trials/00007/     one trial's files (see hpsearch.trial)
"""

from __future__ import annotations

import fcntl
import os
import re
from pathlib import Path

from hpsearch.errors import BadInput, Conflict, NotFound

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
DEFAULT_RUNS_DIR = "hpsearch-runs"


def default_runs_dir() -> Path:
    return Path(os.environ.get("HPSEARCH_RUNS_DIR", DEFAULT_RUNS_DIR)).absolute()


def experiment_dir(runs_dir: Path, name: str) -> Path:
    """The experiment's folder; refuses names that could escape runs_dir."""
    if not NAME_RE.match(name) or name in (".", ".."):
        raise BadInput(f"bad experiment name {name!r}: expected letters, digits, '.', '_' or "
                       "'-', starting with a letter or digit")
    return Path(runs_dir) / name


def existing_experiment_dir(runs_dir: Path, name: str) -> Path:
    path = experiment_dir(runs_dir, name)
    if not (path / "store.sqlite").exists():
        raise NotFound(f"no experiment '{name}' under {runs_dir} (use --runs-dir or "
                       "HPSEARCH_RUNS_DIR if it lives elsewhere)")
    return path


def trial_dir(exp_dir: Path, trial_id: int) -> Path:
    return exp_dir / "trials" / f"{int(trial_id):05d}"


def list_experiments(runs_dir: Path) -> list[Path]:
    if not runs_dir.is_dir():
        return []
    return sorted(p for p in runs_dir.iterdir() if (p / "store.sqlite").exists())


class DriverLock:
    """An exclusive flock on <exp>/driver.pid holding the owner's pid.

    The kernel drops the lock when the process dies, even by SIGKILL, so a stale file never
    blocks a resume.
    """

    def __init__(self, exp_dir: Path) -> None:
        self.path = exp_dir / "driver.pid"
        self.fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            pid = self.holder()
            raise Conflict(f"experiment '{self.path.parent.name}' is already being driven by "
                           f"pid {pid} ({self.path}); watch it with `hpsearch status "
                           f"{self.path.parent.name}` or stop it with `hpsearch cancel "
                           f"{self.path.parent.name}`") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        os.fsync(fd)
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def holder(self) -> int | None:
        """The pid of a live driver holding the lock, or None."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                text = os.read(fd, 64).decode().strip()
                return int(text) if text.isdigit() else -1
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        finally:
            os.close(fd)

"""The driver lock: at most one driver per experiment, across hosts, on any shared filesystem.

flock(2) cannot do this job on a cluster: Lustre mounted `noflock` refuses it (ENOSYS), and
`localflock` or an NFS client without lockd makes it node-local, so a driver on another host
would not see it. This lock is a plain file, the same on every filesystem.

`<exp>/driver.lock`, created atomically: written and fsync-ed under a unique temporary name,
then hard-linked to its name (link(2) fails if the name exists; atomic on local
filesystems, NFSv3+, Lustre, GPFS and BeeGFS), or, where hard links are not supported,
created with O_CREAT|O_EXCL. Its content is one JSON object on one line:

    {"format": 1, "experiment": "quad", "host": "login1", "boot_id": "6f1c...",
     "pid": 4242, "pid_start": 1234567, "acquired": 1718000000.0, "token": "9b2e...",
     "slurm_job": "812", "slurm_restart": 0}

host: socket.gethostname(); boot_id: /proc/sys/kernel/random/boot_id; pid_start: field 22
of /proc/<pid>/stat (clock ticks after boot), so a reused pid is not mistaken for the driver;
token: random, names this lock among all others; slurm_job, slurm_restart: SLURM_JOB_ID and
SLURM_RESTART_COUNT of a driver that runs as a Slurm job (`--driver-job`), else null and 0.

Heartbeat: the file's mtime. The live driver sets it to now every HEARTBEAT seconds (a
thread, futimens on its own open descriptor, so it never touches another driver's file).

Is the holder alive (`DriverLock.owner()`)?
- written on this host (same host name and boot id): while a process with that pid and
  start time exists; a driver killed even by SIGKILL is seen dead at once (a lock without a
  start time: while its heartbeat is young, as from another host);
- written by an earlier run of the Slurm job this process runs in (same SLURM_JOB_ID, lower
  SLURM_RESTART_COUNT: a requeued driver job): dead, as Slurm ended that run before requeuing;
- written on another host, or on a namesake or this host before a reboot (another boot id):
  while the heartbeat is younger than STALE_AFTER (clocks must agree to well within that);
- unreadable content (empty, not JSON, pid 0, 1, negative or beyond PID_MAX): while younger
  than STALE_AFTER; what no driver writes there (a folder, FIFO, link): never.
A lock not alive is stale and `acquire` takes it over: holding `driver.lock.takeover`
(created the same way; only one process takes over at a time) it re-reads the lock, checks it
is still the same stale file, and renames its own new lock over it. A lock that is alive is a
Conflict naming host and pid; a lock that cannot be created is a StorageError.

A driver that finds its lock file replaced by another (possible only after its heartbeat
stopped for STALE_AFTER, e.g. its host was cut off) exits at once: two drivers must never
write one store, and by write-ahead an exit at any instant is safe.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import stat
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from hpsearch.errors import EXIT_INCOMPLETE, Conflict, StorageError
from hpsearch.procs import start_time
from hpsearch.store.filesystem import storage_override
from hpsearch.store.private import make_private

LOCK_FILE = "driver.lock"
FORMAT = 1
STALE_AFTER = 300.0  # seconds without a heartbeat before a lock from another host is stale
PID_MAX = 1 << 22  # Linux's PID_MAX_LIMIT: a larger pid is no process (and overflows a pid_t)
HEARTBEAT = 30.0  # seconds between heartbeats; HPSEARCH_LOCK_HEARTBEAT overrides (tests)
_FOLDER = "<a folder>"  # Holder.text of a folder at a lock's path
_NO_HARD_LINKS = (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.ENOSYS)


@dataclass(frozen=True)
class LockRecord:
    """The content of a lock file (see the module docstring)."""

    experiment: str
    host: str
    boot_id: str
    pid: int
    pid_start: int | None
    acquired: float
    token: str
    slurm_job: str | None = None
    slurm_restart: int = 0
    format: int = FORMAT

    @classmethod
    def mine(cls, experiment: str) -> LockRecord:
        host, boot = this_host()
        return cls(experiment, host, boot, os.getpid(), start_time(os.getpid()), time.time(),
                   os.urandom(8).hex(), *slurm_run())

    @classmethod
    def parse(cls, text: str) -> LockRecord | None:
        """The record in `text`, or None where it is not one (empty, garbage, bad pid)."""
        try:
            data = json.loads(text)
            job = data.get("slurm_job")
            record = cls(str(data["experiment"]), str(data["host"]), str(data["boot_id"]),
                         data["pid"], data.get("pid_start"), float(data["acquired"]),
                         str(data["token"]), None if job is None else str(job),
                         data.get("slurm_restart", 0))
        except (ValueError, TypeError, KeyError, AttributeError):
            return None
        valid = (type(record.pid) is int and 1 < record.pid <= PID_MAX and
                 (record.pid_start is None or type(record.pid_start) is int) and
                 type(record.slurm_restart) is int)
        return record if valid else None

    def text(self) -> str:
        return json.dumps(asdict(self), sort_keys=True) + "\n"


def this_host() -> tuple[str, str]:
    """(host name, boot id): where a lock was written, and in which boot of that host."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = ""
    return socket.gethostname(), boot


def slurm_run() -> tuple[str | None, int]:
    """(job id, restart count) of the Slurm job this process runs in, or (None, 0)."""
    job = os.environ.get("SLURM_JOB_ID") or None
    try:
        restart = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
    except ValueError:
        restart = 0
    return job, restart


@dataclass(frozen=True)
class Holder:
    """A lock file as read: its record (None: unreadable, `text` holds what was there), the
    heartbeat's age in seconds, whether it was written on this host in this boot (`local`),
    and whether its holder counts as alive."""

    record: LockRecord | None
    text: str
    age: float
    local: bool
    alive: bool
    file_id: tuple[int, int]  # (st_dev, st_ino): a takeover replaces the file

    def describe(self) -> str:
        if self.record is None:
            what = repr(self.text[:60]) if self.text.strip() else "empty"
            return f"an unreadable lock ({what}, written {self.age:.0f} s ago)"
        where = f"this host ({self.record.host})" if self.local else f"host {self.record.host}"
        return f"pid {self.record.pid} on {where}, heartbeat {self.age:.0f} s ago"


def read(path: Path) -> Holder | None:
    """The lock file at `path` as it is now, or None if there is none. What no driver writes
    there (a folder, FIFO, device or symbolic link) is a stale lock, and is never opened
    for a read that could block; a lock that cannot be read is an unreadable lock."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as exc:  # ELOOP: a symbolic link; EACCES: another user's file
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        what = "a symbolic link" if stat.S_ISLNK(st.st_mode) else f"unreadable: {exc.strerror}"
        return _odd(st, f"<{what}>", alive=not stat.S_ISLNK(st.st_mode))
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        return _odd(st, _FOLDER if stat.S_ISDIR(st.st_mode) else "<not a regular file>",
                    alive=False)
    with os.fdopen(fd, "rb") as fh:
        text = fh.read(4096).decode("utf-8", "replace")
    record = LockRecord.parse(text)
    age = max(0.0, time.time() - st.st_mtime)
    local = record is not None and (record.host, record.boot_id) == this_host()
    if record is not None and local and record.pid_start is not None:
        alive = start_time(record.pid) == record.pid_start
    elif record is not None and record.slurm_job and _earlier_run_of_my_job(record):
        alive = False
    else:
        alive = age < STALE_AFTER
    return Holder(record, text, age, local, alive, (st.st_dev, st.st_ino))


def _odd(st: os.stat_result, text: str, alive: bool) -> Holder:
    """A lock path holding what no driver writes (`alive` False: stale at once) or what
    cannot be read (alive while younger than STALE_AFTER, as an unreadable lock is)."""
    age = max(0.0, time.time() - st.st_mtime)
    return Holder(None, text, age, False, alive and age < STALE_AFTER, _file_id(st))


def _refuse_folder(path: Path, holder: Holder) -> None:
    """A folder where a lock file belongs cannot be replaced by rename(2): say so."""
    if holder.record is None and holder.text == _FOLDER:
        raise StorageError(f"{path} is a folder, not a lock file hpsearch wrote; remove it "
                           "and run the command again")


def _earlier_run_of_my_job(record: LockRecord) -> bool:
    job, restart = slurm_run()
    return record.slurm_job == job and record.slurm_restart < restart


class DriverLock:
    """The lock of one experiment's driver (see the module docstring)."""

    def __init__(self, exp_dir: Path) -> None:
        self.path = Path(exp_dir) / LOCK_FILE
        self.fd: int | None = None
        self.record: LockRecord | None = None
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    @property
    def name(self) -> str:
        return self.path.parent.name

    # -- the driver's side -----------------------------------------------------------------
    def acquire(self, private: bool = True, group_readable: bool = False) -> None:
        """Take the lock (taking over a stale one) and start the heartbeat. Raises Conflict
        while a live driver holds it, StorageError where it cannot be created. private (a
        driver): make the runs dir and experiment folder owner-only (group_readable: 0750,
        the spec's `share: group`), and refuse (BadInput) ones another user owns or may
        write; `cancel` and `delete` only clean up."""
        storage_override()  # a bad HPSEARCH_STORAGE is exit 2 before anything is created
        try:
            if private:  # 0700 (0750); another user's or open folder: exit 2
                make_private(self.path.parent, group_readable)
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            record = LockRecord.mine(self.name)
            for _ in range(5):
                fd = _create(self.path, record)
                if fd is None:
                    holder = read(self.path)
                    if holder is not None and holder.alive:
                        raise Conflict(self._held_message(holder))
                    fd = self._take_over(holder, record) if holder is not None else None
                if fd is not None:
                    break
            else:
                raise Conflict(f"experiment '{self.name}': its lock {self.path} kept changing "
                               "while hpsearch tried to take it; is another driver starting?")
        except OSError as exc:
            raise StorageError(f"cannot write the driver lock {self.path}: "
                               f"{exc.strerror or exc}; the driver needs to create, link and "
                               f"rename files in {self.path.parent}") from None
        self.fd, self.record = fd, record
        self._stop.clear()
        self._beat = threading.Thread(target=self._heartbeat, name="hpsearch-lock-heartbeat",
                                      daemon=True)
        self._beat.start()

    def release(self) -> None:
        """Stop the heartbeat and remove the lock file if it is still this driver's."""
        if self.fd is None:
            return
        self._stop.set()
        if self._beat is not None:
            self._beat.join()
        try:
            if self._still_mine():
                self.path.unlink()
        except OSError:
            pass  # a lock left behind is stale at once on this host, in STALE_AFTER elsewhere
        os.close(self.fd)
        self.fd = None

    def _held_message(self, holder: Holder) -> str:
        if holder.record is None:
            return (f"experiment '{self.name}': its driver lock {self.path} is "
                    f"{holder.describe()}, so a driver may be starting; hpsearch will not start "
                    f"a second one. If no driver runs, remove that file (or wait: a lock not "
                    f"refreshed for {STALE_AFTER:.0f} s is taken over)")
        return (f"experiment '{self.name}' is already being driven by {holder.describe()} "
                f"({self.path}); watch it with `hpsearch status {self.name}` or stop it with "
                f"`hpsearch cancel {self.name}`" +
                ("" if holder.local else f" on {holder.record.host}"))

    def _take_over(self, stale: Holder, record: LockRecord) -> int | None:
        """Replace the stale lock `stale` by ours, if it is still that file. Returns our
        descriptor, or None where the lock changed meanwhile (the caller looks again)."""
        marker = self.path.with_name(LOCK_FILE + ".takeover")
        marker_fd = _create(marker, record)
        if marker_fd is None:
            other = read(marker)
            if other is not None and other.alive:
                raise Conflict(f"experiment '{self.name}': another process is taking over "
                               f"its stale driver lock right now ({other.describe()}, "
                               f"{marker})")
            if other is not None:
                _refuse_folder(marker, other)
            if other is not None and _same_file(marker, other.file_id):
                marker.unlink(missing_ok=True)  # its taker died holding it
            return None
        try:
            now = read(self.path)
            if now is None or now.alive or (now.file_id, now.text) != (stale.file_id, stale.text):
                return None
            _refuse_folder(self.path, now)
            fd, tmp = _write_temp(self.path, record)
            try:
                os.rename(tmp, self.path)
            except BaseException:
                os.close(fd)
                tmp.unlink(missing_ok=True)
                raise
            return fd
        finally:
            os.close(marker_fd)
            marker.unlink(missing_ok=True)

    def _still_mine(self) -> bool:
        return self.fd is not None and _same_file(self.path, _file_id(os.fstat(self.fd)))

    def _heartbeat(self) -> None:
        try:
            every = float(os.environ.get("HPSEARCH_LOCK_HEARTBEAT") or HEARTBEAT)
        except ValueError:
            every = HEARTBEAT
        every = min(max(every, 0.05), STALE_AFTER / 4)
        while not self._stop.wait(every):
            mine, record = self.fd, self.record
            if mine is None or record is None:
                return  # never: acquire sets both before it starts this thread, release
                        # clears the descriptor only after it stopped
            try:
                os.utime(mine)
                if self._still_mine():
                    continue
                if not self.path.exists():  # removed by hand: put it back if still free
                    fd = _create(self.path, record)
                    if fd is not None:
                        os.close(mine)
                        self.fd = fd
                        continue
            except OSError as exc:
                print(f"hpsearch: cannot refresh the driver lock {self.path}: {exc}; other "
                      f"hosts take it as stale after {STALE_AFTER:.0f} s without a heartbeat",
                      file=sys.stderr, flush=True)
                continue
            holder = read(self.path)
            print(f"hpsearch: the driver lock {self.path} now belongs to "
                  f"{holder.describe() if holder else 'no one'}: this driver's heartbeat had "
                  "stopped long enough for it to be taken over. Exiting now, so that two "
                  "drivers never write one store", file=sys.stderr, flush=True)
            os._exit(EXIT_INCOMPLETE)

    # -- everyone's side -------------------------------------------------------------------
    def owner(self) -> Holder | None:
        """The lock file as it is now (alive or stale), or None if there is none."""
        return read(self.path)

    def holder(self) -> int | None:
        """The pid of the live driver holding the lock (on this host or another), or None."""
        holder = read(self.path)
        return holder.record.pid if holder and holder.alive and holder.record else None

    def signal_driver(self, holder: Holder, sig: int) -> int:
        """Send `sig` to the driver that holds the lock, only once proven to be it: written
        on this host in this boot, the pid alive with the recorded start time, and that
        process holding this very lock file open. Returns the pid; raises Conflict (nothing
        signalled) where it cannot be proven."""
        record = holder.record
        if record is None:
            raise Conflict(self._held_message(holder))
        if not holder.local:
            raise Conflict(f"the driver of '{self.name}' runs on host {record.host} (pid "
                           f"{record.pid}, heartbeat {holder.age:.0f} s ago); run `hpsearch "
                           f"cancel {self.name}` there. If that host is gone, the lock is "
                           f"taken over {STALE_AFTER:.0f} s after its last heartbeat")
        try:
            pidfd = os.pidfd_open(record.pid)
        except ProcessLookupError:
            raise Conflict(f"the driver of '{self.name}' (pid {record.pid}) has just ended; "
                           "run cancel again") from None
        except (AttributeError, OSError):
            pidfd = None
        try:
            problem = self._not_the_driver(record, holder.file_id)
            if problem:
                raise Conflict(f"{self.path} names pid {record.pid} on this host, but {problem}:"
                               " not signalling it. If no hpsearch driver runs for "
                               f"'{self.name}', remove that file and run cancel again")
            if pidfd is not None:
                signal.pidfd_send_signal(pidfd, sig)
            else:
                os.kill(record.pid, sig)
            return record.pid
        finally:
            if pidfd is not None:
                os.close(pidfd)

    def _not_the_driver(self, record: LockRecord, file_id: tuple[int, int]) -> str | None:
        """Why pid `record.pid` is not provably this experiment's driver, or None."""
        if start_time(record.pid) != record.pid_start:
            return "that process started at another time (the pid was reused)"
        try:
            fds = os.listdir(f"/proc/{record.pid}/fd")
        except OSError as exc:
            return f"its open files cannot be read ({exc.strerror})"
        for fd in fds:  # by inode: the name it was opened by may be gone (see _create)
            try:
                if _file_id(os.stat(f"/proc/{record.pid}/fd/{fd}")) == file_id:
                    return None
            except OSError:
                continue
        return f"that process ({_command(record.pid)}) does not hold the lock file open"


def _command(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()[:80] or "?"


def _file_id(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def _same_file(path: Path, file_id: tuple[int, int]) -> bool:
    try:
        return _file_id(os.stat(path)) == file_id
    except FileNotFoundError:
        return False


def _write_temp(path: Path, record: LockRecord) -> tuple[int, Path]:
    """`record` written and fsync-ed under a unique name beside `path`: (descriptor, name)."""
    tmp = path.with_name(f".{path.name}.{record.token}.{os.urandom(4).hex()}")
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, record.text().encode())
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    return fd, tmp


def _create(path: Path, record: LockRecord) -> int | None:
    """Create `path` holding `record`, atomically and only if it does not exist. Returns a
    descriptor on it, or None if it exists."""
    fd, tmp = _write_temp(path, record)
    try:
        os.link(tmp, path)
        return fd
    except FileExistsError:
        os.close(fd)
        return None
    except OSError as exc:
        if os.fstat(fd).st_nlink == 2:  # NFS: the link was made, its reply was lost
            return fd
        os.close(fd)
        if exc.errno not in _NO_HARD_LINKS:
            raise
    finally:
        tmp.unlink(missing_ok=True)
    return _create_exclusive(path, record)


def _create_exclusive(path: Path, record: LockRecord) -> int | None:
    """Where hard links are not supported: O_CREAT|O_EXCL, then the content."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return None
    os.write(fd, record.text().encode())
    os.fsync(fd)
    return fd

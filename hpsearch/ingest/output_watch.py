"""Hearing at once that a running trial wrote a report: inotify on its trial dir.

The driver reads every running trial's files once a second (hpsearch.driver.loop
INGEST_INTERVAL). With early stopping that second is what a rejected trial overruns its
decision by: reporting every 0.05 s, it runs about 20 steps past the report that condemned
it. On a local filesystem the kernel says when a file in a watched folder changes
(inotify): the driver waits on this watch's file descriptor beside its executor, and reads a
trial the moment its metrics.jsonl or stdout.log grows.

inotify hears only writes made through this host's kernel: on NFS, Lustre, GPFS or BeeGFS a
trial on another node writes without an event here. So the watch opens only where the runs
dir is on a local filesystem (hpsearch.store.filesystem; HPSEARCH_STORAGE overrides it).
Where it does not open (a network filesystem, no inotify_simple package or no inotify in
the kernel, the per-user inotify limits reached, HPSEARCH_INOTIFY=off) the driver reads
every INGEST_INTERVAL as before; it keeps that reading everywhere, so an overflowed event
queue or a trial dir over the watch limit costs time, never a report.

The watch reads no file: it says only which trials to read, and the driver reads them as
it reads any trial's output (hpsearch.ingest.trial_files, its trust checks included).
"""

from __future__ import annotations

import os
from pathlib import Path

from hpsearch.store.filesystem import STORAGE_ENV, Filesystem

INOTIFY_ENV = "HPSEARCH_INOTIFY"  # "off": read every INGEST_INTERVAL only
REPORT_FILES = frozenset({"metrics.jsonl", "stdout.log"})  # the files a report goes to
_MODIFY, _Q_OVERFLOW, _IGNORED = 0x2, 0x4000, 0x8000  # IN_* of <sys/inotify.h>
_ONLYDIR, _DONT_FOLLOW = 0x01000000, 0x02000000


class OutputWatch:
    """Which running trials have written to their report files since the last look."""

    def __init__(self, inotify) -> None:
        """inotify: an open inotify_simple.INotify (open_watch makes it)."""
        self._inotify = inotify
        self._trial_of: dict[int, int] = {}  # watch descriptor -> trial id
        self._wd_of: dict[int, int] = {}  # trial id -> watch descriptor
        self.unwatched: set[int] = set()  # trials the kernel would not watch (limits)

    def fileno(self) -> int:
        """Readable when a watched trial dir has news: wait on it beside the executor."""
        return self._inotify.fileno()

    def add(self, trial_id: int, trial_dir: Path) -> None:
        """Watch a trial in flight, once its trial dir exists (again: the same dir keeps
        its descriptor). A dir not made yet or over the user's watch limit is tried again
        by follow(); meanwhile the reads every interval read it."""
        try:
            wd = self._inotify.add_watch(os.fspath(trial_dir), _MODIFY | _ONLYDIR | _DONT_FOLLOW)
        except OSError:  # ENOENT, ENOSPC (fs.inotify.max_user_watches), ENOTDIR, EACCES
            self.unwatched.add(trial_id)
            return
        self.unwatched.discard(trial_id)
        self._trial_of[wd] = trial_id
        self._wd_of[trial_id] = wd

    def follow(self, trial_dirs: dict[int, Path]) -> None:
        """Watch exactly the trials in flight (trial id -> trial dir): stop watching the
        others, and try again those not watched (a dir made late, or made again)."""
        for trial_id in set(self._wd_of) - set(trial_dirs):
            wd = self._wd_of.pop(trial_id)
            del self._trial_of[wd]
            try:
                self._inotify.rm_watch(wd)
            except OSError:  # EINVAL: its dir was removed, and the watch with it
                pass
        self.unwatched &= set(trial_dirs)
        for trial_id in set(trial_dirs) - set(self._wd_of):
            self.add(trial_id, trial_dirs[trial_id])

    def changed(self) -> set[int]:
        """The trials whose metrics.jsonl or stdout.log grew since the last call (every
        watched trial if the kernel's event queue overflowed). Never blocks; it empties the
        queue, so the descriptor is not readable again until something new is written."""
        found: set[int] = set()
        for event in self._inotify.read(timeout=0):
            if event.mask & _Q_OVERFLOW:
                found.update(self._wd_of)
            elif event.mask & _IGNORED:  # its dir is gone: the kernel dropped the watch
                trial_id = self._trial_of.pop(event.wd, None)
                if trial_id is not None and self._wd_of.get(trial_id) == event.wd:
                    del self._wd_of[trial_id]
            elif event.name in REPORT_FILES and event.wd in self._trial_of:
                found.add(self._trial_of[event.wd])
        return found

    def close(self) -> None:
        self._inotify.close()


def open_watch(fs: Filesystem) -> tuple[OutputWatch | None, str]:
    """A watch for trial dirs on the filesystem `fs` (the runs dir's), and how the driver
    learns of new reports, in words; None (read every interval) where it cannot work."""
    if os.environ.get(INOTIFY_ENV, "").strip().lower() in ("off", "0", "no", "false"):
        return None, f"{INOTIFY_ENV}={os.environ[INOTIFY_ENV].strip()}"
    if fs.network:
        where = (f"{fs.how}=network" if fs.how == STORAGE_ENV else
                 f"the runs dir is on {fs.fstype}")
        return None, f"{where}: shared between hosts, whose writes inotify does not hear"
    try:
        import ctypes

        import inotify_simple
        if getattr(inotify_simple, "_libc", False) is None:  # as it would find it, without
            # ctypes.util.find_library's `ldconfig -p` (50-90 ms as a driver starts)
            inotify_simple._libc = ctypes.CDLL(None, use_errno=True)
        inotify = inotify_simple.INotify()
    except ImportError:
        return None, "the inotify_simple package is not installed"
    except (OSError, AttributeError) as exc:  # EMFILE (max_user_instances), not Linux
        return None, f"inotify is not available here ({exc})"
    return OutputWatch(inotify), f"inotify on {fs.fstype}"

"""Reading a file from shared storage that someone else could have put there.

On a shared cluster an experiment folder can be writable by others (a setgid project folder
with umask 002, default ACLs), and trials run code hpsearch did not write. A file is read
only if it is what hpsearch itself would have written there (docs/security.md):

- opened without following a symbolic link (O_NOFOLLOW) and without blocking (O_NONBLOCK:
  a FIFO or a device must not hang the reader), then checked on the open descriptor, so it
  cannot be swapped between the check and the read;
- a regular file, owned by the experiment's owner (this process's user unless told
  otherwise), at most `limit` bytes.

Anything else raises Untrusted with the reason, for an event that names the file; the
caller skips the file and goes on. A file whose mere presence is the signal (a pilot's
`stop`, a cancel request) is looked at with lstat (present): it counts only if it is a
regular file of the owner's.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

LINK = "a symbolic link"


class Untrusted(ValueError):
    """A file that is not one hpsearch would read: the message says why."""


def read_trusted(path: str | os.PathLike[str], limit: int, owner: int | None = None
                 ) -> bytes | None:
    """The whole file, or None if there is none. Raises Untrusted if it is a symbolic link,
    not a regular file, owned by another user than `owner` (default: this process's), or
    larger than `limit` bytes; OSError if it cannot be read."""
    opened = open_trusted(path, limit, owner)
    if opened is None:
        return None
    with os.fdopen(opened[0], "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:  # it grew after the check
        raise Untrusted(f"larger than {limit} bytes")
    return data


def open_trusted(path: str | os.PathLike[str], limit: int | None = None,
                 owner: int | None = None) -> tuple[int, os.stat_result] | None:
    """A descriptor open for reading and its fstat, or None if there is no file. Raises
    Untrusted as read_trusted does; limit None: no size cap (a file a trial appends to
    while it runs, read on in bounded pieces). The caller closes the descriptor."""
    owner = os.geteuid() if owner is None else owner
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if _is_link(path):  # ELOOP (Linux), EMLINK (FreeBSD), EFTYPE (macOS)
            raise Untrusted(LINK) from None
        raise exc
    info = os.fstat(fd)
    refused = problem(info, limit, owner)
    if refused:
        os.close(fd)
        raise Untrusted(refused)
    return fd, info


def present(path: str | os.PathLike[str], owner: int | None = None,
            on_refused: Callable[[str], None] | None = None) -> bool:
    """Whether a file whose presence is a signal is there: a regular file owned by `owner`
    (default: this process's user), looked at with lstat (a link is not followed, a FIFO
    not opened). Anything else there gives no signal; on_refused(message naming the file)
    is told why, at each call (the caller says it once)."""
    owner = os.geteuid() if owner is None else owner
    try:
        info = os.lstat(path)
    except OSError:  # none there, or its folder cannot be searched: no signal
        return False
    refused = problem(info, None, owner)
    if refused and on_refused is not None:
        on_refused(f"refused {path}: {refused}")
    return refused is None


def problem(info: os.stat_result, limit: int | None, owner: int) -> str | None:
    """Why a file with this (l)stat is not read, or None when it may be (limit None: any
    size)."""
    if stat.S_ISLNK(info.st_mode):
        return LINK
    if not stat.S_ISREG(info.st_mode):
        return "not a regular file"
    if info.st_uid != owner:
        return f"owned by uid {info.st_uid}, not by the experiment's owner (uid {owner})"
    if limit is not None and info.st_size > limit:
        return f"larger than {limit} bytes"
    return None


def _is_link(path: str | os.PathLike[str]) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(Path(path)).st_mode)
    except OSError:
        return False


def read_attempt_value(path: Path, attempt: int,
                       on_refused: Callable[[str], None] | None = None,
                       named: bool = False) -> int | None:
    """The number in a file of one attempt, "VALUE ATTEMPT" (an exit code, a peak; named:
    the attempt must be written, else "VALUE" alone is anyone's). None if there is none,
    it names another attempt, or it is not a small regular file of this user's (on_refused
    is told)."""
    try:
        raw = read_trusted(path, 64)
        words = raw.split() if raw is not None else []
        if not words or (len(words) > 1 and int(words[1]) != attempt) \
                or (named and len(words) < 2):
            return None
        return int(words[0])
    except Untrusted as exc:
        if on_refused is not None:
            on_refused(f"refused {path}: {exc}")
    except (OSError, ValueError):
        pass
    return None

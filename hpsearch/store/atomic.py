"""Writing a file whole, by rename, where other users may plant links (docs/security.md).

A temporary file named after the process (`.name.PID.tmp`) can be guessed: another user who
may write the folder puts a link there first, and a plain open() writes through it, into a
file of the owner's elsewhere (or truncates it). Here the temporary file gets a random name
and is created with O_EXCL | O_NOFOLLOW: nothing already at its path, link or file, is ever
opened. The rename then replaces whatever is at the target's path, a link included, without
following it.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterable
from pathlib import Path

OWNER_ONLY = 0o600
AS_OPEN = 0o666  # what open() asks for: the umask decides, as for any file the user writes


def replace_file(path: Path, data: str | bytes | Iterable[str], mode: int = OWNER_ONLY,
                 sync: bool = False) -> None:
    """Write `data` to `path` atomically: a reader sees the old file or the new one whole.
    `data` may come in pieces (an iterable of str, written as they come: an export).
    mode: the new file's permission bits, before the umask (OWNER_ONLY, or AS_OPEN for a
    file the user hands on, such as a report). sync: flushed to disk before the rename."""
    path = Path(path)
    pieces = [data.encode()] if isinstance(data, str) else [data] \
        if isinstance(data, bytes) else (piece.encode() for piece in data)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(100):
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
        try:
            fd = os.open(tmp, flags, mode)
        except FileExistsError:  # taken (by chance, or planted): another name
            continue
        break
    else:
        raise FileExistsError(f"{path.parent}: no free name for a temporary file")
    try:
        with os.fdopen(fd, "wb") as fh:
            for raw in pieces:
                fh.write(raw)
            if sync:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise

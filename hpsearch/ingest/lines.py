"""Reading the lines a trial appends to a file, from where the last read stopped, in bounded
memory, whatever the bytes are.

Trial output is untrusted (docs/trial.md): a line may never end (a progress bar redrawn
with \\r), be cut short, or not be text at all. An AppendedFile keeps at most MAX_LINE bytes
of a line; a longer one is reported once as too long and its remaining bytes are skipped up
to its end, so memory stays bounded and every byte is read once. Its Cursor says where
reading stands; the driver stores it in the same commit as what the lines produced, so a
resumed driver reads only bytes it has not read before.

A file is read only if it is a regular file of the experiment's owner, opened without
following a link and without blocking (hpsearch.store.trusted): a FIFO, a link to /dev/zero
or a file another user put in the trial dir gives nothing, and `refused` says why. Files a
trial appends to have no size cap (they are read in bounded pieces); result.json has one.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from hpsearch.store.trusted import LINK, Untrusted, open_trusted, read_trusted

MAX_LINE = 1 << 20  # bytes of one line that are kept: 1 MiB
MAX_WARNINGS = 20  # about skipped lines, per file and trial
MAX_READ = 16 << 20  # bytes read per file and call while the writer runs (the rest: next call)
_CHUNK = 1 << 16
_END = re.compile(rb"[\r\n]")  # \r ends a line too: progress bars redraw one with \r alone


@dataclass
class Cursor:
    """Where reading of one file stands. Plain values, so it can be stored as JSON."""

    offset: int = 0  # bytes consumed: whole lines, and the skipped part of a too-long one
    line: int = 0  # newlines consumed; the next line is number line + 1
    inode: int | None = None  # the file read; another file at its path is read from 0
    skipping: bool = False  # inside a line longer than MAX_LINE: drop bytes to its end

    def to_json(self) -> list:
        return [self.offset, self.line, self.inode, self.skipping]

    @classmethod
    def from_json(cls, value: object) -> Cursor:
        """The cursor stored by to_json; a fresh one if the value is not one."""
        if (isinstance(value, list) and len(value) == 4
                and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                        for v in value[:2])
                and (value[2] is None or isinstance(value[2], int))
                and isinstance(value[3], bool)):
            return cls(*value)
        return cls()


@dataclass(frozen=True)
class Line:
    number: int  # 1-based, counting newlines
    data: bytes  # without its end; only its first MAX_LINE bytes if too_long
    too_long: bool = False


class AppendedFile:
    """One file a trial appends to (metrics.jsonl, stdout.log, checkpoints.jsonl)."""

    def __init__(self, path: Path, cursor: Cursor | None = None, prefix: bytes = b"") -> None:
        """prefix: only lines that start with it are wanted (stdout's `@hpsearch `); other
        whole lines are passed over without being returned, at the speed of bytes.find."""
        self.path = path
        self.cursor = cursor or Cursor()
        self.prefix = prefix
        self.restarted = False  # the last lines() found a new file at the path (or a shorter one)
        self.refused: str | None = None  # why the file at the path is never read
        self.bytes_read = 0  # total, for tests and benchmarks
        self._pending = bytearray()  # the start of a line whose end is not written yet

    def same_file(self) -> bool:
        """Whether the file at the path is the one the cursor is in (or none was read yet)."""
        try:
            return self.cursor.inode is None or os.stat(self.path).st_ino == self.cursor.inode
        except OSError:
            return False

    def lines(self, final: bool = False) -> Iterator[Line]:
        """The lines completed since the last call. With final (the writer has ended), a
        last line without its end is returned too. Reads only the bytes the file had when
        called (at most MAX_READ of them unless final); the rest come on the next call.
        With a prefix, other lines may or may not be returned. Consume the iterator
        fully: the cursor moves as lines are returned."""
        self.restarted = False
        self.refused = None
        try:
            opened = open_trusted(self.path)  # no size cap: the trial appends to it
        except Untrusted as exc:  # a link, FIFO, device or folder, or another user's file
            self.refused = f"not a regular file ({exc})" if str(exc) == LINK else str(exc)
            return iter(())
        except NotADirectoryError:
            return iter(())
        if opened is None:
            return iter(())
        fd, info = opened
        fh = os.fdopen(fd, "rb", buffering=0)
        c = self.cursor
        if c.inode is not None and (info.st_ino != c.inode
                                    or info.st_size < c.offset + len(self._pending)):
            self.cursor, c = Cursor(), Cursor()  # rotated, replaced or truncated: a new file
            self._pending.clear()
            self.restarted = True
        c.inode = info.st_ino
        return self._read(fh, info.st_size, final)

    def _read(self, fh, size: int, final: bool) -> Iterator[Line]:
        c, pending = self.cursor, self._pending
        with fh:
            position = c.offset + len(pending)
            budget = None if final else MAX_READ  # bytes of data; holes cost no reading
            while position < size and (budget is None or budget > 0):
                data, data_end = _data_extent(fh.fileno(), position, size)
                if data > position:  # a hole (a sparse file): zeros, known without reading
                    yield from self._zeros(data - position)
                    position = data
                    continue
                fh.seek(position)
                want = min(_CHUNK, data_end - position)
                chunk = fh.read(want if budget is None else min(want, budget))
                if not chunk:
                    break
                position += len(chunk)
                self.bytes_read += len(chunk)
                if budget is not None:
                    budget -= len(chunk)
                yield from self._split(chunk)
        if final:
            if pending:
                line = Line(c.line + 1, bytes(pending))
                c.offset += len(pending)
                pending.clear()
                yield line
            c.skipping = False  # a too-long last line ended with the file

    def _split(self, chunk: bytes) -> Iterator[Line]:
        c, pending = self.cursor, self._pending
        pos = 0
        while pos < len(chunk):
            if self.prefix and not pending and not c.skipping:
                pos = self._pass_over(chunk, pos)
                if pos == len(chunk):
                    return
            end = _END.search(chunk, pos)
            stop = end.start() if end else len(chunk)
            if c.skipping:
                c.offset += stop - pos
            elif len(pending) + stop - pos > MAX_LINE:
                kept = len(pending)
                pending += chunk[pos:pos + MAX_LINE - kept]
                line = Line(c.line + 1, bytes(pending), too_long=True)
                c.offset += kept + stop - pos
                c.skipping = True
                pending.clear()
                yield line
            else:
                pending += chunk[pos:stop]
            if end is None:
                return
            number = c.line + 1
            if chunk[stop] == 0x0A:
                c.line += 1
            c.offset += 1
            if c.skipping:
                c.skipping = False
            else:
                data = bytes(pending)
                c.offset += len(data)
                pending.clear()
                yield Line(number, data)
            pos = stop + 1

    def _zeros(self, length: int) -> Iterator[Line]:
        """Consume `length` zero bytes (a hole of a sparse file) without reading them: they
        end no line, so past MAX_LINE of them the line in progress is too long and the rest
        are skipped by arithmetic (a 1 TB hole costs one 1 MiB buffer, not 1 TB of reads)."""
        fed = min(length, MAX_LINE + 1)
        yield from self._split(bytes(fed))
        self.cursor.offset += length - fed  # the line is being skipped if anything is left

    def _pass_over(self, chunk: bytes, pos: int) -> int:
        """Consume the whole lines from pos that cannot start with the prefix; returns where
        the next line that may (or the chunk's unfinished last line) starts."""
        c, candidate = self.cursor, pos
        while True:
            hit = chunk.find(self.prefix, candidate)
            if hit < 0 or hit == 0 or chunk[hit - 1] in b"\r\n":
                limit = len(chunk) if hit < 0 else hit
                break
            end = _END.search(chunk, hit)  # the prefix inside a line: pass over that line
            if end is None:
                limit = hit
                break
            candidate = end.end()
        last = max(chunk.rfind(b"\n", pos, limit), chunk.rfind(b"\r", pos, limit))
        if last < pos:
            return pos
        c.line += chunk.count(b"\n", pos, last + 1)
        c.offset += last + 1 - pos
        return last + 1


def _data_extent(fd: int, position: int, size: int) -> tuple[int, int]:
    """(start, end) of the first run of data at or after `position`, within `size`: start
    > position means a hole comes first. Where the filesystem cannot tell, all is data."""
    try:
        start = os.lseek(fd, position, os.SEEK_DATA)
    except OSError as exc:  # ENXIO: a hole up to the end; else: SEEK_DATA unsupported
        return (size, size) if exc.errno == errno.ENXIO else (position, size)
    try:
        end = os.lseek(fd, start, os.SEEK_HOLE)
    except OSError:
        end = size
    return min(start, size), max(min(end, size), min(start, size))


def read_small(path: Path, limit: int = MAX_LINE) -> bytes | None:
    """A whole small file (result.json): None if there is none; ValueError (Untrusted) with
    the reason if it is a link, not a regular file, another user's or larger than `limit`
    bytes; OSError if unreadable."""
    return read_trusted(path, limit)


def limited(counts: dict[str, int], source: str, message: str) -> str | None:
    """A warning about a skipped line of `source`, counted in `counts`: the message itself
    for the first MAX_WARNINGS, then once a notice that the rest are skipped quietly, then
    None. A file of garbage gives a few warnings, not one per line."""
    count = counts[source] = counts.get(source, 0) + 1
    if count <= MAX_WARNINGS:
        return message
    if count == MAX_WARNINGS + 1:
        return (f"{source}: more than {MAX_WARNINGS} malformed lines; the rest are skipped "
                "without a warning")
    return None


def excerpt(line: Line) -> str:
    """The start of a line as a warning quotes it (bytes that are not UTF-8 escaped)."""
    return repr(line.data[:200].decode("utf-8", "backslashreplace"))

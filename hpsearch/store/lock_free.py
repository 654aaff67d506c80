"""Reading a rollback-journal store without SQLite's locks (Reader, on a shared filesystem).

In rollback-journal mode (the store's mode on a shared filesystem, hpsearch.store.filesystem)
the driver may write the file only once no reader holds a SHARED lock: a reader stopped
mid-query (Ctrl-Z), a slow query over NFS, or a group member who keeps a read transaction
open, held every commit up, and after the busy timeout the driver exited. So a Reader of
such a store takes no lock at all (SQLite's `unix-none` VFS, read-only) and checks instead
that no commit overlapped what it read: the store's inode, size, mtime and first 100 bytes
(the header, whose change counter moves at every commit), and the absence of a journal
(present while the driver writes pages), are the same before and after each statement;
otherwise the statement runs again, on the next commit. Every statement's rows are read
whole before that check. The check opens the store each time, which on NFS also makes this
host drop cached pages of it (close-to-open), as taking the lock did before.

A journal at the start of a statement (with no locks every journal looks hot) makes SQLite
refuse the read (SQLITE_READONLY_ROLLBACK): that is waited out for HOT_JOURNAL_WAIT, then
left to the caller (Reader._reads reads a snapshot). A driver that commits throughout one
statement for that long (a very large query) gets a read that takes the lock for that one
statement: the driver waits for it, and tries its commit again (Store.batch).
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hpsearch.store.read_only import _uri, hot_journal, hot_journal_wait, open_snapshot

HEADER = 100  # bytes of SQLite's file header
AGAIN = 0.02  # seconds between tries of a statement that overlapped a commit


def rollback_journal(path: Path) -> bool:
    """Whether the store at `path` is in a rollback-journal mode (its header's read and
    write versions are 1; WAL's are 2). Read from the file, without SQLite."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(HEADER)
    except OSError:
        return False
    return head.startswith(b"SQLite format 3\0") and head[18:20] == b"\x01\x01"


def open_lock_free(path: Path) -> sqlite3.Connection:
    """A read-only connection to `path` that never takes a lock (module docstring); around
    a journal still there after HOT_JOURNAL_WAIT (a driver that died mid-transaction), a
    snapshot of the last commit, as open_read_only gives."""
    conn = sqlite3.connect(_uri(path, "mode=ro&vfs=unix-none"), uri=True,
                           factory=LockFreeConnection, check_same_thread=False)
    assert isinstance(conn, LockFreeConnection)
    conn.store = path
    try:
        conn.execute("select count(*) from sqlite_master")
    except sqlite3.OperationalError as exc:
        conn.close()
        if not hot_journal(exc):
            raise
        return open_snapshot(path)
    return conn


def _fingerprint(path: Path) -> tuple:
    """What changes when a commit writes the store: (inode, size, mtime, header) of the
    file, read through a new open (NFS's close-to-open), and whether a journal is there."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return ()
    try:
        st = os.fstat(fd)
        head = os.pread(fd, HEADER, 0)
    finally:
        os.close(fd)
    journal = os.path.lexists(path.with_name(path.name + "-journal"))
    return (st.st_ino, st.st_size, st.st_mtime_ns, head, journal)


def _quiet(fingerprint: tuple) -> bool:
    """The store was there, with no journal: no commit was writing it."""
    return bool(fingerprint) and not fingerprint[-1]


class LockFreeConnection(sqlite3.Connection):
    """A connection whose execute() reads whole rows between two identical fingerprints of
    the store (module docstring). Readers use nothing else (no cursors of their own)."""

    store: Path

    def execute(self, sql: str, parameters: Any = (), /) -> Any:
        if self.in_transaction:  # never for a Reader; its pages are the transaction's
            return super().execute(sql, parameters)
        deadline = time.monotonic() + hot_journal_wait()
        while True:
            before = _fingerprint(self.store)
            try:
                cursor = super().execute(sql, parameters)
                rows = cursor.fetchall()
            except sqlite3.DatabaseError:
                # explained by a journal (the driver writing: SQLITE_READONLY_ROLLBACK), or
                # by pages of two commits read in one go; else it is the answer
                if _quiet(before) and _fingerprint(self.store) == before \
                        or time.monotonic() > deadline:
                    raise
            else:
                if _quiet(before) and _fingerprint(self.store) == before:
                    return Rows(cursor.description, rows)
                if time.monotonic() > deadline:
                    return self._locked(sql, parameters)
            time.sleep(AGAIN)

    def _locked(self, sql: str, parameters: Any) -> Rows:
        """The statement read with SQLite's locks, on a connection of its own (the driver
        waits for this one statement)."""
        conn = sqlite3.connect(_uri(self.store, "mode=ro"), uri=True)
        try:
            cursor = conn.execute(sql, parameters)
            return Rows(cursor.description, cursor.fetchall())
        finally:
            conn.close()


class Rows:
    """A statement's rows, read whole, with what callers use of a sqlite3.Cursor."""

    rowcount = -1
    lastrowid = None
    arraysize = 1

    def __init__(self, description: Any, rows: list) -> None:
        self.description = description
        self._rows = iter(rows)

    def __iter__(self) -> Iterator:
        return self._rows

    def __next__(self) -> Any:
        return next(self._rows)

    def fetchone(self) -> Any:
        return next(self._rows, None)

    def fetchmany(self, size: int | None = None) -> list:
        return [row for _, row in zip(range(size or self.arraysize), self._rows)]

    def fetchall(self) -> list:
        return list(self._rows)

    def close(self) -> None:
        self._rows = iter(())

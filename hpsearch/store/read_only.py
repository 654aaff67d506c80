"""Opening a store read-only (Reader): a mode=ro connection, which can never write it, in
either journal mode; around a hot rollback journal, a private snapshot of the last commit;
in a folder this process cannot write, an immutable read."""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
import time
import urllib.parse
import weakref
from pathlib import Path

from hpsearch.errors import StorageError


def _uri(path: Path, query: str) -> str:
    """A SQLite URI of `path` with `query`, the path percent-encoded: a '?', '#' or '%' in a
    folder name would otherwise end the file name early (or be decoded), and SQLite would
    open, and create, another file, read-write (the query being cut off with it)."""
    return f"file:{urllib.parse.quote(os.fspath(path), safe='/')}?{query}"


HOT_JOURNAL_WAIT = 3.0  # seconds a reader waits for a driver's transaction to end


def hot_journal_wait() -> float:
    """HOT_JOURNAL_WAIT, or HPSEARCH_HOT_JOURNAL_WAIT (seconds; tests make it short: a reader
    of a store whose driver died mid-transaction waits this long at each of its queries)."""
    try:
        return max(0.0, float(os.environ.get("HPSEARCH_HOT_JOURNAL_WAIT") or HOT_JOURNAL_WAIT))
    except ValueError:
        return HOT_JOURNAL_WAIT


def open_read_only(path: Path) -> sqlite3.Connection:
    """A mode=ro connection, in either journal mode. It never writes the store: a hot
    rollback journal (a driver mid-transaction where locks do not reach this host, as on
    BeeGFS, Lustre localflock or NFS nolock; or a driver that died mid-transaction) is
    waited out, then read around: the last commit is read from a private copy of the store
    and its journal, rolled back there (open_snapshot). Rolling it back in place could
    destroy a live driver's transaction; the next driver does that for a dead one."""
    def connect() -> sqlite3.Connection:
        conn = sqlite3.connect(_uri(path, "mode=ro"), uri=True, timeout=30,
                               check_same_thread=False)
        conn.execute("select count(*) from sqlite_master").fetchone()
        return conn
    deadline = time.monotonic() + hot_journal_wait()
    while True:
        try:
            return connect()
        except sqlite3.OperationalError as exc:
            name = getattr(exc, "sqlite_errorname", "")
            if name in ("SQLITE_CANTOPEN", "SQLITE_READONLY_DIRECTORY") and path.is_file():
                return _open_immutable(path)  # a WAL store, its folder not writable here
            if name != "SQLITE_READONLY_ROLLBACK":
                raise
        if time.monotonic() > deadline:
            return open_snapshot(path)
        time.sleep(0.05)


JOURNAL_HEADER = 28  # bytes: magic, page count, a random nonce per transaction, sizes


def open_snapshot(path: Path) -> sqlite3.Connection:
    """The last commit of a store whose rollback journal is hot, without touching either:
    the store, then its journal, are copied into a private temporary folder, checked to
    belong to one transaction (the journal's header, with its per-transaction nonce, is the
    same before and after), and rolled back there. A transaction that committed meanwhile
    (its journal gone or replaced) makes it try again, or read the store as it is now.
    The copy lives as long as the connection: closing it (or its being collected, or the
    process's exit) removes the folder."""
    journal = path.with_name(path.name + "-journal")
    for _ in range(20):
        header = _head(journal)
        if header is None:  # committed meanwhile: no hot journal any more
            return sqlite3.connect(_uri(path, "mode=ro"), uri=True, timeout=30,
                                   check_same_thread=False)
        folder = Path(tempfile.mkdtemp(prefix="hpsearch-read-"))  # 0700
        try:
            conn = _rolled_back_copy(path, journal, header, folder)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        if conn is not None:
            return conn
        shutil.rmtree(folder, ignore_errors=True)
    raise StorageError(f"{path}: its driver commits too often to read a snapshot; try again")


class _Snapshot(sqlite3.Connection):
    """A connection to a private copy of a store, whose folder goes when it is closed."""

    _remove: weakref.finalize

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._remove()


def _rolled_back_copy(path: Path, journal: Path, header: bytes,
                      folder: Path) -> _Snapshot | None:
    """A connection to a copy in `folder` of the store and its journal, rolled back; None if
    the copies are not of one transaction (or the journal went meanwhile)."""
    copy = folder / path.name
    try:
        shutil.copyfile(path, copy)
        shutil.copyfile(journal, folder / journal.name)
    except FileNotFoundError:
        return None
    if _head(folder / journal.name) != header:
        return None  # another transaction's journal: the copies do not match
    rolled = sqlite3.connect(copy, timeout=30)
    try:
        rolled.execute("select count(*) from sqlite_master").fetchone()  # rolls back
    finally:
        rolled.close()
    conn = sqlite3.connect(copy, check_same_thread=False, factory=_Snapshot)
    conn._remove = weakref.finalize(conn, shutil.rmtree, folder, ignore_errors=True)
    conn.execute("select count(*) from sqlite_master").fetchone()
    return conn


def _head(path: Path) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read(JOURNAL_HEADER)
    except FileNotFoundError:
        return None


def _open_immutable(path: Path) -> sqlite3.Connection:
    """A store in a folder this process cannot write (a read-only mount, another user's
    runs dir, a `share: group` experiment read by a group member): a WAL store cannot be
    opened there even read-only (its -shm index cannot be created), so it is read as an
    immutable file, exact when no -wal file holds commits not yet copied into it (a driver
    that is running, or was killed)."""
    wal = path.with_name(path.name + "-wal")
    if wal.exists() and wal.stat().st_size > 0:
        raise StorageError(f"{path} cannot be read here: its folder is not writable by this "
                           f"user, and {wal.name} holds commits that only a process that may "
                           f"write {path.parent} can read (run this command as the "
                           "experiment's owner, or on a writable mount)")
    conn = sqlite3.connect(_uri(path, "mode=ro&immutable=1"), uri=True,
                           check_same_thread=False)
    conn.execute("select count(*) from sqlite_master").fetchone()
    return conn


def hot_journal(exc: sqlite3.OperationalError) -> bool:
    return getattr(exc, "sqlite_errorname", "") == "SQLITE_READONLY_ROLLBACK"

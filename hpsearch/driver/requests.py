"""Requests to an experiment's driver, through files: `resume --trials N`, `hpsearch
enqueue` and `hpsearch finish` write one; the running driver (or the next one to start)
takes it.

The store has one writer, the driver, so a command run beside it never touches the store: it
writes `<exp>/requests/<kind>-<ns>-<pid>.json` atomically (a temporary name, then rename) and
the driver reads the requests in the order they were written, applies each in one store
commit, and only then removes its file. A request a driver applied but did not remove (it
was killed in between) is recognised by its id and not applied twice (see
hpsearch.driver.extent).

Only the experiment owner's own request files are read (hpsearch.store.trusted): on a shared
cluster a group member who can write the folder must not grow a search or add trials to it.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from hpsearch.store.trusted import Untrusted, read_trusted

KINDS = ("trials", "enqueue", "finish")
MAX_BYTES = 65536  # a request is a few hundred bytes; a bigger file is not one


@dataclass(frozen=True)
class Request:
    kind: str   # trials: {"total": N}; enqueue: {"params": {...}}; finish: {"trials": [id]}
    id: str
    data: dict
    path: Path


def requests_dir(exp_dir: Path) -> Path:
    return Path(exp_dir) / "requests"


def write(exp_dir: Path, kind: str, data: dict) -> Request:
    """Leave a request for the driver; returns it (its id names it in the store)."""
    assert kind in KINDS, kind
    folder = requests_dir(exp_dir)
    folder.mkdir(mode=0o700, exist_ok=True)  # private, whatever the umask
    rid = uuid.uuid4().hex
    path = folder / f"{kind}-{time.time_ns():020d}-{os.getpid()}.json"
    tmp = folder / f".{path.name}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(json.dumps({"id": rid, **data}))
    os.replace(tmp, path)
    return Request(kind, rid, data, path)


def pending(exp_dir: Path) -> tuple[list[Request], list[str]]:
    """(the requests waiting, oldest first; a note for each file that is not one, which is
    removed so it is not read again)."""
    folder = requests_dir(exp_dir)
    found, notes = [], []
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".json"))
    except FileNotFoundError:
        return [], []
    for name in names:
        path = folder / name
        kind = name.split("-", 1)[0]
        try:
            raw = read_trusted(path, MAX_BYTES)  # a link, FIFO or another user's: Untrusted
            if raw is None:  # taken meanwhile (another driver's resume)
                continue
            data = json.loads(raw)
            rid = data.pop("id")
            if kind not in KINDS or not isinstance(rid, str):
                raise ValueError(f"unknown kind {kind!r}")
        except (OSError, ValueError, KeyError, AttributeError, TypeError,
                RecursionError) as exc:  # hostile bytes, nesting, sizes: skipped, not fatal
            what = "refused" if isinstance(exc, Untrusted) else "ignored"
            notes.append(f"{what} request file {path}: {exc}")
            with contextlib.suppress(OSError):  # not read again (if the folder lets us)
                path.unlink()
            continue
        found.append(Request(kind, rid, data, path))
    return found, notes


def done(request: Request) -> None:
    request.path.unlink(missing_ok=True)

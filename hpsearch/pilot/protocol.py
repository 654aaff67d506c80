"""How the driver and its pilots talk: files in the experiment's `pilots/` dir, nothing else.

No network between them: the runs dir is on shared storage, seen by the login node (or the
driver job) and by every pilot. Each step is one atomic file operation, and each is
idempotent, so either side may be killed at any instant and start again:

    pilots/driver.json           the driver's heartbeat (a sequence number that keeps changing)
    pilots/topology.json         leaf switch -> its nodes, where the driver knows the topology
    pilots/<n>/pilot.json        the pilot's configuration, written before its sbatch
    pilots/<n>/heartbeat.json    the pilot's heartbeat: its state, nodes, free slots, time left
    pilots/<n>/inbox/T.A.json    the driver assigns attempt A of trial T to pilot n (atomic write)
    pilots/<n>/claimed/T.A.json  the pilot took it: rename from inbox/ (exactly one rename wins)
    pilots/<n>/withdrawn/T.A.json  the driver took it back before the pilot did (rename)
    pilots/<n>/started/T.A.json  the attempt runs: its nodes, GPUs, pid
    pilots/<n>/ended/T.A.json    the attempt ended: its exit code, why, on which nodes
    pilots/<n>/cancel/T.A.json   the driver asks the pilot to stop the attempt
    pilots/<n>/done/started/T.A.json, done/ended/T.A.json
                                 the driver stored the attempt's end: its started/ and ended/
                                 files, moved here (kept), so that the two dirs the driver
                                 lists every tick hold only attempts in flight (and its
                                 cancel/ file, if any, removed: the pilot lists that dir)
    pilots/<n>/stop              the driver asks the pilot to take no more work and leave
    pilots/<n>/exit.json         the pilot's last word: why it left

A claim and a withdrawal are both renames out of inbox/: POSIX rename is atomic (on NFS too,
within one directory tree of one export), so an assignment is run by the pilot or taken back
by the driver, never both. docs/pilots.md draws the state machine.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hpsearch.launch.attempt import Launch
from hpsearch.spec.durations import parse_time_limit
from hpsearch.spec.model import memory_mb
from hpsearch.store.trusted import Untrusted, read_trusted
from hpsearch.trial import write_json_atomic

PILOTS_DIR = "pilots"
DRIVER_HEARTBEAT = "driver.json"
TOPOLOGY = "topology.json"
STATES = ("inbox", "claimed", "withdrawn", "started", "ended", "cancel")
DONE = ("done/started", "done/ended")  # archive() moves started/ and ended/ files here


def pilots_dir(experiment_dir: Path) -> Path:
    return experiment_dir / PILOTS_DIR


@dataclass(frozen=True)
class PilotPaths:
    """The files of pilot `root.name` (docs above)."""

    root: Path

    def dir(self, state: str) -> Path:
        """The dir of one assignment state (STATES)."""
        if state not in STATES and state not in DONE:
            raise ValueError(f"unknown assignment state {state!r}")
        return self.root / state

    def file(self, state: str, name: str) -> Path:
        return self.dir(state) / name

    @property
    def config(self) -> Path:
        return self.root / "pilot.json"

    @property
    def heartbeat(self) -> Path:
        return self.root / "heartbeat.json"

    @property
    def stop(self) -> Path:
        return self.root / "stop"

    @property
    def exit(self) -> Path:
        return self.root / "exit.json"

    def make(self) -> None:
        for state in STATES + DONE:
            (self.root / state).mkdir(parents=True, exist_ok=True)


def name_of(trial_id: int, attempt: int) -> str:
    return f"{trial_id}.{attempt}.json"


def parse_name(name: str) -> tuple[int, int] | None:
    """(trial, attempt) of `T.A.json`; None for anything else (a temporary file)."""
    parts = name.split(".")
    if len(parts) != 3 or parts[2] != "json" or not parts[0].isdigit() \
            or not parts[1].isdigit():
        return None
    return int(parts[0]), int(parts[1])


def write_json(path: Path, data: dict) -> None:
    """Atomically: a reader sees the old file, or the whole new one, never a part (rename;
    on NFS the client sends the data at close, before the rename). Not fsynced: an fsync
    per assignment was 6 of the 11 ms the driver spent per trial with 32 pilot slots busy
    on ext4, and a file cut short by a crash of its host is one the protocol survives
    anyway: that host's driver or pilot died with it, the pilot skips an assignment that
    is not whole JSON, and a resumed driver withdraws an unclaimed one and writes it again
    (an ended/ or started/ file that is not whole reads as a lost attempt)."""
    write_json_atomic(path, data, sync=False)


MAX_JSON = 16 << 20  # an assignment holds a command line and an environment: ~KBs


def read_json(path: Path, on_refused: Callable[[str], None] | None = None) -> dict | None:
    """The file's data; None when it is missing, not (yet) whole JSON, or not a file this
    user wrote (another user's, a link, a FIFO, over MAX_JSON: hpsearch.store.trusted). Such
    a file is never run or obeyed; on_refused(message naming it) is told why."""
    try:
        raw = read_trusted(path, MAX_JSON)
        data = json.loads(raw) if raw is not None else None
    except Untrusted as exc:
        if on_refused is not None:
            on_refused(f"refused {path}: {exc}")
        return None
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def names(directory: Path) -> list[str]:
    """The assignment files in one state dir, oldest trial first."""
    try:
        found = [(key, n) for n in os.listdir(directory) if (key := parse_name(n)) is not None]
    except FileNotFoundError:
        return []
    return [n for _, n in sorted(found, key=lambda pair: pair[0])]


def move(paths: PilotPaths, name: str, src: str, dst: str) -> bool:
    """Rename `src/name` to `dst/name`; False when it is no longer in src (the other side
    moved it first). On NFS a rename whose reply was lost is sent again and fails with
    ENOENT although it happened: the destination then holds it, and the move succeeded
    (listing the folder asks the server, where a lookup could answer from a stale cache).
    So `dst/name` must not be there from an earlier move: the driver discards withdrawn/
    before it assigns an attempt to the same pilot again; claimed/ is never reused."""
    try:
        os.rename(paths.file(src, name), paths.file(dst, name))
    except FileNotFoundError:
        try:
            return name in os.listdir(paths.dir(dst))
        except FileNotFoundError:
            return False
    return True


def discard(paths: PilotPaths, name: str, state: str) -> None:
    """Remove `state/name` if it is there."""
    try:
        os.unlink(paths.file(state, name))
    except FileNotFoundError:
        pass


def archive(paths: PilotPaths, name: str) -> None:
    """Move an attempt's started/ and ended/ files to done/, once the driver has stored its
    end: listing started/ and ended/ then costs the attempts in flight, not every attempt
    the pilot ever ran (10,000 trials: 10,000 names a listing, 50 listings a second). Its
    cancel/ file, if the driver wrote one, is removed: the pilot lists cancel/ every tick.
    A file already moved, or never written, is passed over; a pilot dir made before done/
    existed gets it here."""
    discard(paths, name, "cancel")
    for state in ("started", "ended"):
        source, target = paths.file(state, name), paths.file(f"done/{state}", name)
        try:
            os.rename(source, target)
        except FileNotFoundError:
            if source.exists():  # done/ is missing (a pilot of an older version)
                target.parent.mkdir(parents=True, exist_ok=True)
                os.rename(source, target)


def where(paths: PilotPaths, name: str) -> str | None:
    """How far an assignment got in this pilot: its furthest state, or None if it never
    came here."""
    # inbox first: the pilot may claim it (inbox/ -> claimed/) while we look, and a look at
    # claimed/ before that rename and at inbox/ after it would find it nowhere (a restarted
    # driver would run it a second time). An attempt in inbox/ is in no later state here: a
    # claimed one is never assigned again. inbox before withdrawn: an attempt taken back
    # may be assigned to the same pilot again.
    # Listings, not lookups: an NFS client may answer a lookup from a cached "no such file".
    for state in ("inbox", "ended", "started", "claimed", "withdrawn"):
        if name in names(paths.dir(state)):
            return state
    return None


# -- assignments ------------------------------------------------------------------------------

def launch_to_dict(launch: Launch, width: int = 1) -> dict:
    """An assignment: everything the pilot needs to run the attempt. Its time limit is its
    own `time` (else the pilot's `trial_time`) times `time_factor` (the retry rules may
    raise it). Where trials of several sizes share the pilot, its own size: its nodes,
    tasks, CPUs and GPUs per node, and `width`, the slots it takes on each of its nodes
    (hpsearch.spec.model.slot_width)."""
    res = launch.resources
    own = {} if res is None else {
        "nodes": res.nodes, "tasks_per_node": res.tasks_per_node,
        "cpus_per_task": res.cpus_per_task, "gpus_per_node": res.gpus_per_node,
        "time": parse_time_limit(res.time) if res.time else None, "width": width,
        "mem_mb": int(memory_mb(res.mem)) if res.mem else None}
    return {"trial_id": launch.trial_id, "attempt": launch.attempt, "command": launch.command,
            "env": dict(launch.env), "trial_dir": str(launch.trial_dir),
            "workdir": str(launch.workdir), "params": launch.params,
            "time_factor": launch.time_factor, "assigned": time.time(),
            "nodes": None, "narrow_cpus": launch.narrow_cpus, **own}


def launch_from_dict(data: dict) -> Launch:
    return Launch(int(data["trial_id"]), int(data["attempt"]), data["command"],
                  dict(data["env"]), Path(data["trial_dir"]), Path(data["workdir"]),
                  dict(data.get("params") or {}),
                  time_factor=float(data.get("time_factor") or 1.0),
                  narrow_cpus=data.get("narrow_cpus") is True)


# -- heartbeats -------------------------------------------------------------------------------

class Beat:
    """Writes one side's heartbeat: a sequence number that grows, with what it tells."""

    def __init__(self, path: Path, interval: float) -> None:
        self.path, self.interval = path, interval
        self.seq = 0
        self.next_at = 0.0

    def due(self) -> bool:
        return time.monotonic() >= self.next_at

    def write(self, **data) -> None:
        self.seq += 1
        write_json(self.path, {**data, "seq": self.seq, "time": time.time(), "pid": os.getpid(),
                               "host": os.uname().nodename})
        self.next_at = time.monotonic() + self.interval


class Watch:
    """Reads the other side's heartbeat. Silence is measured on this side's own clock, from
    when the sequence number last changed, so clocks that disagree between hosts do not
    matter."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seq: int | None = None
        self.changed = time.monotonic()
        self.data: dict | None = None

    def read(self) -> dict | None:
        data = read_json(self.path)
        if data is not None and data.get("seq") != self.seq:
            self.seq, self.data, self.changed = data.get("seq"), data, time.monotonic()
        return self.data

    def silent_for(self) -> float:
        return time.monotonic() - self.changed

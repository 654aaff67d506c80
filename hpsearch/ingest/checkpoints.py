"""Checkpoint tracking on the driver's side: find what a trial saved, and apply the spec's
keep policy without ever deleting a checkpoint a trial may resume from.

A trial registers checkpoints in <trial dir>/checkpoints.jsonl (hpsearch.trial.checkpoint
or register_checkpoint); anything else it saves in checkpoints/ counts too, with the last
number in its name as its step. The driver records each in the store (step, path, bytes,
the objective metric at that step) and deletes by policy: the store marks a checkpoint
deleted before its file goes (write-ahead), and a resumed driver finishes what a killed one
started.
"""

from __future__ import annotations

import errno
import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from hpsearch.ingest.lines import MAX_LINE, AppendedFile, Cursor, Line, excerpt, limited
from hpsearch.spec.model import Checkpoints
from hpsearch.store import rows
from hpsearch.store.results import best
from hpsearch.trial import CHECKPOINT_MANIFEST, checkpoint_step


@dataclass
class CheckpointScan:
    """What one trial has saved, read incrementally (the driver keeps one per live trial).
    `saved`: what state() returned when last stored; the manifest is read on from there."""

    trial_dir: Path
    saved: dict | None = None
    steps: dict[str, int] = field(default_factory=dict)   # name -> step, from the manifest
    seen: dict[str, tuple[float, int]] = field(default_factory=dict)  # name -> (mtime, step)
    warned: set[str] = field(default_factory=set)
    warnings: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        saved = self.saved if isinstance(self.saved, dict) else {}
        self.manifest = AppendedFile(self.trial_dir / CHECKPOINT_MANIFEST,
                                     Cursor.from_json(saved.get("cursor")))
        steps, malformed = saved.get("steps"), saved.get("malformed")
        if isinstance(steps, dict):
            self.steps.update({k: v for k, v in steps.items() if _is_step(v)})
        self.malformed: dict[str, int] = {k: v for k, v in malformed.items() if _is_step(v)} \
            if isinstance(malformed, dict) else {}  # warnings given, per source
        if isinstance(saved.get("warned"), list):
            self.warned.update(k for k in saved["warned"] if isinstance(k, str))
        self.saved = self.state()

    def state(self) -> dict:
        """Where reading the manifest stands, the steps it registered and the warnings given,
        as JSON-able values."""
        return {"cursor": self.manifest.cursor.to_json(), "steps": dict(self.steps),
                "malformed": dict(self.malformed), "warned": sorted(self.warned)}

    def unsaved(self) -> dict | None:
        """state() if it changed since the last call (or construction), else None."""
        now = self.state()
        if now == self.saved:
            return None
        self.saved = now
        return now

    @property
    def folder(self) -> Path:
        return self.trial_dir / "checkpoints"

    def new(self) -> list[dict]:
        """Checkpoints new or changed since the last call: [{step, path, bytes, time}]."""
        self._read_manifest()
        if self.folder.is_symlink():  # it may lead to other runs' files: never scan or delete
            self._warn_once("checkpoints", f"checkpoints/ is a symbolic link (to "
                                           f"{os.readlink(self.folder)[:200]!r}); checkpoints "
                                           "are tracked and deleted only inside the trial dir")
            return []
        try:
            entries = list(os.scandir(self.folder))
        except (FileNotFoundError, NotADirectoryError):
            return []
        found = []
        for entry in sorted(entries, key=lambda e: e.name):
            name = entry.name
            if name.startswith(".") or name.endswith(".tmp") or entry.is_symlink():
                continue
            step = self.steps.get(name, checkpoint_step(name))
            if step is None:
                self._warn_once(name, f"checkpoints/{name}: no step in its name and not "
                                      f"registered in {CHECKPOINT_MANIFEST}; not tracked")
                continue
            try:
                mtime = entry.stat().st_mtime
                if self.seen.get(name) == (mtime, step):
                    continue  # unchanged: a checkpoint folder is not walked again
                size = _size(Path(entry.path))
            except FileNotFoundError:
                continue
            self.seen[name] = (mtime, step)
            found.append({"step": step, "path": str(self.folder / name), "bytes": size,
                          "time": time.time()})
        return found

    def _read_manifest(self) -> None:
        """Whole lines only, in bounded memory (hpsearch.ingest.lines), each byte once."""
        for line in self.manifest.lines():
            if line.too_long:
                self._malformed(line, f"longer than {MAX_LINE} bytes")
                continue
            if not line.data.strip():
                continue
            try:
                rec = json.loads(line.data.decode("utf-8"))
                step, name = rec["step"], rec["path"]
                ok = _is_step(step) and isinstance(name, str) and "/" not in name \
                    and name not in ("", ".", "..")  # a plain name inside checkpoints/
            except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
                ok = False
            if ok:
                self.steps[name] = step
            else:
                self._malformed(line, "expected {\"step\": integer, \"path\": name}")
        if self.manifest.refused:
            self._warn_once(CHECKPOINT_MANIFEST, f"{CHECKPOINT_MANIFEST}: "
                                                 f"{self.manifest.refused}; not read")

    def _malformed(self, line: Line, reason: str) -> None:
        message = limited(self.malformed, CHECKPOINT_MANIFEST,
                          f"{CHECKPOINT_MANIFEST}: skipped malformed line {line.number}: "
                          f"{excerpt(line)} ({reason})")
        if message:
            self.warnings.append(message)

    def _warn_once(self, key: str, message: str) -> None:
        """Warn about an entry once (a resumed driver too), and about at most MAX_WARNINGS."""
        if key not in self.warned:
            note = limited(self.malformed, "checkpoints/", message)
            if note == message:
                self.warned.add(key)
            if note:
                self.warnings.append(note)


def _is_step(value: object) -> bool:
    """A checkpoint step: an int that SQLite stores (0 <= step < 2**63)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < (1 << 63)


def _size(path: Path) -> int:
    if not path.is_dir():
        return path.stat().st_size
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except FileNotFoundError:
                pass
    return total


def doomed(policy: Checkpoints, present: list[rows.CheckpointRow], trials: list[rows.TrialRow],
           directions: list[str]) -> list[rows.CheckpointRow]:
    """The checkpoints the policy deletes, of those present.

    Per trial: keep the `keep_last` highest steps and the `keep_best` best by the first
    objective (with neither set, keep all). A trial that may still run (not completed,
    failed or pruned) always keeps every checkpoint at its highest step: the one it resumes
    from. With `keep_trials`, a finished trial outside the best that many loses them all.
    """
    state = {t.id: t.state for t in trials}
    best_ids = None
    if policy.keep_trials is not None:
        best_ids = {t.id for t in best(trials, directions, policy.keep_trials)}
    sign = 1.0 if directions[0] == "minimize" else -1.0
    by_trial: dict[int, list[rows.CheckpointRow]] = {}
    for c in present:
        by_trial.setdefault(c.trial, []).append(c)
    out = []
    for tid, cks in by_trial.items():
        finished = state.get(tid) in rows.FINISHED
        if finished and best_ids is not None and tid not in best_ids:
            out += cks
            continue
        if policy.keep_last is None and policy.keep_best is None:
            continue
        keep: set[str] = set()
        if policy.keep_last:
            newest = sorted(cks, key=lambda c: (c.step, c.time or 0.0), reverse=True)
            keep.update(c.path for c in newest[:policy.keep_last])
        if policy.keep_best:
            scored = [(c.metric, c) for c in cks
                      if c.metric is not None and math.isfinite(c.metric)]
            scored.sort(key=lambda mc: (sign * mc[0], -mc[1].step))
            keep.update(c.path for _, c in scored[:policy.keep_best])
        if not finished:
            top = max(c.step for c in cks)
            keep.update(c.path for c in cks if c.step == top)
        out += [c for c in cks if c.path not in keep]
    return out


def remove(checkpoint: rows.CheckpointRow, trial_dir: str | Path) -> str | None:
    """Delete a checkpoint's file or folder; only directly inside its trial's checkpoints/.
    Returns a warning, or None.

    The trial dir and its checkpoints/ are opened without following a link, and everything
    is removed relative to those descriptors: a trial that replaces either by a link to
    elsewhere, even between a check and the removal, cannot have the driver delete files
    there."""
    path, folder = Path(checkpoint.path), Path(trial_dir) / "checkpoints"
    if path.parent != folder or path.name in ("", ".", ".."):
        return f"not deleting {path}: outside {folder}"
    try:
        trial_fd = _open_folder(folder.parent)
    except OSError:  # a link, not a folder, or gone
        return f"not deleting {path}: outside {folder}"
    try:
        checkpoints_fd = _open_folder(folder.name, trial_fd)
    except OSError:
        return f"not deleting {path}: outside {folder}"
    finally:
        os.close(trial_fd)
    try:
        _remove_at(checkpoints_fd, path.name)
    except FileNotFoundError:
        pass
    except OSError as exc:
        return f"could not delete checkpoint {path}: {exc.strerror}"
    finally:
        os.close(checkpoints_fd)
    return None


def _open_folder(path: str | Path, dir_fd: int | None = None) -> int:
    """A descriptor of the folder `path` (relative to dir_fd); OSError if it is a link
    (ELOOP) or not a folder (ENOTDIR). Never blocks (a FIFO is not opened)."""
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK
                   | os.O_CLOEXEC, dir_fd=dir_fd)


def _remove_at(parent_fd: int, name: str) -> None:
    """Remove `name` from the folder `parent_fd`: a folder with all it holds, anything else
    (a link included: the link itself) by unlink. No link is followed."""
    try:
        fd = _open_folder(name, parent_fd)
    except OSError as exc:
        if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
            raise
        os.unlink(name, dir_fd=parent_fd)
        return
    try:
        with os.scandir(fd) as entries:
            names = [entry.name for entry in entries]
        for inner in names:
            _remove_at(fd, inner)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent_fd)

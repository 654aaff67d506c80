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

import json
import math
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from hpsearch.results import best
from hpsearch.spec.model import Checkpoints
from hpsearch.store import rows as r
from hpsearch.trial import CHECKPOINT_MANIFEST, checkpoint_step


@dataclass
class CheckpointScan:
    """What one trial has saved, read incrementally (the driver keeps one per live trial)."""

    trial_dir: Path
    offset: int = 0
    steps: dict[str, int] = field(default_factory=dict)   # name -> step, from the manifest
    seen: dict[str, tuple[float, int]] = field(default_factory=dict)  # name -> (mtime, step)
    warned: set[str] = field(default_factory=set)
    warnings: list[str] = field(default_factory=list)

    @property
    def folder(self) -> Path:
        return self.trial_dir / "checkpoints"

    def new(self) -> list[dict]:
        """Checkpoints new or changed since the last call: [{step, path, bytes, time}]."""
        self._read_manifest()
        try:
            entries = list(os.scandir(self.folder))
        except FileNotFoundError:
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
                size = _size(Path(entry.path))
            except FileNotFoundError:
                continue
            if self.seen.get(name) == (mtime, step):
                continue
            self.seen[name] = (mtime, step)
            found.append({"step": step, "path": str(self.folder / name), "bytes": size,
                          "time": time.time()})
        return found

    def _read_manifest(self) -> None:
        try:
            with open(self.trial_dir / CHECKPOINT_MANIFEST, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except FileNotFoundError:
            return
        end = data.rfind(b"\n")
        if end < 0:
            return
        self.offset += end + 1
        for line in data[:end].decode("utf-8", errors="replace").splitlines():
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                step, name = rec["step"], rec["path"]
                ok = isinstance(step, int) and not isinstance(step, bool) and step >= 0 \
                    and isinstance(name, str) and "/" not in name \
                    and name not in ("", ".", "..")  # a plain name inside checkpoints/
            except (ValueError, KeyError, TypeError, AttributeError):
                ok = False
            if ok:
                self.steps[name] = step
            else:
                self.warnings.append(f"{CHECKPOINT_MANIFEST}: skipped malformed line: "
                                     f"{line[:200]!r}")

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self.warned:
            self.warned.add(key)
            self.warnings.append(message)


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


def doomed(policy: Checkpoints, present: list[r.CheckpointRow], trials: list[r.TrialRow],
           directions: list[str]) -> list[r.CheckpointRow]:
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
    by_trial: dict[int, list[r.CheckpointRow]] = {}
    for c in present:
        by_trial.setdefault(c.trial, []).append(c)
    out = []
    for tid, cks in by_trial.items():
        finished = state.get(tid) in r.FINISHED
        if finished and best_ids is not None and tid not in best_ids:
            out += cks
            continue
        if policy.keep_last is None and policy.keep_best is None:
            continue
        keep = set()
        if policy.keep_last:
            newest = sorted(cks, key=lambda c: (c.step, c.time or 0.0), reverse=True)
            keep.update(c.path for c in newest[:policy.keep_last])
        if policy.keep_best:
            scored = [c for c in cks if c.metric is not None and math.isfinite(c.metric)]
            scored.sort(key=lambda c: (sign * c.metric, -c.step))
            keep.update(c.path for c in scored[:policy.keep_best])
        if not finished:
            top = max(c.step for c in cks)
            keep.update(c.path for c in cks if c.step == top)
        out += [c for c in cks if c.path not in keep]
    return out


def remove(checkpoint: r.CheckpointRow, trial_dir: str | Path) -> str | None:
    """Delete a checkpoint's file or folder; only directly inside its trial's checkpoints/.
    Returns a warning, or None."""
    path = Path(checkpoint.path)
    if path.parent != Path(trial_dir) / "checkpoints" or path.name in ("", ".", ".."):
        return f"not deleting {path}: outside {Path(trial_dir) / 'checkpoints'}"
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    except OSError as exc:
        return f"could not delete checkpoint {path}: {exc.strerror}"
    return None

"""The files of a pbt exploit: a member takes another member's (the donor's) checkpoint.

Two steps, each safe to repeat after a crash:
- stage(): at the member's boundary, the donor's checkpoint is copied into the member's
  checkpoints/ as `.pbt-next-<name>`: a name that starts with '.', which neither the trial
  (hpsearch.trial.latest_checkpoint) nor the driver's checkpoint scan ever reads. A copy,
  not a hard link: a trial that saves over its file in place (torch.save to last.pt,
  Lightning's last.ckpt) would write the donor's checkpoint too through a link.
- swap(): before the member's next segment, its own checkpoints are set aside (renamed to
  `.pbt-old-<name>`), the staged one renamed into place, and a line of checkpoints.jsonl
  registers it at the donor's step, so the member resumes from it. clear_old() removes what
  was set aside once the store says the swap is done.

The donor's checkpoint must be this user's own regular file or folder of such, no link
followed (docs/security.md): a checkpoint is loaded with pickle.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import time
from pathlib import Path

from hpsearch.trial import CHECKPOINT_MANIFEST

STAGED, OLD = ".pbt-next-", ".pbt-old-"


def not_ours(path: Path) -> str | None:
    """Why the checkpoint at `path` may not be taken, or None: it must exist, belong to
    this user and be a regular file or a folder of such, with no link in it."""
    me = os.geteuid()
    try:
        info = path.lstat()
    except OSError as e:
        return f"it cannot be read ({e.strerror})"
    if info.st_uid != me:
        return f"it belongs to uid {info.st_uid}, not to you (uid {me})"
    if stat.S_ISDIR(info.st_mode):
        for root, dirs, files in os.walk(path):
            for name in dirs + files:
                inner = os.lstat(os.path.join(root, name))
                if inner.st_uid != me or not (stat.S_ISDIR(inner.st_mode)
                                              or stat.S_ISREG(inner.st_mode)):
                    return f"{os.path.join(root, name)} in it is a link, not a file, or not yours"
        return None
    return None if stat.S_ISREG(info.st_mode) else "it is not a regular file"


def stage(donor_checkpoint: Path, member_dir: Path) -> str:
    """Copy the donor's checkpoint into the member's checkpoints/ under the staged
    name; returns the name it will have there. Raises OSError or ValueError (not_ours)."""
    why = not_ours(donor_checkpoint)
    if why:
        raise ValueError(f"{donor_checkpoint}: {why}")
    folder = _folder(member_dir)
    name = donor_checkpoint.name
    for prefix in (STAGED, OLD):  # the donor's own copy of a member it took from, staged
        name = name.removeprefix(prefix)  # and not yet swapped in: under the trial's name
    if name.startswith("."):
        name = name.lstrip(".") or "checkpoint"
    staged = folder / (STAGED + name)
    _remove(staged)
    tmp = folder / f"{STAGED}{name}.{os.getpid()}.tmp"
    _remove(tmp)
    if donor_checkpoint.is_dir():
        shutil.copytree(donor_checkpoint, tmp, symlinks=True, copy_function=_copy)
        for root, _dirs, _files in os.walk(tmp):  # folders private too (umask, ACLs)
            os.chmod(root, 0o700)
    else:
        _copy(str(donor_checkpoint), str(tmp))
    os.replace(tmp, staged)
    return name


def swap(member_dir: Path, name: str, step: int) -> None:
    """Put the staged checkpoint `name` in place of the member's own and register it at
    `step`. Done already (a crash after it, before the store said so): only the line again."""
    folder = _folder(member_dir)
    staged = folder / (STAGED + name)
    if os.path.lexists(staged):
        for entry in os.scandir(folder):
            if entry.name.startswith(".") or entry.name.endswith(".tmp"):
                continue
            aside = folder / (OLD + entry.name)
            _remove(aside)
            os.replace(entry.path, aside)
        os.replace(staged, folder / name)
    elif not os.path.lexists(folder / name):
        raise FileNotFoundError(f"{staged}: the staged checkpoint is gone")
    line = json.dumps({"step": int(step), "path": name, "time": time.time(),
                       "pbt": "exploited"}) + "\n"
    fd = os.open(member_dir / CHECKPOINT_MANIFEST,
                 os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def clear_old(member_dir: Path) -> None:
    """Remove the member's checkpoints swap() set aside (and a stage never swapped in)."""
    try:
        entries = list(os.scandir(_folder(member_dir)))
    except (FileNotFoundError, NotADirectoryError):
        return
    for entry in entries:
        if entry.name.startswith(OLD):
            _remove(Path(entry.path))


def _folder(member_dir: Path) -> Path:
    folder = member_dir / "checkpoints"
    if folder.is_symlink():
        raise ValueError(f"{folder} is a symbolic link; pbt takes checkpoints only into the "
                         "trial dir's own folder")
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder


def _copy(source: str, target: str) -> str:
    """A private copy (0600 from its creation: the runs dir's default ACL cannot widen it),
    its data on disk before it is renamed into place."""
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with open(source, "rb", opener=lambda p, f: os.open(p, f | os.O_NOFOLLOW)) as src, \
            os.fdopen(fd, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
        dst.flush()
        os.fsync(dst.fileno())
    return target


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)

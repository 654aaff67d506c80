"""An experiment's folders are its owner's alone (docs/security.md).

A driver makes the runs dir and the experiment folder owner-only (0700, whatever the
umask: a project space's `umask 002` would leave them group-writable), and refuses to run in
one that another user owns or may write: there, a group member could plant requests, pilot
assignments or links, or make the folder first and own it. The refusal says how to fix it.

With `share: group` in the spec the experiment folder is 0750 instead (and the runs dir,
where hpsearch makes it): its group may read the results, never write them (the driver's
umask does the rest: hpsearch.driver.session.share_mode). Its control folders stay 0700:
requests steer the search, and pilot assignments carry the trials' environment.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from hpsearch.errors import BadInput

OWNER_ONLY = ("requests", "pilots")  # control folders, 0700 even where the results are shared


def make_private(exp_dir: Path, group_readable: bool = False) -> None:
    """Create the runs dir and the experiment folder (0700, or 0750 if group_readable) where
    missing; raise BadInput (exit 2) if either is another user's, or writable by others, or
    the experiment folder is a symbolic link. group_readable: the experiment folder is made
    0750 also where it exists, and its OWNER_ONLY folders 0700."""
    mode = 0o750 if group_readable else 0o700
    runs_dir = exp_dir.parent
    if not runs_dir.exists():
        runs_dir.parent.mkdir(parents=True, exist_ok=True)  # above the runs dir: not ours
        _mkdir(runs_dir, mode)
    _check(runs_dir, os.stat(runs_dir), "runs dir")  # a link to scratch space is fine
    if not os.path.lexists(exp_dir):
        _mkdir(exp_dir, mode)
    _check(exp_dir, os.lstat(exp_dir), "experiment folder")
    if group_readable:
        _chmod(exp_dir, mode)
        for name in OWNER_ONLY:
            _mkdir(exp_dir / name, 0o700)
            _chmod(exp_dir / name, 0o700)


def _mkdir(path: Path, mode: int) -> None:
    try:
        os.mkdir(path, mode)
    except FileExistsError:  # made meanwhile (by whom: _check says)
        return
    _chmod(path, mode)  # whatever the umask


def _chmod(path: Path, mode: int) -> None:
    """chmod without following a link; a setgid folder (a project space's, so that what is
    made in it gets the project's group) stays setgid."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        os.fchmod(fd, mode | os.fstat(fd).st_mode & stat.S_ISGID)
    finally:
        os.close(fd)


def _check(path: Path, info: os.stat_result, what: str) -> None:
    me = os.geteuid()
    if stat.S_ISLNK(info.st_mode):
        raise BadInput(f"{what} {path} is a symbolic link: hpsearch makes it itself; remove "
                       "it, or use another --runs-dir")
    if not stat.S_ISDIR(info.st_mode):
        raise BadInput(f"{what} {path} is not a folder")
    if info.st_uid != me:
        raise BadInput(f"{what} {path} belongs to uid {info.st_uid}, not to you (uid {me}): "
                       "another user could steer this search; use a runs dir of your own "
                       "(--runs-dir or HPSEARCH_RUNS_DIR)")
    if info.st_mode & 0o022:
        raise BadInput(f"{what} {path} is writable by others (mode "
                       f"{stat.S_IMODE(info.st_mode):o}): another user could steer this "
                       f"search; make it yours alone: chmod go-w {path}")

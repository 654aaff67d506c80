"""An experiment's folders are its owner's alone (docs/security.md).

A driver makes the runs dir and the experiment folder owner-only (0700, whatever the
umask: a project space's `umask 002` would leave them group-writable), and refuses to run in
one that another user owns or may write: there, a group member could plant requests, pilot
assignments or links, or make the folder first and own it. The refusal says how to fix it.

With `share: group` in the spec the experiment folder is 0750 instead (and the runs dir,
where hpsearch makes it): its group may read the results, never write them (the driver's
umask does the rest: hpsearch.driver.session.share_mode). Its control folders stay 0700:
requests steer the search, and pilot assignments carry the trials' environment.

Two things a site's setup would otherwise undo (issue 37):
- A default ACL (`setfacl -d -m g:proj:rwx`, common on project spaces) is inherited by what
  is made below it and overrides the umask: trial folders, checkpoints and logs would be
  group-writable. The experiment folder (and a runs dir hpsearch makes) loses its ACLs, so
  everything below is made under the umask alone; a folder made by an older hpsearch under
  such an ACL is tidied once (_tidy_tree). With `share: group` a probe file checks the
  result: where files still come out group-writable (an ACL hpsearch cannot remove, such as
  NFSv4's), the driver refuses rather than share them.
- A folder above the runs dir that others may write without the sticky bit lets them rename
  the runs dir away and put their own in its place mid-search: refused, as OpenSSH's
  StrictModes refuses such a home directory.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from hpsearch.errors import BadInput

OWNER_ONLY = ("requests", "pilots")  # control folders, 0700 even where the results are shared
ACLS = ("system.posix_acl_default", "system.posix_acl_access")
PROBE = ".hpsearch-mode-probe"


def make_private(exp_dir: Path, group_readable: bool = False) -> None:
    """Create the runs dir and the experiment folder (0700, or 0750 if group_readable) where
    missing; raise BadInput (exit 2) if either is another user's, or writable by others, or
    the experiment folder is a symbolic link. group_readable: the experiment folder is made
    0750 also where it exists, and its OWNER_ONLY folders 0700."""
    mode = 0o750 if group_readable else 0o700
    runs_dir = exp_dir.parent
    if not runs_dir.exists():
        _check_ancestors(runs_dir)  # before anything is made
        runs_dir.parent.mkdir(parents=True, exist_ok=True)  # above the runs dir: not ours
        _mkdir(runs_dir, mode)
    _check(runs_dir, os.stat(runs_dir), "runs dir")  # a link to scratch space is fine
    _check_ancestors(runs_dir)
    if not os.path.lexists(exp_dir):
        _mkdir(exp_dir, mode)
    _check(exp_dir, os.lstat(exp_dir), "experiment folder")
    if _drop_acls(exp_dir):  # made by an older hpsearch under a default ACL
        _tidy_tree(exp_dir)
    if group_readable:
        _chmod(exp_dir, mode)
        for name in OWNER_ONLY:
            _mkdir(exp_dir / name, 0o700)
            _chmod(exp_dir / name, 0o700)
        _probe(exp_dir)


def _mkdir(path: Path, mode: int) -> None:
    try:
        os.mkdir(path, mode)
    except FileExistsError:  # made meanwhile (by whom: _check says)
        return
    _drop_acls(path)  # inherited from a default ACL above: they override the umask below
    _chmod(path, mode)  # whatever the umask


def _drop_acls(path: Path) -> bool:
    """Remove the folder's POSIX ACLs (its mode then says all); True if it had a default
    ACL. A filesystem without POSIX ACLs has nothing to remove."""
    had_default = False
    for name in ACLS:
        try:
            os.removexattr(path, name, follow_symlinks=False)
        except OSError as exc:
            if exc.errno not in (errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP):
                raise
        else:
            had_default = had_default or name == ACLS[0]
    return had_default


def _tidy_tree(root: Path) -> None:
    """Everything under root loses its ACLs and any group or other write (links untouched,
    never followed): what an older hpsearch made there under a default ACL."""
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError:  # a link, a socket, gone
                continue
            try:
                info = os.fstat(fd)
                if info.st_uid == os.geteuid():
                    for acl in ACLS if stat.S_ISDIR(info.st_mode) else ACLS[1:]:
                        try:
                            os.removexattr(fd, acl)
                        except OSError:
                            pass
                    os.fchmod(fd, stat.S_IMODE(info.st_mode) & ~0o022)
            finally:
                os.close(fd)


def _probe(exp_dir: Path) -> None:
    """Refuse to share a folder where a file made as a trial makes one (mode 0666 under
    the driver's umask) comes out group- or other-writable."""
    path = exp_dir / PROBE
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    umask = os.umask(0o027)  # the driver's and its trials' under share: group
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
    finally:
        os.umask(umask)
    try:
        mode = stat.S_IMODE(os.fstat(fd).st_mode)
    finally:
        os.close(fd)
        os.unlink(path)
    if mode & 0o022:
        raise BadInput(f"files made in {exp_dir} come out writable by others (mode {mode:o} "
                       "where 640 was asked: an inherited ACL hpsearch could not remove, "
                       "such as NFSv4's); share: group would let the group change results "
                       "and checkpoints. Remove the inheritable ACL of the runs dir "
                       "(setfacl -k, or nfs4_setfacl) or use share: private")


def _check_ancestors(runs_dir: Path) -> None:
    """Refuse a runs dir below a folder that others may write without the sticky bit: they
    could rename it (or a folder above it) away and put their own in its place. Both the
    path as given and the one its links lead to; the folders' owners are trusted."""
    chains = {Path(os.path.abspath(runs_dir)), Path(os.path.realpath(runs_dir))}
    for start in chains:
        for folder in start.parents:
            try:
                info = os.stat(folder)
            except FileNotFoundError:  # made next, under the umask: checked again then
                continue
            if info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX:
                who = "its group" if info.st_mode & 0o022 == 0o020 else "others"
                raise BadInput(
                    f"{folder} is writable by {who} (mode {stat.S_IMODE(info.st_mode):o}) "
                    f"without the sticky bit: one of them could rename the runs dir "
                    f"{runs_dir} away and put their own in its place mid-search. Use a runs "
                    "dir under folders only you (or root) may write, such as your home or "
                    f"/scratch/$USER (--runs-dir or HPSEARCH_RUNS_DIR), or ask the owner of "
                    f"{folder} to set the sticky bit (chmod +t), as /tmp has")


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

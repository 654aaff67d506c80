"""A site as sites are set up (issue 37): an ordinary owner who is not root, another
ordinary user of the owner's project group, a setgid project space (with or without a
default ACL, with or without the sticky bit) and the owner's own home folder. The users
find paths as users do: nothing is handed over as a file descriptor, no folder is opened
to everyone for the test.

Needs root to create the users and the group and to become them; not as root the tests
that use it skip and say why, and under CI=true (CI runs as root) they fail instead. The
users run hpsearch with the system's /usr/bin/python3 (they cannot reach this venv's
interpreter under /root) on this tree's code and this venv's packages, which must then be
the same Python minor version."""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import struct
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import ensure_system_entry

ROOT = Path(__file__).resolve().parent.parent
OWNER, OTHER, GROUP = "hpsearch-owner", "hpsearch-other", "hpsearch-proj"
PYTHON = "/usr/bin/python3"

# POSIX ACLs as the kernel stores them (linux/posix_acl_xattr.h): no setfacl needed
_UNDEFINED = 0xFFFFFFFF
USER_OBJ, GROUP_OBJ, NAMED_GROUP, MASK, OTHER_ENTRY = 0x01, 0x04, 0x08, 0x10, 0x20


def default_acl(path: Path, gid: int) -> None:
    """What `setfacl -d -m g:GROUP:rwx path` leaves on a 2770 project folder."""
    entries = [(USER_OBJ, 7, _UNDEFINED), (GROUP_OBJ, 7, _UNDEFINED), (NAMED_GROUP, 7, gid),
               (MASK, 7, _UNDEFINED), (OTHER_ENTRY, 0, _UNDEFINED)]
    data = struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries)
    os.setxattr(path, "system.posix_acl_default", data)


def acls_under(root: Path) -> dict[str, list[str]]:
    """relative path -> the POSIX ACL attributes it has, for everything under root."""
    found = {}
    for path in [root, *root.rglob("*")]:
        if not path.is_symlink():
            names = [n for n in os.listxattr(path) if n.startswith("system.posix_acl")]
            if names:
                found[str(path.relative_to(root))] = names
    return found


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]  # supplementary: the project group

    def run(self, argv: list[str], **kw) -> subprocess.CompletedProcess:
        kw.setdefault("capture_output", True)
        kw.setdefault("text", True)
        kw.setdefault("timeout", 120)
        return subprocess.run(argv, user=self.uid, group=self.gid,
                              extra_groups=list(self.groups), **kw)

    def popen(self, argv: list[str], **kw) -> subprocess.Popen:
        return subprocess.Popen(argv, user=self.uid, group=self.gid,
                                extra_groups=list(self.groups), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, **kw)

    def sh(self, script: str, *args: str) -> subprocess.CompletedProcess:
        return self.run(["/bin/sh", "-c", script, "sh", *args])

    def env(self, **extra: str) -> dict[str, str]:
        path = os.pathsep.join([str(ROOT), sysconfig.get_paths()["purelib"]])
        return {"PATH": "/usr/bin:/bin", "PYTHONPATH": path, "PYTHONDONTWRITEBYTECODE": "1",
                "HOME": "/nonexistent", "PYTHONUNBUFFERED": "1", **extra}

    def hpsearch(self, *args: str, cwd: Path, env: dict | None = None,
                 timeout: float = 120) -> subprocess.CompletedProcess:
        return self.run([PYTHON, "-m", "hpsearch", *map(str, args)], cwd=cwd,
                        env={**self.env(), **(env or {})}, timeout=timeout)


@dataclass(frozen=True)
class Site:
    owner: User
    other: User
    project_gid: int
    base: Path  # root's, 0755: where the site's folders are made

    def home(self) -> Path:
        """The owner's home: theirs, 0700."""
        path = self.base / "home-owner"
        path.mkdir(exist_ok=True)
        os.chown(path, self.owner.uid, self.owner.gid)
        os.chmod(path, 0o700)
        return path

    def project(self, name: str = "proj", *, sticky: bool = True, acl: bool = True) -> Path:
        """A project space: root's, the project group's, setgid and group-writable (2770),
        with the sticky bit (3770) and a default ACL for the group unless told not to."""
        path = self.base / name
        path.mkdir()
        os.chown(path, 0, self.project_gid)
        os.chmod(path, 0o3770 if sticky else 0o2770)
        if acl:
            default_acl(path, self.project_gid)
        return path


def _need_root() -> None:
    if os.geteuid() != 0:
        reason = "needs root to create a group and two ordinary users and to become them"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    if not os.access(PYTHON, os.X_OK) or subprocess.run(
            [PYTHON, "-c", f"import sys; sys.exit(sys.version_info[:2] != "
             f"{tuple(sys.version_info[:2])})"]).returncode:
        pytest.skip(f"the site's users run hpsearch with {PYTHON} (they cannot reach this "
                    f"venv's interpreter), which must be Python {sys.version_info[:2]}")


def _join(name: str, primary: bool) -> None:
    """Put user `name` in the project group for real: as its primary group (the owner: a
    Slurm job runs with its submitter's gid, while slurmctld caches supplementary groups for
    minutes, so a membership added now would reach no job), or in /etc/group. Retried as
    ensure_system_entry: another test process may hold the files' lock."""
    gid = grp.getgrnam(GROUP).gr_gid
    for _ in range(100):
        if (pwd.getpwnam(name).pw_gid == gid if primary
                else name in grp.getgrnam(GROUP).gr_mem):
            return
        subprocess.run(["usermod", *(["-g"] if primary else ["-a", "-G"]), GROUP, name],
                       capture_output=True)
        time.sleep(0.1)
    raise AssertionError(f"could not add {name} to {GROUP}")


@pytest.fixture(scope="module")
def site():
    _need_root()
    gid = ensure_system_entry(["groupadd", "--system"], grp.getgrnam, GROUP).gr_gid
    users = []
    for name in (OWNER, OTHER):
        entry = ensure_system_entry(["useradd", "--system", "--no-create-home", "--shell",
                                     "/usr/sbin/nologin"], pwd.getpwnam, name)
        _join(name, primary=name == OWNER)
        entry = pwd.getpwnam(name)
        users.append(User(name, entry.pw_uid, entry.pw_gid,
                          () if entry.pw_gid == gid else (gid,)))
    base = Path(tempfile.mkdtemp(prefix="hps-site-", dir="/tmp"))
    os.chmod(base, 0o755)
    yield Site(users[0], users[1], gid, base)
    shutil.rmtree(base, ignore_errors=True)

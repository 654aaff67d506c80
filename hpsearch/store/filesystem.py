"""Which filesystem the runs dir is on, and whether hpsearch must treat it as shared.

On a cluster the runs dir is on NFS, Lustre, GPFS or BeeGFS and is read from several hosts
(login node, a `--driver-job`'s node). There SQLite's WAL mode is wrong (its -shm index is
shared memory, coherent only within one host), so the store uses a rollback journal
(`journal_mode=DELETE`) on a filesystem found to be shared, and WAL on a local one
(hpsearch.store.store). The driver lock (hpsearch.store.lockfile) is the same everywhere.

Detection: `statfs(2)` through libc (its `f_type` magic number), else the longest mount
point in /proc/self/mountinfo that holds the path. A type hpsearch does not know is taken
as shared: the rollback journal is correct on local disks too, only slower.

Override: HPSEARCH_STORAGE=network (treat as shared: tests, or a site whose local-looking
mount is exported), =local (a site that knows its runs dir is read from one host only), or
=auto (the default: detect).
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from pathlib import Path

from hpsearch.errors import BadInput

STORAGE_ENV = "HPSEARCH_STORAGE"
MODES = ("auto", "network", "local")

# f_type of statfs(2) (linux/magic.h and the filesystems' own headers) -> name.
MAGIC: dict[int, str] = {
    0x6969: "nfs", 0x0BD00BD0: "lustre", 0x47504653: "gpfs", 0x19830326: "beegfs",
    0xFF534D42: "cifs", 0xFE534D42: "smb2", 0x517B: "smb", 0x00C36400: "ceph",
    0x01021997: "9p", 0x65735546: "fuse", 0x5346414F: "afs", 0x6B414653: "afs",
    0xAAD7AAEA: "panfs", 0x01161970: "gfs2", 0x7461636F: "ocfs2", 0x6E667364: "nfsd",
    0x794C7630: "overlay", 0x01021994: "tmpfs", 0x858458F6: "ramfs", 0xEF53: "ext4",
    0x58465342: "xfs", 0x9123683E: "btrfs", 0x2FC12FC1: "zfs", 0xF2F52010: "f2fs",
    0xCA451A4E: "bcachefs", 0x4D44: "vfat", 0x2011BAB0: "exfat", 0x73717368: "squashfs",
    0xE0F5E1E2: "erofs", 0x3434: "nilfs", 0x5346544E: "ntfs", 0x3153464A: "jfs",
    0x52654973: "reiserfs",
}
# Names (statfs or mountinfo; "fuse.sshfs" counts as "fuse") of filesystems other hosts see.
NETWORK = frozenset({
    "nfs", "nfs4", "lustre", "gpfs", "beegfs", "cifs", "smb2", "smb3", "smb", "smbfs",
    "ceph", "9p", "fuse", "fuseblk", "afs", "panfs", "gfs2", "ocfs2", "glusterfs",
    "orangefs", "pvfs2", "wekafs", "virtiofs", "cvfs", "quobyte", "nfsd",
})
LOCAL = frozenset({
    "overlay", "tmpfs", "ramfs", "ext2", "ext3", "ext4", "xfs", "btrfs", "zfs", "f2fs",
    "bcachefs", "vfat", "exfat", "squashfs", "erofs", "nilfs", "nilfs2", "ntfs", "ntfs3",
    "jfs", "reiserfs", "devtmpfs",
})


@dataclass(frozen=True)
class Filesystem:
    """What holds a path: `fstype` (a name, or "unknown"), its statfs `magic` (None where
    statfs failed), `how` the name was found ("statfs", "mountinfo", or "HPSEARCH_STORAGE"),
    and whether hpsearch treats it as shared between hosts (`network`)."""

    path: str
    fstype: str
    magic: int | None
    how: str
    network: bool

    @property
    def journal_mode(self) -> str:
        """The SQLite journal mode the store uses here."""
        return "delete" if self.network else "wal"

    def describe(self) -> str:
        kind = "shared (network)" if self.network else "local"
        found = f"{self.how}" + (f" 0x{self.magic:08X}" if self.magic is not None else "")
        return (f"runs dir {self.path} on {self.fstype} ({found}): treated as {kind}; store in "
                f"journal_mode={self.journal_mode}")


def storage_override() -> str:
    """HPSEARCH_STORAGE: "auto" (unset or empty), "network" or "local". Anything else is bad
    input (exit 2)."""
    value = os.environ.get(STORAGE_ENV, "").strip().lower() or "auto"
    if value not in MODES:
        raise BadInput(f"{os.environ[STORAGE_ENV][:40]!r}: expected network, local or auto",
                       "environment", key=STORAGE_ENV)
    return value


def is_network(fstype: str) -> bool:
    """Shared between hosts, or unknown (assumed shared)."""
    base = fstype.split(".", 1)[0]
    return base in NETWORK or (fstype not in LOCAL and base not in LOCAL)


def detect(path: str | Path) -> Filesystem:
    """The filesystem that holds `path` (or, if it does not exist yet, its nearest existing
    parent), with HPSEARCH_STORAGE applied."""
    where = _existing(Path(path))
    override = storage_override()
    magic = statfs_magic(where)
    name = MAGIC.get(magic) if magic is not None else None
    how = "statfs"
    if name is None:
        name, how = mount_type(where) or "unknown", "mountinfo"
    if override != "auto":
        return Filesystem(str(where), name, magic, STORAGE_ENV, override == "network")
    return Filesystem(str(where), name, magic, how, is_network(name))


def _existing(path: Path) -> Path:
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


class _StatFs(ctypes.Structure):
    # f_type (__fsword_t, a long) comes first on every Linux architecture; the rest of
    # struct statfs (120 bytes on x86_64) is room we do not read.
    _fields_ = [("f_type", ctypes.c_long), ("_rest", ctypes.c_byte * 248)]


def statfs_magic(path: str | Path) -> int | None:
    """statfs(2)'s f_type for `path` (as an unsigned 32-bit number), or None where libc or the
    call is not available."""
    try:  # the process's own symbols, libc's among them: ctypes.util.find_library("c") ran
        # `ldconfig -p` at each call, 50-90 ms, three times as a driver started
        call = ctypes.CDLL(None, use_errno=True).statfs
    except (OSError, AttributeError):
        return None
    buf = _StatFs()
    if call(os.fsencode(str(path)), ctypes.byref(buf)) != 0:
        return None
    return buf.f_type & 0xFFFFFFFF


def mount_type(path: str | Path, mountinfo: str = "/proc/self/mountinfo") -> str | None:
    """The filesystem type of the longest mount point holding `path` in mountinfo (the last
    one mounted there, as it hides the earlier ones), or None where it cannot be read."""
    target = os.path.realpath(path)
    try:
        lines = Path(mountinfo).read_text().splitlines()
    except OSError:
        return None
    best, best_len = None, -1
    for line in lines:
        head, sep, tail = line.partition(" - ")
        fields = head.split()
        if not sep or len(fields) < 5 or not tail.split():
            continue
        point = _unescape(fields[4])
        inside = point == "/" or target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= best_len:
            best, best_len = tail.split()[0], len(point)
    return best


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash in paths as octal escapes."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field

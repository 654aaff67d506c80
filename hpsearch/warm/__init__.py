"""Warm starts for Python trials: a server that has imported the trials' heavy modules (torch,
scikit-learn, ...) before anything touches CUDA, and forks a fresh process per trial.
server.py is the server, client.py the trial's side, ranks.py does torchrun's job for a node
so that every rank starts warm, and __main__.py is their command line (`python -m
hpsearch.warm serve|run|ranks`); this module holds what they share: the socket's path, the
private runtime folder, who is at the other end of a connection.

A promoted segment pays its process start again: a Python interpreter, torch's import, CUDA
and the process group. Through `python -m hpsearch.warm run -- script.py args` (the full
client; `{python}` becomes quick.py, its quick way in, which hands over to it whenever it
cannot serve the trial itself), the client hands its script, arguments,
environment, working directory and stdin/stdout/stderr to the server over a Unix socket;
the server forks, and the child runs the script as `__main__` with the modules already
imported. The client stays the trial's process: it forwards signals to the child, ends with
its exit status, and if the client dies the server kills the child's process group. Without
a server (the first trial, or the server gone) the client starts one for the next trial and
runs this one cold, by exec.

Only the standard library is imported here (the client must start fast).

Other users share the node (docs/security.md): the server's folder must be this user's own,
owner-only and not a link (else warm starts are off and trials run cold, saying why); its
lock and log are opened without following links; each end checks that the other runs as
this user (SO_PEERCRED); and a server serves one Slurm job step only, so it never forks a
trial into another job's cgroup. In a pilot the scope is the pilot's job instead: a
multi-node trial's ranks start in a new srun step each segment, so the pilot starts one
server per node in a step of its own (hpsearch.pilot.warm_servers), and its trials' clients
run cold rather than start one in their own step, which would end with it. A forked child
takes its client's CPU mask (its slot's cores), and its GPUs come with the client's
environment.
"""

from __future__ import annotations

import hashlib
import os
import socket
import stat
import struct
import sys
import tempfile
from pathlib import Path

# Set by a pilot that started its own warm servers (hpsearch.pilot.warm_servers), for every
# trial in it: their scope is the pilot's job, not the step a trial's ranks run in.
PILOT_SCOPE = "HPSEARCH_WARM_SCOPE"


def socket_path(preload: list[str]) -> Path:
    """Where the server for these preloads and this interpreter listens: one per user, per
    interpreter and module search path, per preload list, per Slurm job step (in a pilot:
    per pilot) and per node (short: a Unix socket path has ~100 bytes).

    The search path (sys.path: PYTHONPATH's entries first): a child forked from a server has
    the server's modules, hpsearch among them, so a run with another PYTHONPATH (another
    checkout) must not be served by it (tests/test_warm.py)."""
    env = os.environ
    scope = env.get(PILOT_SCOPE) or f"{env.get('SLURM_JOB_ID', '')}.{env.get('SLURM_STEP_ID', '')}"
    where = f"{scope}\0{env.get('SLURMD_NODENAME', '')}"  # nodes of the test cluster share /tmp
    paths = os.pathsep.join(sys.path)
    key = hashlib.sha256(
        f"{sys.executable}\0{paths}\0{','.join(preload)}\0{where}".encode()).hexdigest()
    return runtime_dir() / f"{key[:16]}.sock"


def runtime_dir(purpose: str = "warm") -> Path:
    """This user's folder for `purpose` (warm servers; `hpsearch dashboard`'s mirror):
    hpsearch-PURPOSE-UID under $XDG_RUNTIME_DIR, else the temp folder. Check it with
    private_dir_problem before use."""
    base = Path(os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir())
    return base / f"hpsearch-{purpose}-{os.geteuid()}"


def private_dir_problem(folder: Path) -> str | None:
    """Make `folder` (owner-only) if it is missing; then why it cannot hold this user's
    sockets or files, or None. Another user may have made it first, in a shared /tmp."""
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        return f"cannot create {folder}: {exc.strerror}"
    try:
        info = os.lstat(folder)
    except OSError as exc:
        return f"cannot check {folder}: {exc.strerror}"
    if stat.S_ISLNK(info.st_mode):
        return f"{folder} is a symbolic link"
    if not stat.S_ISDIR(info.st_mode):
        return f"{folder} is not a folder"
    if info.st_uid != os.geteuid():
        return f"{folder} is owned by uid {info.st_uid}, not by this user (uid {os.geteuid()})"
    if info.st_mode & 0o077:
        return f"{folder} is open to other users (mode {stat.S_IMODE(info.st_mode):o})"
    return None


def peer_uid(conn: socket.socket) -> int:
    """The uid of the process at the other end of a connected Unix socket (SO_PEERCRED)."""
    return _peer(conn)[1]


def peer_pid(conn: socket.socket) -> int:
    """The pid of the process at the other end of a connected Unix socket (SO_PEERCRED)."""
    return _peer(conn)[0]


def _peer(conn: socket.socket) -> tuple[int, int, int]:
    size = struct.calcsize("3i")
    pid, uid, gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET,
                                                        socket.SO_PEERCRED, size))
    return pid, uid, gid


def open_private(path: str, flags: int) -> int:
    """os.open for the server's lock and log: created owner-only, a link never followed."""
    return os.open(path, flags | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)

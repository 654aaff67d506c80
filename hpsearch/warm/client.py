"""The warm client: the trial's own process. It asks the warm server to fork the trial, then
forwards signals to it and exits with its status. Without a server it starts one (for the
next trial) and runs this trial itself, cold, by exec."""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
from pathlib import Path

from hpsearch.procs import module_argv
from hpsearch.warm import PILOT_SCOPE, open_private, peer_uid, private_dir_problem

MAX_SOCKET_PATH = 107  # sun_path on Linux: 108 bytes with the trailing NUL
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2,
             signal.SIGCONT)


def run(path: str, preload: list[str], argv: list[str], idle_timeout: float) -> int:
    if argv[0].startswith("-") and argv[0] != "-m":  # interpreter options, -c: run cold
        os.execv(sys.executable, [sys.executable] + argv)
    problem = private_dir_problem(Path(path).parent)
    if problem:  # someone else's folder: neither our socket nor our environment goes there
        _cold(argv, f"warm starts are off on this node: {problem}")
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:  # bind and connect would fail: say why
        _cold(argv, f"warm starts are off: the socket path {path} is longer than the "
              f"{MAX_SOCKET_PATH} bytes a Unix socket allows; set XDG_RUNTIME_DIR to a "
              "shorter folder")
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
    except OSError:
        conn.close()
        if os.environ.get(PILOT_SCOPE):  # the pilot starts its servers: one started here
            _cold(argv, "the pilot's warm server on this node is not up (yet)")  # would
        _start_server(path, preload, idle_timeout)  # end with this trial's step
        os.execv(sys.executable, [sys.executable] + argv)  # this one runs cold
    if peer_uid(conn) != os.geteuid():  # a socket planted by another user
        conn.close()
        _cold(argv, f"the server at {path} does not run as this user")
    body = json.dumps({"argv": argv, "env": dict(os.environ), "cwd": os.getcwd()}).encode()
    conn.sendmsg([struct.pack("!I", len(body)), body],
                 [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("3i", 0, 1, 2))])
    replies = conn.makefile("rb")
    first = replies.readline()
    if not first:
        print("hpsearch.warm: the server closed the connection; running cold", file=sys.stderr)
        os.execv(sys.executable, [sys.executable] + argv)
    pid = json.loads(first)["pid"]
    for sig in FORWARDED:
        signal.signal(sig, lambda s, f: _forward(pid, s))
    last = replies.readline()
    if not last:  # the server died: its status cannot be known, and the attempt ends here
        _forward(pid, signal.SIGKILL)  # so the child must not run on past it, unwatched
        print(f"hpsearch.warm: the server ended before trial process {pid}; killed it",
              file=sys.stderr)
        return 1
    return int(json.loads(last)["status"])


def _cold(argv: list[str], why: str) -> None:
    print(f"hpsearch.warm: {why}; running cold", file=sys.stderr, flush=True)
    os.execv(sys.executable, [sys.executable] + argv)


def _forward(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except OSError:
        pass


def _start_server(path: str, preload: list[str], idle_timeout: float) -> None:
    try:  # a link planted in its place must not redirect the server's log
        log: int = open_private(f"{path}.log", os.O_WRONLY | os.O_APPEND)
    except OSError:
        log = subprocess.DEVNULL
    subprocess.Popen([*module_argv(sys.executable, "hpsearch.warm", "serve"), "--socket", path,
                      "--preload", ",".join(preload), "--idle-timeout", str(idle_timeout)],
                     stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                     close_fds=True)
    if log != subprocess.DEVNULL:
        os.close(log)

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

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2,
             signal.SIGCONT)


def run(path: str, preload: list[str], argv: list[str], idle_timeout: float) -> int:
    if argv[0].startswith("-") and argv[0] != "-m":  # interpreter options, -c: run cold
        os.execv(sys.executable, [sys.executable] + argv)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
    except OSError:
        conn.close()
        _start_server(path, preload, idle_timeout)
        os.execv(sys.executable, [sys.executable] + argv)  # this one runs cold
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
    if not last:  # the server died: the child may run on, and its status is unknown
        print(f"hpsearch.warm: the server ended before trial process {pid}", file=sys.stderr)
        return 1
    return int(json.loads(last)["status"])


def _forward(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except OSError:
        pass


def _start_server(path: str, preload: list[str], idle_timeout: float) -> None:
    log = open(f"{path}.log", "ab") if os.path.isdir(os.path.dirname(path)) else \
        subprocess.DEVNULL
    subprocess.Popen([sys.executable, "-m", "hpsearch.warm", "serve", "--socket", path,
                      "--preload", ",".join(preload), "--idle-timeout", str(idle_timeout)],
                     stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                     close_fds=True)

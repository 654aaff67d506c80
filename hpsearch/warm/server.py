"""The warm server: imports the preloaded modules once, then forks one child per request.

Protocol (one Unix stream connection per trial): the client sends one JSON request
{"argv", "env", "cwd"} with its stdin, stdout and stderr attached (SCM_RIGHTS); the server
answers {"pid": N} once the child runs and {"status": exit code} when it ends (128 + N for a
signal, as shells say). A connection that closes before its child ended means the client
died (killed with its trial): the child's process group is killed. With no child and no
client for `idle_timeout` seconds the server exits. One server per socket path: it holds an
flock on `<socket>.lock` while it lives.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import importlib
import json
import os
import selectors
import signal
import socket
import struct
import sys
import time
import traceback
from pathlib import Path

from hpsearch.warm import open_private, peer_pid, peer_uid, private_dir_problem, quick

MAX_REQUEST = 1 << 22  # 4 MiB of argv + environment
RECEIVE_TIMEOUT = 10.0  # seconds a client may take to send its request


def serve(path: str, preload: list[str], idle_timeout: float) -> int:
    sock_path = Path(path)
    problem = private_dir_problem(sock_path.parent)
    if problem:
        print(f"hpsearch.warm: not serving: {problem}", file=sys.stderr)
        return 2
    lock = os.fdopen(open_private(f"{sock_path}.lock", os.O_WRONLY), "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return 0  # another server has this path
    for name in preload:
        importlib.import_module(name)  # before any fork: the children find them imported
    sock_path.unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(sock_path))
    listener.listen(64)
    alias = _alias(sock_path, preload)
    try:
        return _Server(listener, sock_path, idle_timeout, lock).loop()
    finally:
        if alias is not None:
            with contextlib.suppress(OSError):
                if os.readlink(alias) == sock_path.name:  # not a later server's by now
                    alias.unlink()


def _alias(sock_path: Path, preload: list[str]) -> Path | None:
    """The quick client's way to this socket (hpsearch.warm.quick.alias_name): a link beside
    it in the private folder, made anew (a dead server's is replaced)."""
    alias = sock_path.with_name(quick.alias_name(os.environ, sys.executable, preload))
    fresh = alias.with_name(f".{alias.name}.{os.getpid()}")
    try:
        fresh.unlink(missing_ok=True)
        os.symlink(sock_path.name, fresh)
        os.replace(fresh, alias)
    except OSError as exc:
        print(f"hpsearch.warm: no quick way in ({exc}); trials start through the full "
              "client", file=sys.stderr)
        return None
    return alias


class _Server:
    def __init__(self, listener: socket.socket, path: Path, idle_timeout: float,
                 lock) -> None:
        self.listener, self.path, self.idle_timeout = listener, path, idle_timeout
        self.lock = lock  # the flock that makes this the path's one server
        self.selector = selectors.DefaultSelector()
        self.selector.register(listener, selectors.EVENT_READ, "accept")
        self.wake_read, wake_write = os.pipe()
        os.set_blocking(self.wake_read, False)
        os.set_blocking(wake_write, False)
        signal.set_wakeup_fd(wake_write)
        signal.signal(signal.SIGCHLD, lambda s, f: None)  # wakes the loop through the fd
        self.selector.register(self.wake_read, selectors.EVENT_READ, "child")
        self.children: dict[int, socket.socket] = {}  # child pid -> its client's connection
        self.last_busy = time.monotonic()

    def loop(self) -> int:
        while True:
            for key, _ in self.selector.select(timeout=1.0):
                if key.data == "accept":
                    self._accept()
                elif key.data == "child":
                    self._drain_wakeups()
                elif isinstance(key.fileobj, socket.socket):  # _accept's, with its child's pid
                    self._client_event(key.fileobj, key.data)
            self._reap()
            if self.children:
                self.last_busy = time.monotonic()
            elif time.monotonic() - self.last_busy > self.idle_timeout:
                self.path.unlink(missing_ok=True)
                return 0

    def _accept(self) -> None:
        conn, _ = self.listener.accept()
        if peer_uid(conn) != os.geteuid():  # the folder is private: not expected
            print("hpsearch.warm: refused a client of another user", file=sys.stderr)
            conn.close()
            return
        try:
            request, fds = _receive(conn)
        except (OSError, ValueError, RecursionError) as exc:
            print(f"hpsearch.warm: bad request: {exc}", file=sys.stderr)
            conn.close()
            return
        cpus = _cpus_of(peer_pid(conn))
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            self._become_child(conn, request, fds, cpus)
        for fd in fds:
            os.close(fd)
        self.children[pid] = conn
        self.selector.register(conn, selectors.EVENT_READ, pid)
        conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")

    def _client_event(self, conn: socket.socket, pid: int) -> None:
        try:
            data = conn.recv(1)
        except OSError:
            data = b""
        if not data:  # the client died, or gave up: its child goes with it
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
            self.selector.unregister(conn)

    def _drain_wakeups(self) -> None:
        try:
            while os.read(self.wake_read, 512):
                pass
        except BlockingIOError:
            pass

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            if conn is None:
                continue
            code = os.waitstatus_to_exitcode(status)
            try:
                conn.sendall(json.dumps({"status": 128 - code if code < 0 else code})
                             .encode() + b"\n")
            except OSError:
                pass
            try:
                self.selector.unregister(conn)
            except (KeyError, ValueError):
                pass
            conn.close()

    def _become_child(self, conn: socket.socket, request: dict, fds: list[int],
                      cpus: set[int] | None) -> None:
        """In the forked child: become the trial's process, on its client's CPUs, and run
        its script; never returns."""
        code = 1
        try:
            if cpus:  # a pilot's server holds all of the node's: the client, its slot's
                os.sched_setaffinity(0, cpus)
            signal.set_wakeup_fd(-1)
            for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGUSR1,
                        signal.SIGUSR2, signal.SIGHUP):
                signal.signal(sig, signal.SIG_DFL)
            self.selector.close()
            self.listener.close()
            self.lock.close()  # a child must not keep the server's flock
            for other in self.children.values():
                other.close()
            conn.close()
            os.setsid()  # its own process group: signals from the client reach it alone
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
                os.close(fd)
            os.chdir(request["cwd"])
            os.environ.clear()
            os.environ.update(request["env"])
            code = _run_main(list(request["argv"]))
        except BaseException:  # noqa: BLE001 - reported like Python would, exit 1
            traceback.print_exc()
        finally:
            try:
                atexit._run_exitfuncs()
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)


def _cpus_of(pid: int) -> set[int] | None:
    try:
        return os.sched_getaffinity(pid)
    except OSError:  # it has gone already: its child is killed when its connection closes
        return None


def _run_main(argv: list[str]) -> int:
    """Run `script.py args` or `-m module args` as __main__, as the interpreter would."""
    import runpy
    try:
        if argv[0] == "-m":
            sys.argv = argv[1:]
            sys.path[0] = os.getcwd()
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = argv
            sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as exc:
        if exc.code is None:
            return 0
        if isinstance(exc.code, int):
            return exc.code
        print(exc.code, file=sys.stderr)
        return 1
    return 0


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    """One request: a 4-byte length, the JSON, and the three fds that came with it. A
    client that stalls mid-request holds the (single-threaded) server at most
    RECEIVE_TIMEOUT seconds."""
    fds: list[int] = []
    conn.settimeout(RECEIVE_TIMEOUT)
    try:
        request = _read_request(conn, fds)
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    finally:
        conn.settimeout(None)
    return request, fds


def _read_request(conn: socket.socket, fds: list[int]) -> dict:
    head, ancillary, _, _ = conn.recvmsg(4, socket.CMSG_SPACE(3 * 4))
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds += list(struct.unpack(f"{len(data) // 4}i", data[:len(data) // 4 * 4]))
    if len(head) != 4 or len(fds) != 3:
        raise ValueError("expected a length and three file descriptors")
    (size,) = struct.unpack("!I", head)
    if size > MAX_REQUEST:
        raise ValueError(f"request of {size} bytes")
    body = b""
    while len(body) < size:
        chunk = conn.recv(size - len(body))
        if not chunk:
            raise ValueError("request cut short")
        body += chunk
    request = json.loads(body)
    if not (isinstance(request, dict) and isinstance(request.get("cwd"), str)
            and isinstance(request.get("env"), dict)
            and all(isinstance(k, str) and isinstance(v, str)
                    for k, v in request["env"].items())
            and isinstance(request.get("argv"), list) and request["argv"]
            and all(isinstance(a, str) for a in request["argv"])):
        raise ValueError("expected {argv: [str, ...], env: {str: str}, cwd: str}")
    return request

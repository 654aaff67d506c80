"""The warm client's quick way in: what `{python}` runs under `executor.warm`.

    python -I -S .../hpsearch/warm/quick.py PRELOAD -- script.py args   (or -- -m module args)

A warm trial paid an interpreter twice: the client (site, then hpsearch.warm's imports:
about 50 ms here) before the server forked the trial. This script runs isolated and without
site (-I -S: nothing imported from the environment, the workdir or site-packages) and
imports only the C modules of the standard library, so it costs about 11 ms. It finds the
server by an alias that the server makes beside its socket (alias_name: the same user,
interpreter, preloads, scope and node, and the variables that shape the module search path),
checks the folder and the peer as the client does, and hands over the trial the same way:
argv, environment and working directory as JSON, stdin/stdout/stderr as descriptors. It
forwards signals to the trial and exits with its status.

Anything else (no alias, no server, another user's folder or socket, interpreter options
before the script) goes to the full client, `python -m hpsearch.warm run` (hpsearch.warm.
client), by exec, with the same arguments: it starts a server, runs the trial cold and says
why, as before. In a pilot, whose servers the pilot starts, a trial that finds its node's
not up yet runs cold at once, as the full client would have it do.
"""

from __future__ import annotations

import os
import sys

# hpsearch.procs.SAFE_MODULE_RUN (`python -m` without the current folder on sys.path); this
# script imports nothing of hpsearch's (tests/test_warm_quick.py checks they are equal)
SAFE_MODULE_RUN = ("import sys; sys.path[0] or sys.path.pop(0); import runpy; "
                   "del sys.argv[0]; runpy._run_module_as_main(sys.argv[0])")
# What makes an interpreter's module search path besides its executable (sys.path is not
# known here without site, which is the cost this script avoids)
PATH_VARIABLES = ("PYTHONPATH", "PYTHONHOME", "PYTHONNOUSERSITE", "PYTHONUSERBASE",
                  "PYTHONSAFEPATH", "PYTHONPLATLIBDIR", "HOME")
FORWARDED = (15, 2, 1, 10, 12, 18)  # SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2, SIGCONT


def folder(env: dict[str, str] | os._Environ[str]) -> str:
    """This user's warm folder (hpsearch.warm.runtime_dir), without tempfile: under
    $XDG_RUNTIME_DIR, else $TMPDIR, $TEMP or $TMP where it is a folder, else /tmp. Where the
    temp folder is another, the alias is not found, and the full client runs."""
    base = env.get("XDG_RUNTIME_DIR") or next(
        (env[name] for name in ("TMPDIR", "TEMP", "TMP")
         if env.get(name) and os.path.isdir(env[name])), "/tmp")
    return os.path.join(base, f"hpsearch-warm-{os.geteuid()}")


def alias_name(env: dict[str, str] | os._Environ[str], executable: str,
               preload: list[str]) -> str:
    """The alias's file name, for a server and a client with these variables, interpreter
    and preloads (hpsearch.warm.socket_path's scope and node, the search path's variables)."""
    try:
        from _sha256 import sha256  # Python < 3.12
    except ImportError:
        from _sha2 import sha256
    scope = env.get("HPSEARCH_WARM_SCOPE") or \
        f"{env.get('SLURM_JOB_ID', '')}.{env.get('SLURM_STEP_ID', '')}"
    words = [executable, ",".join(preload), scope, env.get("SLURMD_NODENAME", ""),
             *(f"{name}={env.get(name, '')}" for name in PATH_VARIABLES)]
    return sha256("\0".join(words).encode("utf-8", "surrogateescape")).hexdigest()[:16] + \
        ".quick"


def json_string(text: str) -> str:
    """`text` as json.dumps writes it (ASCII only), without importing json."""
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif 0x20 <= code < 0x7F:
            out.append(ch)
        elif code > 0xFFFF:
            code -= 0x10000
            out.append(f"\\u{0xD800 | code >> 10:04x}\\u{0xDC00 | code & 0x3FF:04x}")
        else:
            out.append(f"\\u{code:04x}")
    out.append('"')
    return "".join(out)


def request(argv: list[str], env: dict[str, str] | os._Environ[str], cwd: str) -> bytes:
    """The server's request (hpsearch.warm.server._read_request): argv, env and cwd."""
    return ('{"argv": [' + ", ".join(json_string(a) for a in argv) + '], "env": {'
            + ", ".join(f"{json_string(k)}: {json_string(v)}" for k, v in env.items())
            + '}, "cwd": ' + json_string(cwd) + "}").encode("ascii")


def _full_client(preload: str, argv: list[str]) -> None:
    os.execv(sys.executable, [sys.executable, "-c", SAFE_MODULE_RUN, "hpsearch.warm", "run",
                              "--preload", preload, "--", *argv])


def _private(path: str) -> bool:
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return (info.st_mode & 0o170777) == 0o040700 and info.st_uid == os.geteuid()


def _number(line: bytes, key: bytes) -> int | None:
    """N from the server's reply line `{"KEY": N}`."""
    head, _, rest = line.strip().partition(b":")
    if head.strip(b'{ "') != key:
        return None
    try:
        return int(rest.strip(b" }"))
    except ValueError:
        return None


def main(args: list[str]) -> int:
    if len(args) < 3 or args[1] != "--":
        os.write(2, b"usage: python -I -S quick.py PRELOAD -- script.py args\n")
        return 2
    preload, argv = args[0], args[2:]
    if (argv[0].startswith("-") and argv[0] != "-m"):
        _full_client(preload, argv)  # interpreter options, -c: the full client runs cold
    import _socket
    here = folder(os.environ)
    if not _private(here):  # missing, or not this user's own: the full client says why
        _full_client(preload, argv)
    path = os.path.join(here, alias_name(os.environ, sys.executable, preload.split(",")))
    conn = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        conn.connect(path)
        _, uid, _ = (int.from_bytes(conn.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED,
                                                    12)[i:i + 4], sys.byteorder)
                     for i in (0, 4, 8))
        if uid != os.geteuid():  # planted: not a byte goes there
            conn.close()
            os.write(2, f"hpsearch.warm: the server at {path} does not run as this user; "
                        "the full client takes the trial\n".encode())
            _full_client(preload, argv)
        body = request(argv, os.environ, os.getcwd())
        fds = b"".join(fd.to_bytes(4, sys.byteorder) for fd in (0, 1, 2))
        conn.sendmsg([len(body).to_bytes(4, "big"), body],
                     [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, fds)])
    except OSError:
        conn.close()
        if os.environ.get("HPSEARCH_WARM_SCOPE"):  # a pilot's: it starts the servers itself
            os.write(2, b"hpsearch.warm: the pilot's warm server on this node is not up "
                        b"(yet); running cold\n")  # the full client's words, 50 ms sooner
            os.execv(sys.executable, [sys.executable, *argv])
        _full_client(preload, argv)
    return _relay(conn, argv)


def _relay(conn, argv: list[str]) -> int:
    """Wait for the server's two lines: the trial's pid (then signals go to its group) and
    its exit status."""
    import _signal
    buffer = b""

    def line() -> bytes:
        nonlocal buffer
        while b"\n" not in buffer:
            chunk = conn.recv(4096)
            if not chunk:
                return b""
            buffer += chunk
        head, _, buffer = buffer.partition(b"\n")
        return head

    pid = _number(line(), b"pid")
    if pid is None:  # the request was not taken: the trial runs cold, as the client does
        os.write(2, b"hpsearch.warm: the server closed the connection; running cold\n")
        os.execv(sys.executable, [sys.executable, *argv])
    for sig in FORWARDED:
        _signal.signal(sig, lambda s, f: _forward(pid, s))
    status = _number(line(), b"status")
    if status is None:  # as the full client: the attempt ends here, and so does the child
        _forward(pid, 9)  # SIGKILL
        os.write(2, f"hpsearch.warm: the server ended before trial process {pid}; killed "
                    "it\n".encode())
        return 1
    return status


def _forward(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

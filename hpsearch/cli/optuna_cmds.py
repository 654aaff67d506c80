"""`hpsearch optuna` (mirror an experiment into an Optuna storage) and `hpsearch dashboard`
(optuna-dashboard on such a mirror). Both only read hpsearch's store (docs/optuna.md).

Other users share a login node (docs/security.md): the dashboard's default mirror lives in
this user's private runtime folder (hpsearch.warm.runtime_dir, checked as the warm servers'
is), and on a TCP port every local user can connect, which it says at start. `--socket`
serves on a Unix socket in that folder instead: only its owner (and root) can connect."""

from __future__ import annotations

import hashlib
import importlib
import os
import signal
import socket
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from hpsearch.cli.common import add_command, add_runs_dir, runs_dir_of
from hpsearch.errors import EXIT_BAD_INPUT, BadInput
from hpsearch.store import runs
from hpsearch.store.lockfile import DriverLock
from hpsearch.warm import private_dir_problem, runtime_dir

if TYPE_CHECKING:
    from hpsearch.interop.optuna_mirror import SyncResult

STORAGE_HELP = ("an Optuna storage: an RDB URL (sqlite:///mirror.db, postgresql://...) or a "
                "JournalStorage file (journal:PATH, or a path ending in .log or .jsonl)")
INSTALL_DASHBOARD = "pip install 'hpsearch[dashboard]'"


def register(sub) -> None:
    p = add_command(sub, "optuna", "Write an experiment as an Optuna study into an Optuna "
                    "storage (again: only what changed), so that optuna.load_study and "
                    "optuna-dashboard read it. hpsearch's own store is only read.",
                    "  hpsearch optuna quadratic --storage sqlite:///quadratic.db\n"
                    "  hpsearch optuna quadratic --storage quadratic.log --follow   "
                    "# a JournalStorage file, kept up to date while the search runs\n"
                    "  python -c \"import optuna; print(optuna.load_study(study_name="
                    "'quadratic', storage='sqlite:///quadratic.db').best_trial)\"", mirror)
    p.add_argument("name")
    p.add_argument("--storage", required=True, help=STORAGE_HELP)
    p.add_argument("--study-name", help="the study's name (default: the experiment's)")
    p.add_argument("--follow", action="store_true", help="sync every --interval seconds "
                   "until the experiment's driver ends, then exit 0")
    p.add_argument("--interval", type=float, default=5.0,
                   help="seconds between syncs with --follow (default 5)")
    add_runs_dir(p)
    p = add_command(sub, "dashboard", "Run optuna-dashboard on an Optuna mirror of the "
                    "experiment, kept up to date while its driver runs (needs "
                    f"{INSTALL_DASHBOARD}). Ctrl-C stops it; the search goes on.",
                    "  hpsearch dashboard quadratic                # http://127.0.0.1:8080/"
                    "dashboard/\n"
                    "  hpsearch dashboard quadratic --port 8090 --storage sqlite:///q.db\n"
                    "  hpsearch dashboard quadratic --socket   # only you can connect; it "
                    "prints the ssh -L line for your computer",
                    dashboard)
    p.add_argument("name")
    p.add_argument("--port", type=int, default=8080, help="port to listen on (default 8080)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default "
                   "127.0.0.1: this machine only, but every user of it can connect)")
    p.add_argument("--socket", action="store_true", help="listen on a Unix socket in your "
                   "private runtime folder instead of a port: only you (and root) can "
                   "connect; from your computer, through ssh -L PORT:SOCKET")
    p.add_argument("--storage", help=STORAGE_HELP + " (default: a journal file in "
                   f"{runtime_dir('dashboard')}, yours alone)")
    p.add_argument("--interval", type=float, default=5.0,
                   help="seconds between syncs while the driver runs (default 5)")
    add_runs_dir(p)


def _said(name: str, storage_url: str, study: str):
    last: list[SyncResult] = []

    def say(result: SyncResult) -> None:
        line = (f"{name}: {result.trials} trials in study '{study}' of {storage_url} "
                f"({result.added} added, {result.updated} updated)")
        if not last or result.added or result.updated:
            print(line, flush=True)
        last.append(result)
    return say


def mirror(args) -> int:
    from hpsearch.interop import optuna_mirror
    from hpsearch.interop.store_view import read_view
    exp_dir = runs.existing_experiment_dir(runs_dir_of(args), args.name)
    storage = optuna_mirror.open_storage(args.storage)
    study = args.study_name or args.name
    say = _said(args.name, args.storage, study)
    if not args.follow:
        say(optuna_mirror.sync(read_view(exp_dir), storage, study))
        return 0
    lock = DriverLock(exp_dir)
    optuna_mirror.follow(exp_dir, storage, study, args.interval,
                         lambda: lock.holder() is not None, say)
    print(f"{args.name}: its driver is not running; the mirror is final", flush=True)
    return 0


def _private_file(exp_dir: Path, suffix: str) -> Path:
    """A file per experiment folder (its journal mirror, its socket) in this user's private
    runtime folder. Refused (BadInput) where that folder is another user's (made first, in
    a shared /tmp), open to others, or a link: there another user could read the mirror,
    change it through a link, or listen in the socket's place."""
    folder = runtime_dir("dashboard")
    problem = private_dir_problem(folder)
    if problem:
        raise BadInput(f"{problem}: not used for the dashboard (another user could read or "
                       "change what it holds); remove it if it is yours, or give --storage "
                       "(and --port)")
    tag = hashlib.sha256(str(exp_dir).encode()).hexdigest()[:8]
    return folder / f"{exp_dir.name}-{tag}{suffix}"


def _who_can_connect(host: str, port: int) -> str:
    if host in ("127.0.0.1", "localhost", "::1") or host.startswith("127."):
        return (f"every user of this machine can connect to {host}:{port} and read this "
                f"experiment's trials (a loopback port is not private to you); for you "
                f"alone, use --socket (then ssh -L from your computer)")
    return (f"anyone who can reach {host}:{port} over the network can connect and read this "
            "experiment's trials; for you alone, use --socket (then ssh -L from your "
            "computer)")


def _serve_unix(app, path: Path) -> None:
    """Serve the WSGI `app` on a Unix socket at `path` (in a folder of this user's alone:
    nobody else may connect) until interrupted. A socket left there by a dashboard that
    ended is replaced; one that still answers is refused (BadInput)."""
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

    class Server(WSGIServer):
        address_family = socket.AF_UNIX

        def server_bind(self) -> None:
            self.socket.bind(self.server_address)
            self.server_name, self.server_port = "localhost", 0
            self.setup_environ()

    class Handler(WSGIRequestHandler):
        def __init__(self, request, client_address, server) -> None:
            super().__init__(request, ("local", 0), server)  # a Unix peer has no address

    with socket.socket(socket.AF_UNIX) as probe:
        try:
            probe.connect(os.fspath(path))
        except OSError:
            path.unlink(missing_ok=True)  # none, or a dashboard's that ended
        else:
            raise BadInput(f"another dashboard serves {path}; stop it first")
    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # out of serve_forever: the socket is removed below

    # Ctrl-C and `kill` stop it, also where it was started with SIGINT ignored (a shell's
    # background job, nohup ... &): else a socket nobody serves would be left behind.
    before = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    with Server(os.fspath(path), Handler) as server:  # type: ignore[arg-type]  # a path
        server.set_app(app)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            path.unlink(missing_ok=True)
            for s, handler in before.items():
                signal.signal(s, handler)


def dashboard(args) -> int:
    exp_dir = runs.existing_experiment_dir(runs_dir_of(args), args.name)
    url = args.storage or str(_private_file(exp_dir, ".log"))
    path = _private_file(exp_dir, ".sock") if args.socket else None
    try:
        server = importlib.import_module("optuna_dashboard")
    except ImportError:
        print("hpsearch: error: `hpsearch dashboard` needs optuna-dashboard, which is not "
              f"installed here: {INSTALL_DASHBOARD} (or pip install optuna-dashboard)",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    from hpsearch.interop import optuna_mirror
    from hpsearch.interop.store_view import read_view
    storage = optuna_mirror.open_storage(url)
    say = _said(args.name, url, args.name)
    say(optuna_mirror.sync(read_view(exp_dir), storage, args.name))
    lock = DriverLock(exp_dir)
    if lock.holder() is not None:
        threading.Thread(target=optuna_mirror.follow, daemon=True, name="mirror", args=(
            exp_dir, storage, args.name, args.interval, lambda: lock.holder() is not None,
            say)).start()
    if path is not None:
        print(f"optuna-dashboard of {args.name}: on the Unix socket {path} (only you and root "
              f"can connect). From your computer: ssh -N -L 8080:{path} "
              f"{socket.gethostname()}, then open http://127.0.0.1:8080/dashboard/",
              flush=True)
        _serve_unix(server.wsgi(storage), path)
        return 0
    print(f"optuna-dashboard of {args.name}: http://{args.host}:{args.port}/dashboard/",
          flush=True)
    print(f"hpsearch: note: {_who_can_connect(args.host, args.port)}", file=sys.stderr,
          flush=True)
    server.run_server(storage, host=args.host, port=args.port)
    return 0

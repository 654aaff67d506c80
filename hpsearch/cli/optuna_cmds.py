"""`hpsearch optuna` (mirror an experiment into an Optuna storage) and `hpsearch dashboard`
(optuna-dashboard on such a mirror). Both only read hpsearch's store (docs/optuna.md)."""

from __future__ import annotations

import hashlib
import importlib
import os
import sys
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from hpsearch.cli.common import add_command, add_runs_dir, runs_dir_of
from hpsearch.errors import EXIT_BAD_INPUT
from hpsearch.store import runs

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
                    "  ssh -L 8080:localhost:8080 login-node   # then open it on your laptop",
                    dashboard)
    p.add_argument("name")
    p.add_argument("--port", type=int, default=8080, help="port to listen on (default 8080)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default "
                   "127.0.0.1: this machine only)")
    p.add_argument("--storage", help=STORAGE_HELP + " (default: a journal file in "
                   f"{tempfile.gettempdir()})")
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
    exp_dir = runs.existing_experiment_dir(runs_dir_of(args), args.name)
    storage = optuna_mirror.open_storage(args.storage)
    study = args.study_name or args.name
    say = _said(args.name, args.storage, study)
    if not args.follow:
        say(optuna_mirror.sync(optuna_mirror.read_view(exp_dir), storage, study))
        return 0
    lock = runs.DriverLock(exp_dir)
    optuna_mirror.follow(exp_dir, storage, study, args.interval,
                         lambda: lock.holder() is not None, say)
    print(f"{args.name}: its driver is not running; the mirror is final", flush=True)
    return 0


def _default_storage(exp_dir: Path) -> str:
    """A journal file per experiment folder in the temporary directory (a mirror can always
    be written again from the store)."""
    tag = hashlib.sha256(str(exp_dir).encode()).hexdigest()[:8]
    folder = Path(tempfile.gettempdir()) / f"hpsearch-dashboard-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    return str(folder / f"{exp_dir.name}-{tag}.log")


def dashboard(args) -> int:
    try:
        server = importlib.import_module("optuna_dashboard")
    except ImportError:
        print("hpsearch: error: `hpsearch dashboard` needs optuna-dashboard, which is not "
              f"installed here: {INSTALL_DASHBOARD} (or pip install optuna-dashboard)",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    from hpsearch.interop import optuna_mirror
    exp_dir = runs.existing_experiment_dir(runs_dir_of(args), args.name)
    url = args.storage or _default_storage(exp_dir)
    storage = optuna_mirror.open_storage(url)
    say = _said(args.name, url, args.name)
    say(optuna_mirror.sync(optuna_mirror.read_view(exp_dir), storage, args.name))
    lock = runs.DriverLock(exp_dir)
    if lock.holder() is not None:
        threading.Thread(target=optuna_mirror.follow, daemon=True, name="mirror", args=(
            exp_dir, storage, args.name, args.interval, lambda: lock.holder() is not None,
            say)).start()
    print(f"optuna-dashboard of {args.name}: http://{args.host}:{args.port}/dashboard/",
          flush=True)
    server.run_server(storage, host=args.host, port=args.port)
    return 0

"""`hpsearch tensorboard` and `hpsearch mlflow`: mirror an experiment into a TensorBoard log
directory or an MLflow tracking store, as `hpsearch optuna` mirrors it into Optuna: again
only what changed, `--follow` while the search runs, hpsearch's store only read
(docs/tensorboard-mlflow.md)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hpsearch.cli.common import add_command, add_runs_dir, runs_dir_of
from hpsearch.errors import EXIT_BAD_INPUT
from hpsearch.store import runs
from hpsearch.store.lockfile import DriverLock


def register(sub) -> None:
    p = add_command(sub, "tensorboard", "Write an experiment into a TensorBoard log directory "
                    "(again: only what changed): a run per trial with its metrics by step, "
                    "and TensorBoard's HParams dashboard of every trial's parameters and "
                    "metrics, with what each trial cost (gpu_hours, node_hours, wall_s, "
                    "parallel_efficiency) and its rung. Needs pip install "
                    "'hpsearch[tensorboard]'. hpsearch's own store is only read.",
                    "  hpsearch tensorboard quadratic --logdir tb/quadratic\n"
                    "  hpsearch tensorboard quadratic --logdir tb/quadratic --follow   "
                    "# kept up to date while the search runs\n"
                    "  tensorboard --logdir tb/quadratic      # then open the HPARAMS tab",
                    tensorboard)
    p.add_argument("name")
    p.add_argument("--logdir", type=Path, required=True, help="the log directory (made where "
                   "missing, with its parents), LOGDIR/<trial>/ a run per trial, named as "
                   "its trial dir (00002)")
    _add_follow(p)
    p = add_command(sub, "mlflow", "Write an experiment into an MLflow tracking store (again: "
                    "only what changed): one MLflow experiment, a run per trial with its "
                    "params, metrics by step, what it cost (gpu_hours, node_hours, wall_s, "
                    "parallel_efficiency) and its rung, state as tags and run status. Needs "
                    "pip install 'hpsearch[mlflow]'. hpsearch's own store is only read.",
                    "  hpsearch mlflow quadratic --tracking-uri sqlite:///mlflow.db\n"
                    "  hpsearch mlflow quadratic --tracking-uri sqlite:///mlflow.db --follow\n"
                    "  hpsearch mlflow quadratic --tracking-uri mlruns "
                    "--experiment-name quadratic-v2   # a file store folder\n"
                    "  mlflow ui --backend-store-uri sqlite:///mlflow.db   # then open "
                    "http://127.0.0.1:5000", mlflow)
    p.add_argument("name")
    p.add_argument("--tracking-uri", required=True, help="sqlite:///mlflow.db (or another "
                   "database URL MLflow takes), a file: URI or folder (MLflow's file store), "
                   "or an MLflow server's http(s):// address")
    p.add_argument("--experiment-name", help="the MLflow experiment's name (default: the "
                   "experiment's)")
    _add_follow(p)


def _add_follow(p) -> None:
    p.add_argument("--follow", action="store_true", help="sync every --interval seconds "
                   "until the experiment's driver ends, then exit 0")
    p.add_argument("--interval", type=float, default=5.0,
                   help="seconds between syncs with --follow (default 5)")
    add_runs_dir(p)


def _needs(package: str, command: str) -> bool:
    """Whether `package` imports; if not, says what to install (the caller exits 2)."""
    try:
        importlib.import_module(package)
    except ImportError:
        print(f"hpsearch: error: `hpsearch {command}` needs {package}, which is not "
              f"installed here: pip install 'hpsearch[{command}]' (or pip install "
              f"{package})", file=sys.stderr)
        return False
    return True


def tensorboard(args) -> int:
    if not _needs("tensorboard", "tensorboard"):
        return EXIT_BAD_INPUT
    from hpsearch.interop import tensorboard_mirror
    from hpsearch.report.mirror_values import mirror_values
    exp_dir = runs.existing_experiment_dir(runs_dir_of(args), args.name)
    logdir = args.logdir.absolute()
    return _sync(args, exp_dir, lambda view: tensorboard_mirror.sync(
        view, logdir, mirror_values(exp_dir, view)), f"in {logdir}")


def mlflow(args) -> int:
    if not _needs("mlflow", "mlflow"):
        return EXIT_BAD_INPUT
    from hpsearch.interop import mlflow_mirror
    from hpsearch.report.mirror_values import mirror_values
    exp_dir = runs.existing_experiment_dir(runs_dir_of(args), args.name)
    client = mlflow_mirror.open_client(args.tracking_uri)
    name = args.experiment_name or args.name
    return _sync(args, exp_dir, lambda view: mlflow_mirror.sync(
        view, client, name, mirror_values(exp_dir, view)),
        f"in MLflow experiment '{name}' of {args.tracking_uri}")


def _sync(args, exp_dir: Path, sync: Callable[[Any], Any], where: str) -> int:
    """Sync once, or with --follow until the driver ends (the loop `hpsearch optuna`
    uses), printing a line for each sync that changed something."""
    from hpsearch.interop import follow
    from hpsearch.interop.store_view import read_view

    said: list[Any] = []

    def say(result) -> None:
        if not said or result.added or result.updated:
            print(f"{args.name}: {result.trials} runs {where} ({result.added} added, "
                  f"{result.updated} updated, {result.points} points)", flush=True)
        said.append(result)

    if not args.follow:
        say(sync(read_view(exp_dir)))
        return 0
    lock = DriverLock(exp_dir)
    follow.follow(exp_dir, sync, args.interval, lambda: lock.holder() is not None, say)
    print(f"{args.name}: its driver is not running; the mirror is final", flush=True)
    return 0

"""`hpsearch submit`, `resume` and `cancel`: start, continue and stop a search."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from hpsearch.cli.common import add_command, add_runs_dir, format_params, runs_dir_of
from hpsearch.store.lockfile import DriverLock


def register(sub) -> None:
    p = add_command(sub, "submit", "Run the search a spec describes, attached (Ctrl-C cancels "
                    "running trials, a second Ctrl-C exits without waiting) or --detach-ed "
                    "in the background.",
                    "  hpsearch submit examples/quadratic/spec.yaml --executor local\n"
                    "  hpsearch submit spec.yaml --detach      # survives logout; see "
                    "`hpsearch status NAME`\n"
                    "  hpsearch submit spec.yaml --resume      # continue if it already exists\n"
                    "  hpsearch submit spec.yaml --driver-job  # the driver runs as a Slurm job\n"
                    "  hpsearch submit spec.yaml --driver-job --wait   # ... and wait for its end\n"
                    "  # in a pipeline rule: continue an interrupted run, block until the end,\n"
                    "  # write the best params only if every trial completed\n"
                    "  hpsearch submit spec.yaml --resume --wait --best-out results/best.json\n"
                    "  # ... tolerating diverged or out-of-memory trials\n"
                    "  hpsearch submit spec.yaml --wait --best-out best.json --allow-failures",
                    submit)
    p.add_argument("spec", type=Path)
    _add_run_flags(p)
    p.add_argument("--resume", action="store_true",
                   help="if the experiment exists with the same spec, continue it")
    p.add_argument("--best-out", type=Path, default=None, metavar="FILE",
                   help="when the search succeeds (exit 0), write its best trial (params, "
                        "values, trial dir) to FILE as JSON, atomically; otherwise write "
                        "nothing and remove an old FILE. Attached or with --wait")
    p = add_command(sub, "resume", "Continue an experiment after a crash, kill -9, reboot or "
                    "cancel: finished trials are kept, running ones adopted, the rest re-run.",
                    "  hpsearch resume quadratic\n"
                    "  hpsearch resume quadratic --detach --runs-dir /scratch/me/runs\n"
                    "  hpsearch resume quadratic --trials 50   # grow (or finish) it: 50 in all\n"
                    "  # stopped by search.max_failures for a typo in its command, fixed in\n"
                    "  # fixed.yaml (before any trial completed):\n"
                    "  hpsearch resume quadratic --spec fixed.yaml",
                    resume)
    p.add_argument("name")
    p.add_argument("--spec", type=Path, default=None, metavar="FILE",
                   help="continue with this fixed spec: its resources, executor, retries, "
                        "placement, search.parallel/timeout/max_failures may change at any "
                        "time; its command, workdir, env, container, launcher, checkpoints "
                        "while no trial has a result; anything else is another experiment "
                        "(docs/cli.md#resume)")
    p.add_argument("--trials", type=int, default=None, metavar="N",
                   help="run N trials in all (more than the spec's, or fewer, not below "
                        "those already asked); a running driver takes it within seconds")
    _add_run_flags(p)
    p = add_command(sub, "cancel", "Stop an experiment: its driver cancels running trials "
                    "(SIGTERM to each process group, SIGKILL after the grace period; "
                    "scancel of Slurm jobs). The only way to make a --driver-job cancel "
                    "its trials: a plain scancel of the driver job leaves them running.",
                    "  hpsearch cancel quadratic\n"
                    "  hpsearch resume quadratic    # later: run what was cancelled", cancel)
    p.add_argument("name")
    add_runs_dir(p)


def _add_run_flags(p) -> None:
    from hpsearch.preflight.vocabulary import vocabulary
    p.add_argument("--executor", choices=vocabulary().executor_types(), default=None,
                   help="override the spec's executor")
    p.add_argument("--detach", action="store_true",
                   help="run the driver in the background (log: <runs>/<name>/driver.log)")
    p.add_argument("--driver-job", action="store_true",
                   help="run the driver as its own small Slurm job (survives a login-node "
                        "reboot; log: <runs>/<name>/driver.log)")
    p.add_argument("--driver-time", default=None, metavar="TIME",
                   help="time limit of the --driver-job, in Slurm's format (default: the "
                   "partition's); near it the driver requeues itself and its trials keep "
                   "running")
    p.add_argument("--wait", action="store_true",
                   help="with --detach or --driver-job: block until the search ends and "
                        "exit with its status (Ctrl-C or SIGTERM cancels it); attached "
                        "runs always wait")
    p.add_argument("--allow-failures", action="store_true",
                   help="exit 0 (and write --best-out) when the search ran to its end and "
                        "at least one trial completed, although others failed (diverged, "
                        "out of memory); search.max_failures still stops a search whose "
                        "trials keep failing")
    p.add_argument("--quiet", "-q", action="store_true", help="print only the summary")
    p.add_argument("--no-tui", action="store_true",
                   help="attached to a terminal, print progress lines instead of the live "
                        "view (docs/tui.md)")
    add_runs_dir(p)


def submit(args) -> int:
    from hpsearch.driver import session

    if args.best_out and (args.detach or args.driver_job) and not args.wait:
        from hpsearch.errors import HpsearchError  # exit 2, like any bad flag
        raise HpsearchError("--best-out needs the end of the search: run attached, or add "
                            "--wait")
    spec, exists = session.new_experiment(args.spec, args.runs_dir and args.runs_dir.absolute(),
                                          args.executor, args.resume)
    from hpsearch.cli.spec_cmds import warn_about
    warn_about(args.spec, spec, programs=False)
    from hpsearch.search.registry import strategy
    if strategy(spec.search.strategy).facts.enumerates:
        from hpsearch.search.grid import grid_summary
        print(f"grid: {grid_summary(spec.search)}; {spec.search.trials} trials")
    if args.best_out:
        args.best_out.unlink(missing_ok=True)  # no stale result while (or if) this one fails
    code = _tolerated(spec, _run(spec, create=not exists, args=args), args.allow_failures)
    if args.best_out:
        _best_out(spec, code, args.best_out)
    return code


def _best_out(spec, code: int, path: Path) -> None:
    from hpsearch.driver import waiting
    if code == 0:
        waiting.write_best(spec, path)
        print(f"best trial written to {path}")
    else:
        print(f"hpsearch: not writing {path}: {waiting.failure_report(spec)}", file=sys.stderr)


def resume(args) -> int:
    from hpsearch.driver import session

    spec = session.stored_spec(runs_dir_of(args), args.name, args.executor)
    if args.spec is not None:
        spec = session.fixed_spec(spec, args.spec, runs_dir_of(args), args.executor)
    if args.trials is not None and _extend(spec, args.trials):
        return 0  # the running driver takes it
    return _tolerated(spec, _run(spec, create=False, args=args), args.allow_failures)


def _extend(spec, total: int) -> bool:
    """resume --trials: leave the new total for the driver; True if one runs (it takes the
    request within seconds, and this command starts none)."""
    from hpsearch.driver import requests
    from hpsearch.errors import HpsearchError
    from hpsearch.store.reader import Reader
    from hpsearch.store.runs import STORE_FILE
    with Reader(spec.experiment_dir / STORE_FILE) as reader:
        asked = len(reader.trials())
    from hpsearch.driver.extent import MAX_TRIALS
    if not max(1, asked) <= total <= MAX_TRIALS:
        raise HpsearchError(f"--trials {total}: expected the number of trials in all, at "
                            f"least the {asked} already asked, at most {MAX_TRIALS}")
    requests.write(spec.experiment_dir, "trials", {"total": total})
    driver = DriverLock(spec.experiment_dir).holder()
    if driver:
        print(f"experiment {spec.name}: asked its running driver (pid {driver}) to run "
              f"{total} trials in all; see `hpsearch events {spec.name}`")
    return bool(driver)


def _tolerated(spec, code: int, allow_failures: bool) -> int:
    """With --allow-failures, a search that ran to its end with at least one completed trial
    exits 0 although some trials failed (diverged, out of memory); otherwise `code`."""
    from hpsearch.errors import EXIT_INCOMPLETE
    from hpsearch.store.reader import Reader
    from hpsearch.store.runs import STORE_FILE
    if not allow_failures or code != EXIT_INCOMPLETE:
        return code
    with Reader(spec.experiment_dir / STORE_FILE) as reader:
        exp, counts = reader.experiment(), reader.state_counts()
    if exp.status != "completed" or not counts.get("completed"):
        return code
    print(f"{counts.get('failed', 0)} trial(s) failed; exit 0 as --allow-failures asks",
          file=sys.stderr)
    return 0


def cancel(args) -> int:
    from hpsearch.driver.cancel import cancel_experiment

    print(cancel_experiment(runs_dir_of(args), args.name))
    return 0


def _run(spec, create: bool, args) -> int:
    from hpsearch.driver import session

    exp_dir = spec.experiment_dir
    if args.driver_job:
        from hpsearch.executors.registry import facts
        if not facts(spec.executor).on_slurm:
            from hpsearch.errors import BadInput
            raise BadInput("--driver-job needs the Slurm executor (executor: slurm, or "
                           "--executor slurm)")
        from hpsearch.spec.durations import parse_time_limit
        if args.driver_time is not None and parse_time_limit(args.driver_time) is None:
            from hpsearch.errors import BadInput
            raise BadInput(f"--driver-time {args.driver_time!r}: expected a Slurm time limit "
                           "such as 90 (minutes), 1:30:00 or 2-00:00:00")
        job_id = session.submit_driver_job(spec, create, args.driver_time)
        print(f"experiment {spec.name}: driver submitted as Slurm job {job_id}")
        return _started_elsewhere(spec, job_id, args.wait)
    if args.detach:
        with session.share_mode(spec):  # the folders and log made before the driver starts
            pid = session.detach(lambda ready: session.drive(spec, create, _printer(False),
                                                             ready), exp_dir / "driver.log")
        print(f"experiment {spec.name}: driver running in the background (pid {pid})")
        return _started_elsewhere(spec, None, args.wait)
    started = time.time()
    if _live_view_wanted(args):  # Ctrl-C still cancels the running trials (the driver's)
        from hpsearch.tui.loop import drive_with_view
        code = drive_with_view(spec, create)
    else:
        code = session.drive(spec, create, _printer(args.quiet))
    _summary(spec, time.time() - started)
    return code


def _started_elsewhere(spec, job_id: str | None, wait: bool) -> int:
    """After --detach or --driver-job: say where to look; with --wait, wait for the end."""
    print(f"  log: {spec.experiment_dir / 'driver.log'}")
    print(f"  watch: hpsearch status {spec.name}    stop: hpsearch cancel {spec.name}",
          flush=True)
    if not wait:
        return 0
    from hpsearch.driver import waiting
    started = time.time()
    code = waiting.wait_for_driver(spec, job_id)
    _summary(spec, time.time() - started)
    return code


def _live_view_wanted(args) -> bool:
    """The live view (hpsearch watch) by default when attached to a terminal."""
    return not (args.quiet or args.no_tui) and sys.stdout.isatty() and sys.stdin.isatty()


def _printer(quiet: bool):
    def emit(line: str) -> None:
        if not quiet:
            print(time.strftime("%H:%M:%S ") + line, flush=True)
    return emit


def _summary(spec, elapsed: float) -> None:
    from hpsearch.store.reader import Reader
    from hpsearch.store.results import best
    from hpsearch.store.runs import STORE_FILE
    with Reader(spec.experiment_dir / STORE_FILE) as reader:
        exp, trials, counts = reader.experiment(), reader.trials(), reader.state_counts()
        gave_up = [e["message"] for e in reader.events(limit=20)
                   if e["kind"] in ("max_failures", "gave_up")]
    print(f"\nexperiment {spec.name}: {exp.status} in {elapsed:.1f}s; " +
          ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    if exp.status == "failed" and gave_up:
        print(gave_up[-1], file=sys.stderr)
    top = best(trials, exp.directions, 1)
    metrics = [o.metric for o in spec.objectives]
    label = "Pareto front" if len(metrics) > 1 else "best trial"
    for t in top:
        values = ", ".join(f"{m}={v:.6g}" for m, v in zip(metrics, t.values))
        print(f"{label}: #{t.id} {values}  ({format_params(t.params)})")
        print(f"  trial dir: {t.trial_dir}")
    if not top:
        print("no trial completed", file=sys.stderr)

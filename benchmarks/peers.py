"""hpsearch against its peers on one learning-curve search, on this machine (issue 24 item 1).

The workload (benchmarks/_curves.py): 81 configurations (a fixed, seeded list of learning
curves, the same for every tool, asked in the same order 0..80), each a curve of 27 steps of
0.2 s, ASHA with reduction factor 3 and min resource 1 step, 2 trials at a time. Rows:

- hpsearch, ASHA (stop): `search.pruner: {type: asha}` (Optuna's successive halving judges
  each report; a rejected trial is stopped), grid strategy over the 81 indices, local executor
  with 2 slots, the real driver and store (benchmarks/_bench_run.py), default read settings.
- hpsearch, ASHA (stop, warm): the same with `executor.warm` (the modules the trial
  imports): each trial forked from a warm server through the quick client
  (hpsearch/warm/quick.py), not started as a new interpreter.
- hpsearch, ASHA (promotion): `mode: promotion, max_resource: 27`: every segment a new
  process that resumes from its checkpoint (benchmarks/_peers_trial.py).
- hpsearch, ASHA (promotion, warm): the same with `executor.warm`: segments forked from a
  warm server.
- Optuna, in-process: `study.optimize(n_jobs=2)` with `SuccessiveHalvingPruner(min_resource=1,
  reduction_factor=3)`, the 81 configurations enqueued; threads in one process.
- Ray Tune, ASHAScheduler: a function trainable, `reuse_actors=True`, `max_concurrent_trials=2`,
  `grid_search` over the 81 indices, `ray.init(num_cpus=2)` (not timed).
- Syne Tune, ASHA (promotion): `HyperbandScheduler(type="promotion")`, LocalBackend with 2
  workers (benchmarks/_peers_syne_trial.py resumes from `st_checkpoint_dir`), the 81
  indices as `points_to_evaluate` of a random searcher over those 81 only, `sleep_time` 0.1 s
  (its default is 5 s). Syne Tune's tuner ends when its searcher has no new configuration
  and nothing runs: it has no end game that promotes paused trials after that.

Columns, read the same way for every tool from the run's step log, which every step of
every row appends a line to (benchmarks/_curves.py; `--step-log PATH` keeps it): makespan
(the search's wall time: from just before the tool's search call to its return), steps run,
trial processes started (distinct pids that ran steps; 0 for in-process Optuna, whose steps
run in the benchmark's own process), best value (the best loss reported at the last step),
time to target (seconds from the start until any trial reported a loss within 0.02 of the
true best final loss over all configurations), lost (configurations that neither ran their
last step nor were told to stop: 0 when nothing went wrong) and again (steps run more than
once / the configurations they belong to). Ray Tune and Syne Tune stop a trial without a
word to it (Syne Tune's LocalBackend SIGKILLs it), so their lost column is `-`.

Goals (issue 24 item 1, local part): hpsearch's time to target is no worse than any peer's
(its best mode against each peer's), and hpsearch's makespan is within 10% of in-process
Optuna's (its best mode). Issue 42 item 3, the same two for the ASHA (stop) row alone
(lines `stop mode: ...`). One `ok:`/`MISS:` line per goal.

Each row runs in its own process. Ray Tune and Syne Tune are taken from the running
interpreter if it has them, else from benchmarks/.venv-peers (benchmarks/peers-setup.sh
makes it; the `peers` extra of pyproject.toml lists them); a tool that cannot be imported
is a row "not run: <error>".

    python benchmarks/peers.py            # 81 configs x 27 steps of 0.2 s (several minutes)
    python benchmarks/peers.py --quick    # 27 configs x 9 steps of 0.1 s (about 1-2 minutes)
    python benchmarks/peers.py --tiny --tools hpsearch optuna   # 9 x 3 steps of 0.02 s
    python benchmarks/peers.py --quick --step-log steps.log     # and keep the step log
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import _curves  # noqa: E402

PEERS_PYTHON = HERE / ".venv-peers" / "bin" / "python"
TOLERANCE = 0.02
ETA = 3
PARALLEL = 2
MAKESPAN_SLACK = 0.10

ROWS = [
    ("hpsearch", "asha-stop", "ASHA (stop)"),
    ("hpsearch", "asha-stop-warm", "ASHA (stop, warm)"),
    ("hpsearch", "asha-promotion", "ASHA (promotion)"),
    ("hpsearch", "asha-promotion-warm", "ASHA (promotion, warm)"),
    ("optuna", "in-process", "in-process n_jobs=2, SuccessiveHalving"),
    ("ray", "asha", "ASHAScheduler, reuse_actors"),
    ("syne-tune", "asha-promotion", "ASHA (promotion), LocalBackend"),
]
MODULE = {"hpsearch": "hpsearch", "optuna": "optuna", "ray": "ray", "syne-tune": "syne_tune"}
# tools that stop a trial without telling it, so the step log cannot tell their stops from
# deaths: Syne Tune's LocalBackend SIGKILLs a paused or stopped trial; Ray Tune's stop of a
# function trainable was not checked to reach it
STOPS_UNSEEN = ("ray", "syne-tune")


def row_key(tool: str, mode: str) -> str:
    """The row's name in the step log."""
    return f"{tool}:{mode}"


# -- one row, in its own process (--one TOOL MODE) -------------------------------------------
def run_hpsearch(mode: str, w: _curves.Workload, log: _curves.StepLog,
                 work: Path) -> tuple[float, float, str]:
    import _bench_run
    import optuna

    import hpsearch.driver.session  # noqa: F401  (imported before the clock starts)

    pruner: dict = {"type": "asha", "min_resource": 1, "reduction_factor": ETA}
    if not mode.startswith("asha-stop"):
        pruner.update(mode="promotion", max_resource=w.steps)
    executor: dict = {"type": "local", "timeout": "30m"}
    if mode.endswith("-warm"):  # what the trial imports (_curves is not on the server's path)
        executor["warm"] = ["hpsearch.trial", "json", "random", "typing", "dataclasses", "math"]
    trial = HERE / "_peers_trial.py"
    spec = {
        "name": f"peers-{mode}",
        "command": f"{{python}} {trial} {' '.join(w.args())} {log.path} {log.row} {{config}}",
        "search": {"strategy": "grid", "parallel": PARALLEL, "pruner": pruner,
                   "space": {"config": {"choices": list(range(w.configs))}}},
        "objective": {"metric": "loss", "direction": "minimize"},
        "executor": executor,
    }
    runtime = tempfile.mkdtemp(prefix="hw", dir="/tmp")  # the warm server's socket, ours only
    os.environ["XDG_RUNTIME_DIR"] = runtime
    try:
        began = time.time()
        _, seconds = _bench_run.drive(spec, work)
    finally:
        _end_warm_servers(runtime)
    from importlib.metadata import version
    return began, seconds, f"hpsearch {version('hpsearch')}, optuna {optuna.__version__}"


def _end_warm_servers(runtime: str) -> None:
    """SIGTERM the warm server this row started (its command line names our socket dir)."""
    import signal

    mine = f"--socket {runtime}/".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if mine in cmdline:
            try:
                os.kill(int(entry.name), signal.SIGTERM)
            except OSError:
                pass


def run_optuna(mode: str, w: _curves.Workload, log: _curves.StepLog,
               work: Path) -> tuple[float, float, str]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        direction="minimize",
        pruner=optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=ETA))
    for index in range(w.configs):
        study.enqueue_trial({"config": index})

    from _optuna_submitit import run_trial

    def objective(trial: optuna.Trial) -> float:
        return run_trial(trial, w, trial.suggest_int("config", 0, w.configs - 1), log)

    began, clock = time.time(), time.perf_counter()
    study.optimize(objective, n_trials=w.configs, n_jobs=PARALLEL)
    return began, time.perf_counter() - clock, f"optuna {optuna.__version__}"


def run_ray(mode: str, w: _curves.Workload, log: _curves.StepLog,
            work: Path) -> tuple[float, float, str]:
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(HERE)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    import ray
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler

    ray.init(num_cpus=PARALLEL, include_dashboard=False, log_to_driver=False,
             configure_logging=False)

    def trainable(config: dict) -> None:
        import _curves as curves

        curves.run_steps(w, config["config"], 0, w.steps, log,
                         lambda step, v: tune.report({"loss": v}))

    run_config_cls = getattr(tune, "RunConfig", None)
    if run_config_cls is None:
        from ray.train import RunConfig as run_config_cls
    tuner = tune.Tuner(
        trainable,
        param_space={"config": tune.grid_search(list(range(w.configs)))},
        tune_config=tune.TuneConfig(
            metric="loss", mode="min", max_concurrent_trials=PARALLEL, reuse_actors=True,
            scheduler=ASHAScheduler(time_attr="training_iteration", max_t=w.steps,
                                    grace_period=1, reduction_factor=ETA)),
        run_config=run_config_cls(storage_path=str(work / "ray"), verbose=0))
    began, clock = time.time(), time.perf_counter()
    tuner.fit()
    seconds = time.perf_counter() - clock
    ray.shutdown()
    return began, seconds, f"ray {ray.__version__}"


def run_syne(mode: str, w: _curves.Workload, log: _curves.StepLog,
             work: Path) -> tuple[float, float, str]:
    import logging

    os.environ["SYNETUNE_FOLDER"] = str(work / "syne-tune")
    import syne_tune
    from syne_tune import StoppingCriterion, Tuner
    from syne_tune.backend import LocalBackend
    from syne_tune.config_space import choice
    from syne_tune.optimizer.schedulers import HyperbandScheduler

    logging.getLogger("syne_tune").setLevel(logging.WARNING)
    config_space = {"config": choice(list(range(w.configs))),
                    "configs": w.configs, "steps": w.steps, "step_seconds": w.step_seconds,
                    "log": log.path, "row": log.row}
    scheduler = HyperbandScheduler(
        config_space, type="promotion", searcher="random", max_t=w.steps, grace_period=1,
        reduction_factor=ETA, resource_attr="epoch", metric="loss", mode="min",
        points_to_evaluate=[{"config": i} for i in range(w.configs)])
    tuner = Tuner(
        trial_backend=LocalBackend(entry_point=str(HERE / "_peers_syne_trial.py")),
        scheduler=scheduler, n_workers=PARALLEL, sleep_time=0.1,
        stop_criterion=StoppingCriterion(max_wallclock_time=3600), save_tuner=False,
        tuner_name="peers-syne-tune",
        print_update_interval=3600, results_update_interval=3600)
    began, clock = time.time(), time.perf_counter()
    tuner.run()
    return began, time.perf_counter() - clock, f"syne-tune {syne_tune.__version__}"


RUNNERS = {"hpsearch": run_hpsearch, "optuna": run_optuna, "ray": run_ray,
           "syne-tune": run_syne}


def one(tool: str, mode: str, w: _curves.Workload, log: str) -> None:
    """Run one row, its steps logged to `log`, and print its JSON line last: makespan, the
    start time, versions."""
    work = Path(tempfile.mkdtemp(prefix=f"hpsearch-peers-{tool}-"))
    os.chdir(work)  # what a tool writes where it runs (Syne Tune: std.out) stays out of ours
    # the clock of the log starts where the tool's own search call started
    began, seconds, versions = RUNNERS[tool](mode, w, _curves.StepLog(log, row_key(tool, mode)),
                                             work)
    print(json.dumps({"makespan": seconds, "began": began, "versions": versions,
                      "pid": os.getpid()}))
    subprocess.run(["rm", "-rf", str(work)], check=False)


# -- the benchmark ---------------------------------------------------------------------------
def interpreter_for(tool: str) -> tuple[str | None, str]:
    """(python, "") to run a tool's row with, or (None, why not)."""
    if importlib.util.find_spec(MODULE[tool]) is not None:
        return sys.executable, ""
    if tool in ("ray", "syne-tune") and PEERS_PYTHON.exists():
        return str(PEERS_PYTHON), ""
    return None, f"No module named '{MODULE[tool]}' (benchmarks/peers-setup.sh installs it)"


def run_child(argv: list[str], timeout: float) -> dict:
    """Run one row's process (in the checkout); the JSON of its last stdout line, or
    {"error": why not}."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    last = done.stdout.strip().splitlines()[-1:] if done.stdout.strip() else []
    if done.returncode != 0 or not last or not last[0].startswith("{"):
        errors = [ln for ln in done.stderr.strip().splitlines() if ln.strip()]
        return {"error": f"exit {done.returncode}: "
                         f"{errors[-1] if errors else '(no error output)'}"}
    return json.loads(last[0])


def measure(tool: str, mode: str, w: _curves.Workload, timeout: float, log: str) -> dict:
    """Run one row, its steps appended to the run's step log `log`; its columns."""
    python, why = interpreter_for(tool)
    if python is None:
        return {"error": why}
    row = run_child([python, str(Path(__file__).resolve()), "--one", tool, mode, *w.args(),
                     log], timeout)
    if "error" in row:
        return row
    target = w.best_final() + TOLERANCE
    # steps run by the in-process Optuna study are the benchmark child's own: 0 started
    stats = _curves.read_log(_curves.StepLog(log, row_key(tool, mode)), w, row["began"],
                             target, exclude=row["pid"] if tool == "optuna" else None)
    row.update(steps=stats.steps_run, processes=stats.processes, best=stats.best,
               to_target=stats.to_target, repeated=stats.repeated,
               repeated_configs=stats.repeated_configs,
               lost=None if tool in STOPS_UNSEEN else stats.lost)
    return row


def _fmt(v: float, digits: int = 1) -> str:
    return "never" if math.isinf(v) else f"{v:.{digits}f}"


def table(results: list[tuple[str, str, str, dict]]) -> list[str]:
    head = (f"{'tool':<10} {'mode':<40} {'makespan s':>10} {'steps run':>9} "
            f"{'processes':>9} {'best value':>10} {'to target s':>11} {'lost':>4} {'again':>7}"
            "  versions")
    lines = [head, "-" * len(head)]
    for tool, _mode, text, r in results:
        if "error" in r:
            lines.append(f"{tool:<10} {text:<40} not run: {r['error']}")
            continue
        lost = "-" if r["lost"] is None else r["lost"]
        again = f"{r['repeated']}/{r['repeated_configs']}"
        lines.append(f"{tool:<10} {text:<40} {r['makespan']:>10.1f} {r['steps']:>9} "
                     f"{r['processes']:>9} {r['best']:>10.4f} {_fmt(r['to_target']):>11} "
                     f"{lost:>4} {again:>7}  {r['versions']}")
    return lines


def goal_lines(results: list[tuple[str, str, str, dict]]) -> list[str]:
    ran = [(tool, text, r) for tool, _m, text, r in results if "error" not in r]
    ours = [(text, r) for tool, text, r in ran if tool == "hpsearch"]
    peers = [(tool, text, r) for tool, text, r in ran if tool != "hpsearch"]
    lines = []
    if not ours:
        return ["MISS: hpsearch's time to target is no worse than any peer's (hpsearch not "
                "run)", "MISS: hpsearch's makespan is within 10% of in-process Optuna's "
                "(hpsearch not run)"]
    best_text, best = min(ours, key=lambda o: o[1]["to_target"])
    for tool, text, r in peers:
        ok = best["to_target"] <= r["to_target"]
        lines.append(f"{'ok' if ok else 'MISS'}: hpsearch's time to target is no worse than "
                     f"{tool} {text}'s (hpsearch {best_text} {_fmt(best['to_target'])} s, "
                     f"{tool} {_fmt(r['to_target'])} s)")
    for tool, _m, text, r in results:
        if tool != "hpsearch" and "error" in r:
            lines.append(f"MISS: hpsearch's time to target is no worse than {tool} {text}'s "
                         f"({tool} not run: {r['error']})")
    optuna = [r for tool, _t, r in ran if tool == "optuna"]
    fast_text, fast = min(ours, key=lambda o: o[1]["makespan"])
    if optuna:
        ratio = fast["makespan"] / optuna[0]["makespan"]
        ok = ratio <= 1 + MAKESPAN_SLACK
        lines.append(f"{'ok' if ok else 'MISS'}: hpsearch's makespan is within 10% of "
                     f"in-process Optuna's (hpsearch {fast_text} {fast['makespan']:.1f} s, "
                     f"Optuna {optuna[0]['makespan']:.1f} s: {ratio:.2f}x; goal <= "
                     f"{1 + MAKESPAN_SLACK:.2f}x)")
    else:
        lines.append("MISS: hpsearch's makespan is within 10% of in-process Optuna's "
                     "(Optuna not run)")
    return lines + _stop_mode_lines(ours, optuna[0] if optuna else None)


def _stop_mode_lines(ours: list[tuple[str, dict]], optuna: dict | None) -> list[str]:
    """Issue 42 item 3: hpsearch in stop mode (a process per trial, stopped when rejected)
    against in-process Optuna, which stops a trial the moment should_prune() says so."""
    stops = [(text, r) for text, r in ours if text.startswith("ASHA (stop")]
    if not stops or optuna is None:
        return []
    text, stop = min(stops, key=lambda s: s[1]["to_target"])  # the first to the target
    ratio = stop["makespan"] / optuna["makespan"]
    return [f"{'ok' if stop['to_target'] <= optuna['to_target'] else 'MISS'}: stop mode: "
            f"hpsearch {text}'s time to target is no worse than in-process Optuna's "
            f"({_fmt(stop['to_target'])} s, Optuna {_fmt(optuna['to_target'])} s)",
            f"{'ok' if ratio <= 1 + MAKESPAN_SLACK else 'MISS'}: stop mode: hpsearch {text}"
            f"'s makespan is within 10% of in-process Optuna's ({stop['makespan']:.1f}"
            f" s, Optuna {optuna['makespan']:.1f} s: {ratio:.2f}x; goal <= "
            f"{1 + MAKESPAN_SLACK:.2f}x)"]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true",
                      help="27 configurations x 9 steps of 0.1 s")
    size.add_argument("--tiny", action="store_true",
                      help="9 configurations x 3 steps of 0.02 s (the test's)")
    parser.add_argument("--configs", type=int, default=None, help="configurations (81)")
    parser.add_argument("--steps", type=int, default=None, help="steps of a full trial (27)")
    parser.add_argument("--step-seconds", type=float, default=None, help="a step's sleep (0.2)")
    parser.add_argument("--tools", nargs="+", choices=list(RUNNERS), default=list(RUNNERS))
    parser.add_argument("--step-log", help="keep the run's step log here (a new file; "
                                           "default: a temporary one, removed at the end)")
    parser.add_argument("--one", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    configs, steps, seconds = ((27, 9, 0.1) if args.quick else (9, 3, 0.02) if args.tiny
                               else (81, 27, 0.2))
    args.workload = _curves.Workload(args.configs or configs, args.steps or steps,
                                     args.step_seconds or seconds)
    if not 1 <= args.workload.configs <= _curves.CONFIGS or args.workload.steps < 2:
        parser.error(f"--configs must be 1..{_curves.CONFIGS}, --steps >= 2")
    return args


@contextlib.contextmanager
def step_log(keep: str | None) -> Iterator[str]:
    """The run's step log: a new file at `keep` (kept), or a temporary one (removed)."""
    if keep:
        os.close(os.open(keep, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        print(f"step log: {os.path.abspath(keep)}", flush=True)
        yield os.path.abspath(keep)
        return
    fd, log = tempfile.mkstemp(prefix="peers-steps-", suffix=".log")
    os.close(fd)
    try:
        yield log
    finally:
        os.unlink(log)


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["--one"]:
        tool, mode, *rest = argv[1:]
        one(tool, mode, _curves.Workload.from_args(rest[:3]), rest[3])
        return 0
    args = parse_args(argv)
    w = args.workload
    best = w.best_final()
    print(f"python {platform.python_version()}, {os.cpu_count()} CPUs ({platform.machine()}), "
          f"{time.strftime('%Y-%m-%d')}; {w.configs} configurations x {w.steps} steps of "
          f"{w.step_seconds:g} s, ASHA eta {ETA}, {PARALLEL} at a time; true best final loss "
          f"{best:.4f}, target <= {best + TOLERANCE:.4f}", flush=True)
    # a generous cap: every configuration run in full, one at a time, plus starts
    timeout = w.configs * w.steps * w.step_seconds + 300
    results = []
    with step_log(args.step_log) as log:
        for tool, mode, text in ROWS:
            if tool not in args.tools:
                continue
            r = measure(tool, mode, w, timeout, log)
            results.append((tool, mode, text, r))
            print(f"  {tool} {text}: " + (f"not run: {r['error']}" if "error" in r else
                                          f"{r['makespan']:.1f} s"), flush=True)
    print()
    for line in table(results):
        print(line)
    print()
    for line in goal_lines(results):
        print(line)
    return 0  # a benchmark: the verdict is for people, not for CI


if __name__ == "__main__":
    sys.exit(main())

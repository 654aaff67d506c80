"""hpsearch against its peers on the emulated Slurm cluster (issue 24 item 1, cluster part).

The workload of benchmarks/peers.py (benchmarks/_curves.py: seeded learning curves, the same
configurations asked in the same order, ASHA with reduction factor 3 from 1 step), P trials at
a time on the cluster (default 8), each trial on 1 CPU. Rows:

- hpsearch, ASHA (promotion), pilots: `executor.pilots` (P slots: pilots of 2 nodes x 4),
  every segment a new process in a pilot, resuming from its checkpoint.
- hpsearch, ASHA (stop), pilots: the same pilots; a rejected trial is stopped.
- hpsearch, ASHA (stop), pilots, warm starts: the same, with `executor.warm` (the modules the
  trial imports): each trial is forked from the pilot's warm server on its node, through the
  quick client (hpsearch/warm/quick.py), not started as a new interpreter.
- hpsearch, ASHA (stop), a job per trial; and as job arrays.
- Optuna + submitit: the recipe of benchmarks/_optuna_submitit.py, written as a user would
  (P worker jobs through submitit, one JournalStorage file, SuccessiveHalvingPruner, the
  configurations enqueued in order).
- hydra: benchmarks/_hydra/app.py with hydra-optuna-sweeper (its grid sampler: every
  configuration once, in the sampler's random order) and hydra-submitit-launcher (P trials a
  batch, each a task of one Slurm array; the next batch when the whole batch is done). The
  sweeper has no pruning: every trial runs all its steps. hydra-optuna-sweeper 1.3.0 needs
  optuna < 3, so it runs from its own venv, benchmarks/.venv-hydra
  (benchmarks/peers-setup.sh makes it).

With `--kill node` or `--kill orchestrator`, that is killed once a third of the
configurations have started (benchmarks/_peers_kill.py says how, and what each tool's user
then does).

Columns, read as benchmarks/peers.py reads them, from the run's step log alone (every step of
every row appends a line; `--step-log PATH` keeps it): makespan (from just before the search
call to its return), steps run, trial processes (distinct pids that ran steps), Slurm jobs
started (hpsearch's store, submitit's folders), best value at the last step, time to target
(within 0.02 of the true best final loss), lost (configurations that neither ran their last
step nor were told to stop by the tool) and again (steps run more than once / the
configurations they belong to). Goal lines, against each peer: hpsearch's best row (the
first to the target) reaches the target first, and finishes no later. `--keep` keeps each
row's folder (hpsearch's experiment: its trials' files, its pilots' folders) and prints it.

    scripts/slurm-cluster.sh start && export SLURM_CONF=/tmp/hpsearch-slurm/etc/slurm.conf
    python benchmarks/peers_cluster.py --quick          # 27 configs x 9 steps of 0.1 s
    python benchmarks/peers_cluster.py                  # 81 x 27 steps of 0.2 s
    python benchmarks/peers_cluster.py --tiny --rows pilots-stop optuna-submitit
    python benchmarks/peers_cluster.py --rows pilots-warm optuna-submitit --keep
    python benchmarks/peers_cluster.py --quick --kill node      # or --kill orchestrator
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _curves  # noqa: E402
import _peers_kill  # noqa: E402
from peers import run_child, step_log  # noqa: E402

TOLERANCE = 0.02
ETA = 3

ROWS = {
    "pilots-promotion": ("hpsearch", "ASHA (promotion), pilots"),
    "pilots-stop": ("hpsearch", "ASHA (stop), pilots"),
    "pilots-warm": ("hpsearch", "ASHA (stop), pilots, warm starts"),
    "jobs-stop": ("hpsearch", "ASHA (stop), a job per trial"),
    "arrays-stop": ("hpsearch", "ASHA (stop), job arrays"),
    "optuna-submitit": ("optuna+submitit", "P worker jobs, JournalStorage, SuccessiveHalving"),
    "hydra": ("hydra", "optuna sweeper (grid, no pruning), submitit launcher"),
}
HYDRA_PYTHON = HERE / ".venv-hydra" / "bin" / "python"


def run_hpsearch(row: str, w: _curves.Workload, log: _curves.StepLog, work: Path,
                 parallel: int) -> tuple[float, float, int, str]:
    import _bench_run

    import hpsearch.driver.session  # noqa: F401  (imported before the clock starts)

    pruner: dict = {"type": "asha", "min_resource": 1, "reduction_factor": ETA}
    if row == "pilots-promotion":
        pruner.update(mode="promotion", max_resource=w.steps)
    executor: dict = {"type": "slurm", "poll_interval": 0.5, "array": row == "arrays-stop"}
    if row.startswith("pilots"):
        executor["pilots"] = {"nodes": 2, "slots_per_node": 4, "time": "00:30:00",
                              "max": math.ceil(parallel / 8), "idle_timeout": 20,
                              "heartbeat": 1}
    if row == "pilots-warm":  # what the trial imports (_curves is not on the servers' path)
        executor["warm"] = ["hpsearch.trial", "json", "random", "typing", "dataclasses", "math"]
    spec = {
        "name": f"peers-{row}",
        "command": f"{{python}} {HERE / '_peers_trial.py'} {' '.join(w.args())} {log.path} "
                   f"{log.row} {{config}}",
        "search": {"strategy": "grid", "parallel": parallel, "pruner": pruner,
                   "space": {"config": {"choices": list(range(w.configs))}}},
        "objective": {"metric": "loss", "direction": "minimize"},
        "resources": {"cpus_per_task": 1, "time": "00:10:00"},
        "executor": executor,
    }
    began = _began()
    _, seconds = _bench_run.drive(spec, work)
    from importlib.metadata import version
    return began, seconds, _peers_kill.jobs(row, work), f"hpsearch {version('hpsearch')}"


def _began() -> float:
    """Now, printed as the child's first JSON line: a row killed mid-run prints no other."""
    began = time.time()
    print(json.dumps({"began": began}), flush=True)
    return began


def run_optuna_submitit(row: str, w: _curves.Workload, log: _curves.StepLog, work: Path,
                        parallel: int) -> tuple[float, float, int, str]:
    import _optuna_submitit
    import optuna  # noqa: F401  (imported before the clock starts)
    import submitit  # noqa: F401

    began, clock = _began(), time.perf_counter()
    jobs = _optuna_submitit.run(work, w.args(), log, parallel)
    return began, time.perf_counter() - clock, jobs, versions(row)


def run_hydra(row: str, w: _curves.Workload, log: _curves.StepLog, work: Path,
              parallel: int) -> tuple[float, float, int, str]:
    env = {**os.environ, "PYTHONPATH": str(HERE)}  # its Slurm jobs import _curves
    command = [str(HYDRA_PYTHON), str(HERE / "_hydra" / "app.py"), "--multirun",
               f"configs={w.configs}", f"steps={w.steps}", f"step_seconds={w.step_seconds!r}",
               f"log={log.path}", f"row={log.row}", f"hydra.sweeper.n_trials={w.configs}",
               f"hydra.sweeper.n_jobs={parallel}", f"hydra.sweep.dir={work / 'multirun'}"]
    began, clock = _began(), time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - clock
    if done.returncode != 0:
        raise RuntimeError(f"hydra exited {done.returncode}: {done.stderr.strip()[-300:]}")
    return began, seconds, _peers_kill.jobs("hydra", work), versions(row)  # a task a trial


def one(row: str, w: _curves.Workload, log: str, parallel: int, work: Path) -> None:
    """Run one row in this process, in `work`, its steps logged to `log`, and print its JSON
    line last."""
    os.chdir(work)  # what a tool writes where it runs stays out of the checkout
    runner = {"optuna-submitit": run_optuna_submitit, "hydra": run_hydra}.get(row, run_hpsearch)
    began, seconds, jobs, versions = runner(row, w, _curves.StepLog(log, row), work, parallel)
    print(json.dumps({"makespan": seconds, "began": began, "jobs": jobs,
                      "versions": versions}))


def versions(row: str) -> str:
    if row == "hydra":
        return subprocess.run(
            [str(HYDRA_PYTHON), "-c", "from importlib.metadata import version as v; print("
             "', '.join(f'{p} {v(p)}' for p in ('hydra-core', 'hydra-optuna-sweeper', "
             "'hydra-submitit-launcher', 'optuna', 'submitit')))"],
            capture_output=True, text=True).stdout.strip()
    from importlib.metadata import version
    if row == "optuna-submitit":
        return f"optuna {version('optuna')}, submitit {version('submitit')}"
    return f"hpsearch {version('hpsearch')}"


def measure(row: str, w: _curves.Workload, parallel: int, timeout: float, log: str,
            kill: str | None = None, keep: bool = False) -> dict:
    """One row's columns, its steps appended to the run's step log `log`; with `kill`
    ("node" or "orchestrator"), that is killed mid-run (benchmarks/_peers_kill.py)."""
    if row == "hydra" and not HYDRA_PYTHON.exists():
        return {"error": f"no {HYDRA_PYTHON} (benchmarks/peers-setup.sh makes it)"}
    work = Path(tempfile.mkdtemp(prefix=f"hpsearch-peers-{row}-", dir="/tmp"))  # 0700
    child = [sys.executable, str(Path(__file__).resolve()), "--one", row, str(parallel),
             *w.args(), log, str(work)]
    try:
        if kill:
            result = _peers_kill.run(row, child, w, _curves.StepLog(log, row), work, kill,
                                     timeout)
            if "error" not in result:
                result.update(jobs=_peers_kill.jobs(row, work), versions=versions(row))
        else:
            result = run_child(child, timeout)
        if "error" in result:
            return result
        stats = _curves.read_log(_curves.StepLog(log, row), w, result["began"],
                                 w.best_final() + TOLERANCE)
        result.update(steps=stats.steps_run, processes=stats.processes, best=stats.best,
                      to_target=stats.to_target, lost=stats.lost, repeated=stats.repeated,
                      repeated_configs=stats.repeated_configs)
        return result
    finally:
        if keep:
            print(f"  {row}: kept {work}", flush=True)
        else:
            subprocess.run(["rm", "-rf", str(work)], check=False)


def _fmt(v: float) -> str:
    return "never" if math.isinf(v) else f"{v:.1f}"


def table(results: list[tuple[str, dict]]) -> list[str]:
    """The rows, `lost` (configurations that did not end) and `again` (steps run again /
    configurations they belong to) before the versions."""
    head = (f"{'tool':<16} {'mode':<46} {'makespan s':>10} {'steps':>6} {'procs':>6} "
            f"{'jobs':>5} {'best':>7} {'to target s':>11} {'lost':>4} {'again':>7}  versions")
    lines = [head, "-" * len(head)]
    for row, r in results:
        tool, text = ROWS[row]
        if "error" in r:
            lines.append(f"{tool:<16} {text:<46} not run: {r['error']}")
            continue
        again = f"{r['repeated']}/{r['repeated_configs']}"
        lines.append(f"{tool:<16} {text:<46} {r['makespan']:>10.1f} {r['steps']:>6} "
                     f"{r['processes']:>6} {r['jobs']:>5} {r['best']:>7.4f} "
                     f"{_fmt(r['to_target']):>11} {r['lost']:>4} {again:>7}  {r['versions']}")
    return lines


def goal_lines(results: list[tuple[str, dict]]) -> list[str]:
    ours = [(row, r) for row, r in results if ROWS[row][0] == "hpsearch" and "error" not in r]
    if not ours:
        return ["MISS: on the cluster, hpsearch reaches the target first (hpsearch not run)"]
    best_row, best = min(ours, key=lambda o: o[1]["to_target"])
    lines = []
    for row, r in results:
        tool, text = ROWS[row]
        if tool == "hpsearch":
            continue
        if "error" in r:
            lines.append(f"MISS: on the cluster, hpsearch reaches the target before {tool} "
                         f"({tool} not run: {r['error']})")
            continue
        ok = best["to_target"] < r["to_target"]
        lines.append(f"{'ok' if ok else 'MISS'}: on the cluster, hpsearch reaches the target "
                     f"before {tool} (hpsearch {ROWS[best_row][1]} {_fmt(best['to_target'])} "
                     f"s, {tool} {_fmt(r['to_target'])} s)")
        ok = best["makespan"] <= r["makespan"]
        lines.append(f"{'ok' if ok else 'MISS'}: on the cluster, hpsearch finishes no later "
                     f"than {tool} (hpsearch {ROWS[best_row][1]} {best['makespan']:.1f} s, "
                     f"{tool} {r['makespan']:.1f} s)")
    return lines


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--one"]:
        row, parallel, *rest = argv[1:]
        one(row, _curves.Workload.from_args(rest[:3]), rest[3], int(parallel), Path(rest[4]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="27 configurations x 9 steps of 0.1 s")
    size.add_argument("--tiny", action="store_true", help="9 configurations x 3 steps of 0.1 s")
    parser.add_argument("--parallel", type=int, default=8, help="trials at a time (8)")
    parser.add_argument("--rows", nargs="+", choices=list(ROWS), default=list(ROWS))
    parser.add_argument("--kill", choices=_peers_kill.KINDS,
                        help="kill a node (set DOWN) or the orchestrator (SIGKILL) once a "
                             "third of the configurations started")
    parser.add_argument("--step-log", help="keep the run's step log here (a new file; "
                                           "default: a temporary one, removed at the end)")
    parser.add_argument("--keep", action="store_true",
                        help="keep each row's folder (its experiment, pilots, trials)")
    args = parser.parse_args(argv)
    if not os.environ.get("SLURM_CONF") and not Path("/etc/slurm/slurm.conf").exists():
        parser.error("no Slurm here: start the emulated cluster and export SLURM_CONF "
                     "(scripts/slurm-cluster.sh start)")
    configs, steps, seconds = ((27, 9, 0.1) if args.quick else (9, 3, 0.1) if args.tiny
                               else (81, 27, 0.2))
    w = _curves.Workload(configs, steps, seconds)
    print(f"python {platform.python_version()}, {os.cpu_count()} CPUs here, emulated Slurm "
          f"cluster, {time.strftime('%Y-%m-%d')}; {w.configs} configurations x {w.steps} steps "
          f"of {w.step_seconds:g} s, ASHA eta {ETA}, {args.parallel} at a time; true best "
          f"final loss {w.best_final():.4f}, target <= {w.best_final() + TOLERANCE:.4f}",
          flush=True)
    timeout = w.configs * w.steps * w.step_seconds + 600
    results = []
    with step_log(args.step_log) as log:
        for row in args.rows:
            r = measure(row, w, args.parallel, timeout, log, args.kill, args.keep)
            results.append((row, r))
            print(f"  {' '.join(ROWS[row])}: " + (
                f"not run: {r['error']}" if "error" in r else f"{r['makespan']:.1f} s"
                + (f", killed: {r['hit']}" if r.get("hit") else "")
                + (f"; its own store: {r['own_record']}" if r.get("own_record") else "")),
                flush=True)
    print()
    print("\n".join(table(results)))
    print()
    if args.kill:
        print(f"\nthe {args.kill} killed once {w.configs // 3} configurations had started; "
              "then each tool's own way on (_peers_kill.py)")
    else:
        print("\n".join(goal_lines(results)))
    return 0  # a benchmark: the verdict is for people, not for CI


if __name__ == "__main__":
    sys.exit(main())

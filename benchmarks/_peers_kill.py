"""The kill runs of benchmarks/peers_cluster.py (issue 24 item 1): a node or the
orchestrator killed mid-run, and what each tool then loses or runs again.

Mid-run is the moment a third of the configurations have run a step (the steps log says so).

- node: the node that runs most of the trials then running crashes: it is set DOWN with
  `scontrol update state=down`, as slurmctld sets a node whose slurmd stopped answering
  (after SlurmdTimeout, 300 s by default; tests/slurm's node-death tests kill slurmd itself
  and wait that out), and at once every process of its jobs is SIGKILLed (Slurm's own kill
  comes a second or two later, and submitit's workers ignore its SIGTERM). Slurm ends every
  job on it NODE_FAIL and requeues the batch jobs that allow it (JobRequeue=1 here, as by
  default). The node is resumed when the row ends.
- orchestrator: the process that runs the search (hpsearch's driver, the recipe's submitting
  script, hydra's `--multirun`) is SIGKILLed with its process group. Then the user does what
  each tool offers: `hpsearch resume NAME`; for the Optuna + submitit recipe nothing (its
  worker jobs go on: wait for them); hydra has no resume, so the same command again.

A node's crash races the tool's verdicts: a trial that reported a step, and died with the node
before hpsearch's STOP file for that step came, was judged on what it reported, and nothing
was lost; it could write no `told` line. After a node kill, `judged_after_death` writes its
`judged` line (benchmarks/_curves.py), from the STOP file's time, where that came after the
process's last line; the table's note says how many.

What it cost is read from the run's step log alone, the same way for every tool
(benchmarks/_curves.py read_log): `lost`, the configurations that neither ran their last step
nor were told to stop by the tool (a process killed with the node, and nothing ran the
configuration on); `again`, the steps run more than once and the configurations they belong
to. Beside it, for comparison, what the tool's own store holds (`own_record`: hpsearch's
store, the recipe's Optuna journal), which is not a witness: a trial the store calls RUNNING
for ever, or completed, may say otherwise than the log.
"""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import _curves

KINDS = ("node", "orchestrator")


def started_configs(log: _curves.StepLog) -> int:
    """How many configurations the row has run a step of."""
    return len({line.config for line in _curves.lines(log.path, log.row)})


def _busiest_node(log: _curves.StepLog) -> str | None:
    """The Slurm node where most of the row's processes in the step log still run (of two as
    busy, that of the latest step)."""
    pids = [line.pid for line in _curves.lines(log.path, log.row)]
    nodes: Counter = Counter()
    for pid in dict.fromkeys(reversed(pids)):  # the latest first, each once
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for entry in environ:
            if entry.startswith(b"SLURMD_NODENAME="):
                nodes[entry.split(b"=", 1)[1].decode()] += 1
    return nodes.most_common(1)[0][0] if nodes else None


def _kill_node(node: str) -> int:
    """A node's crash: every process of its jobs (those whose environment names it in
    SLURMD_NODENAME, and this cluster's SLURM_CONF where one is set: batch scripts, job
    steps, trials, pilot agents) stopped (SIGSTOP, twice
    over, for children forked meanwhile), so that none sees another die and reports it, as
    none can on a node that crashed; then Slurm told the node is DOWN (slurmctld's verdict
    after SlurmdTimeout), then all of them SIGKILLed. Returns how many were killed."""
    marks, frozen = {f"SLURMD_NODENAME={node}".encode()}, set[int]()
    if os.environ.get("SLURM_CONF"):  # this cluster's jobs only: another emulated cluster on
        marks.add(f"SLURM_CONF={os.environ['SLURM_CONF']}".encode())  # the host has a node1
    for _ in range(2):
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) in frozen | {os.getpid()}:
                continue
            try:
                if marks <= set((entry / "environ").read_bytes().split(b"\0")):
                    os.kill(int(entry.name), signal.SIGSTOP)
                    frozen.add(int(entry.name))
            except OSError:
                continue
    # DOWN after the freeze: else Slurm's own SIGTERM may reach them first
    _scontrol(f"nodename={node}", "state=down", "reason=peers-benchmark")
    for pid in frozen:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return len(frozen)


def _scontrol(*args: str) -> None:
    subprocess.run(["scontrol", "update", *args], check=True, capture_output=True, text=True)


def _wait_up(node: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        # One line per partition of the node (debug and left or right), the same state.
        state = subprocess.run(["sinfo", "-h", "-n", node, "-o", "%T"], capture_output=True,
                               text=True).stdout.strip()
        if set(state.split()) <= {"idle", "mixed", "allocated"} and state:
            return
        if "down" in state or "drain" in state:
            _scontrol(f"nodename={node}", "state=resume")
        time.sleep(1)
    raise RuntimeError(f"{node} did not come back: {state}")


def _wait_jobs_gone(job_ids: set[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while job_ids and time.monotonic() < deadline:
        out = subprocess.run(["squeue", "-h", "-o", "%i", "-j", ",".join(sorted(job_ids))],
                             capture_output=True, text=True).stdout.split()
        if not out:
            return
        time.sleep(1)


def submitit_jobs(folder: Path) -> set[str]:
    """The Slurm jobs (array tasks) a submitit folder holds logs or pickles of."""
    found = set()
    for path in folder.rglob("*") if folder.exists() else []:
        match = re.match(r"^(\d+(?:_\d+)?)_", path.name) or (
            re.match(r"^(\d+_\d+|\d+)$", path.name) if path.is_dir() else None)
        if match:
            found.add(match.group(1))
    return found


def _submitit_folder(row: str, work: Path) -> Path:
    """Where submitit keeps the row's jobs: the recipe's workers, or hydra's trials."""
    return work / ("jobs" if row == "optuna-submitit" else "multirun")


def jobs(row: str, work: Path) -> int:
    """The Slurm jobs the row started: hpsearch's pilots, or its trials' jobs (the store
    says); the array tasks submitit's folders hold (the recipe's workers, hydra's trials)."""
    if row in ("optuna-submitit", "hydra"):
        ids = submitit_jobs(_submitit_folder(row, work))
        tasks = {i for i in ids if "_" in i}
        return len(tasks or ids)
    from hpsearch.store.reader import Reader
    from hpsearch.store.runs import STORE_FILE

    reader = Reader(work / f"peers-{row}" / STORE_FILE)
    try:
        pilots = reader.pilots()
        return len(pilots) if pilots else len({a["job_id"] for a in reader.all_attempts()
                                               if a.get("job_id")})
    finally:
        reader.close()


def own_record(row: str, w: _curves.Workload, work: Path) -> str:
    """What the tool's own store says: how many configurations it holds no result for and
    the states they were left in (hpsearch, Optuna; hydra keeps none: ""). Not a column: the
    step log is the witness."""
    if row == "hydra":
        return ""
    if row == "optuna-submitit":
        import _optuna_submitit
        import optuna

        study = optuna.load_study(study_name="peers",
                                  storage=_optuna_submitit.storage(str(work / "study.log")))
        ok = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
        trials = study.get_trials(deepcopy=False)
        done = {t.params.get("config") for t in trials if t.state in ok} - {None}
        left = Counter(t.state.name for t in trials if t.state not in ok
                       and t.params.get("config") not in done)
        return _without_result(w.configs - len(done), left)
    from hpsearch.store.reader import Reader
    from hpsearch.store.runs import STORE_FILE

    reader = Reader(work / f"peers-{row}" / STORE_FILE)
    try:
        trials = reader.trials()
    finally:
        reader.close()
    done = {t.params["config"] for t in trials if t.state in ("completed", "pruned", "paused")}
    left = Counter(t.state for t in trials if t.params["config"] not in done)
    return _without_result(w.configs - len(done), left)


def judged_after_death(row: str, w: _curves.Workload, log: _curves.StepLog,
                       work: Path) -> int:
    """After a node kill, a `judged` line for each hpsearch configuration that has not ended
    in the log and whose trial has a STOP file (a regular file, not followed) written after
    its last line: the verdict on what its process last reported, which came when the
    process was already dead. Returns how many."""
    if row in ("optuna-submitit", "hydra"):
        return 0  # their verdicts are given inside the trial's process
    last: dict[int, _curves.Line] = {}
    ended, finished = set(), set()
    for line in _curves.lines(log.path, row):
        last[line.config] = line
        if line.kind != "step" and line.detail in _curves.VERDICTS:
            ended.add((line.pid, line.config))
        elif line.kind == "step" and line.step == w.steps - 1:
            finished.add(line.config)
    judged = []
    for trial in sorted((work / f"peers-{row}" / "trials").glob("[0-9]*")):
        try:
            config = json.loads((trial / "params.json").read_text())["config"]
            stop = (trial / "STOP").lstat()
        except (OSError, ValueError, KeyError):
            continue
        end = last.get(config)
        if (end is None or not stat.S_ISREG(stop.st_mode) or stop.st_mtime <= end.time
                or (end.pid, config) in ended or config in finished):
            continue
        judged.append(f"{stop.st_mtime:.6f} {row} {end.pid} {config} judged {end.step} "
                      f"pruned\n")
    if judged:
        with open(log.path, "a") as f:
            f.write("".join(judged))
    return len(judged)


def _without_result(count: int, states: Counter) -> str:
    listed = ", ".join(f"{n} {s}" for s, n in sorted(states.items()))
    return f"{count} without a result" + (f" ({listed})" if listed else "")


def run(row: str, child: list[str], w: _curves.Workload, log: _curves.StepLog, work: Path,
        kind: str, timeout: float) -> dict:
    """Run the row's child with `kind` killed mid-run, then what the user does next; the
    columns peers_cluster.measure adds to (began, makespan, what was hit, and what the tool's
    own store says); lost and repeated steps are read from the step log, as for every row."""
    out = work / "child.out"
    began = time.time()
    deadline = time.monotonic() + timeout
    with open(out, "w") as stdout, open(work / "child.err", "w") as stderr:
        proc = subprocess.Popen(child, stdout=stdout, stderr=stderr, start_new_session=True)
    hit = down = None
    try:
        while proc.poll() is None and time.monotonic() < deadline and hit is None:
            if started_configs(log) >= max(1, w.configs // 3):
                if kind == "orchestrator":
                    os.killpg(proc.pid, signal.SIGKILL)
                    hit = f"pid {proc.pid}"
                else:
                    node = _busiest_node(log)
                    if node:
                        hit = f"{node} ({_kill_node(node)} processes)"
                        down = node
            time.sleep(0.05)
        proc.wait(timeout=max(1, deadline - time.monotonic()))
        if hit is None:
            return {"error": "the search ended before the kill moment"}
        if kind == "orchestrator":
            _resume(row, child, work, deadline)
        ended = time.time()
        if kind == "node" and proc.returncode != 0:  # its tool gave up
            err = (work / "child.err").read_text().strip().splitlines()
            print(f"  {row}: exit {proc.returncode} after node {hit} went down: "
                  f"{err[-1] if err else '(no error output)'}", file=sys.stderr)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        if row in ("optuna-submitit", "hydra"):  # jobs Slurm requeued after the node's end
            subprocess.run(["scancel", *sorted(submitit_jobs(_submitit_folder(row, work)))],
                           capture_output=True)
        if down:
            _wait_up(down)
    if down and hit and (judged := judged_after_death(row, w, log, work)):
        hit += f"; {judged} judged after their process died with it"
    lines = [ln for ln in out.read_text().splitlines() if ln.startswith("{")]
    first = json.loads(lines[0]) if lines else {}
    return {"began": first.get("began", began), "makespan": ended - began, "hit": hit,
            "own_record": own_record(row, w, work)}


def _resume(row: str, child: list[str], work: Path, deadline: float) -> None:
    left = max(1.0, deadline - time.monotonic())
    if row == "optuna-submitit":  # the worker jobs go on without it: wait for them
        _wait_jobs_gone(submitit_jobs(_submitit_folder(row, work)), left)
    elif row == "hydra":  # no resume: the same command again
        subprocess.run(child, capture_output=True, timeout=left)
    else:
        subprocess.run([sys.executable, "-m", "hpsearch", "resume", f"peers-{row}",
                        "--runs-dir", str(work), "--quiet", "--no-tui", "--allow-failures"],
                       capture_output=True, timeout=left, cwd=work)

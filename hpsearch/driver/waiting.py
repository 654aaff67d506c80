"""`submit --wait` and `--best-out`: wait for a driver that runs elsewhere (a background
process or a Slurm job), and turn a finished search into an exit status and a result file.

Pipelines (Snakemake) need both: a rule must block until its search ends, fail when the
search did, and leave its output file behind only when it succeeded.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from hpsearch.errors import EXIT_INCOMPLETE, EXIT_OK
from hpsearch.spec.model import Spec
from hpsearch.store import rows
from hpsearch.store.lockfile import DriverLock
from hpsearch.store.reader import Reader
from hpsearch.store.results import best, checkpoint_paths, record
from hpsearch.store.runs import STORE_FILE

JOB_POLL = 10.0  # seconds between squeue calls about a driver job: 6 a minute, however long


def wait_for_driver(spec: Spec, job_id: str | None, poll: float = 1.0) -> int:
    """Block until the experiment's driver has ended; return the search's exit status.

    job_id: the driver's Slurm job (`--driver-job`), watched in squeue every JOB_POLL
    seconds (a requeued job stays there), and its end seen up to that much late; None: a
    background driver on this host, watched through its lock every `poll` seconds. SIGINT or
    SIGTERM here stops the search (as `hpsearch cancel` does) and returns 1, so a pipeline
    that interrupts this rule can resume the experiment later.
    """
    stop: list[str] = []
    previous = {sig: signal.signal(sig, lambda s, f: stop.append(signal.Signals(s).name))
                for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        every = JOB_POLL if job_id else poll
        while _driver_alive(spec.experiment_dir, job_id) and not stop:
            slept = 0.0
            while slept < every and not stop:  # a signal is answered within `poll`
                time.sleep(min(poll, every - slept))
                slept += poll
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if stop:
        from hpsearch.driver.cancel import cancel_experiment
        print(f"{stop[0]}: stopping experiment {spec.name}", flush=True)
        print(cancel_experiment(spec.runs_dir, spec.name), flush=True)
        return EXIT_INCOMPLETE
    return exit_status(spec.experiment_dir)


def _driver_alive(exp_dir: Path, job_id: str | None) -> bool:
    if job_id is None:
        return DriverLock(exp_dir).holder() is not None
    from hpsearch.slurm.commands import Slurm
    from hpsearch.slurm.failures import TRANSIENT, SlurmError
    try:
        return bool(Slurm().squeue([job_id]))
    except SlurmError as exc:
        if exc.kind == TRANSIENT:
            return True  # Slurm cannot tell now: the driver job may well run; ask again
        raise


def exit_status(exp_dir: Path) -> int:
    """0 when the stored search completed with no failed trial, else 1 (as the driver's)."""
    with Reader(exp_dir / STORE_FILE) as reader:
        exp, counts = reader.experiment(), reader.state_counts()
    return EXIT_OK if exp.status == "completed" and not counts.get(rows.FAILED) else EXIT_INCOMPLETE


def write_best(spec: Spec, path: Path) -> None:
    """Write the best trial (or the Pareto front) of a completed search to `path` as JSON,
    through a temporary file and a rename: readers never see a partial file."""
    with Reader(spec.experiment_dir / STORE_FILE) as reader:
        exp, trials, saved = reader.experiment(), reader.trials(), reader.checkpoints()
    metrics = [o.metric for o in spec.objectives]
    top = best(trials, exp.directions, 1)
    checkpoint = checkpoint_paths(top, saved, exp.directions[0])
    data: dict = {"experiment": spec.name,
                  "objective": [{"metric": m, "direction": d}
                                for m, d in zip(metrics, exp.directions)]}
    if len(metrics) > 1:
        data["pareto_front"] = [{**record(t, metrics), "checkpoint": checkpoint[t.id]}
                                for t in top]
    else:
        data.update(record(top[0], metrics), checkpoint=checkpoint[top[0].id])
    write_atomic(path, json.dumps(data, indent=1) + "\n")


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def failure_report(spec: Spec, lines: int = 6) -> str:
    """Why the search did not succeed: its status and each failed trial's error (which holds
    the tail of the trial's stderr)."""
    with Reader(spec.experiment_dir / STORE_FILE) as reader:
        exp, counts = reader.experiment(), reader.state_counts()
        failed = reader.trials([rows.FAILED])
    text = (f"experiment {spec.name} is {exp.status} (" +
            ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + ")")
    for t in failed:
        error = "\n    ".join((t.error or "no error recorded").splitlines()[:lines])
        text += f"\n  trial {t.id} failed: {error}"
    return text

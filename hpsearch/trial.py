"""What a trial process uses: its params, metric reports, checkpoints and stop requests.

This module imports only the standard library (import it in a training script freely) and
never opens the store: reports go to files in the trial dir, which the driver ingests.

    from hpsearch import trial
    p = trial.params()
    for step in range(start, p["epochs"]):
        ...
        trial.report(step, loss=loss, acc=acc)
        if trial.should_stop():
            break
    trial.result(loss=final_loss)           # optional; else the last report counts

Files in $HPSEARCH_TRIAL_DIR:
    params.json      the params (also in $HPSEARCH_PARAMS)
    metrics.jsonl    one JSON object per report: {"step": 3, "time": ..., "loss": 0.25}
    result.json      final metrics, written atomically (temp file + rename)
    checkpoints/     $HPSEARCH_CHECKPOINT_DIR
    STOP             created by the driver to ask the trial to stop early
    stdout.log, stderr.log, exit_code

A trial in another language reports by appending the same JSON lines to metrics.jsonl, or
by printing lines to stdout of the form
    @hpsearch step=3 loss=0.25 acc=0.91
    @hpsearch {"step": 3, "loss": 0.25}
    @hpsearch result loss=0.2
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

_stop_signalled = False
_handlers_installed = False


def _env(name: str) -> str:
    value = os.environ.get(name)
    if value is None:
        raise RuntimeError(f"{name} is not set: this code expects to run as an hpsearch trial")
    return value


def trial_dir() -> Path:
    return Path(_env("HPSEARCH_TRIAL_DIR"))


def trial_id() -> int:
    return int(_env("HPSEARCH_TRIAL_ID"))


def attempt() -> int:
    return int(os.environ.get("HPSEARCH_ATTEMPT", "1"))


def params() -> dict[str, Any]:
    """This trial's parameters (search and fixed)."""
    return json.loads(_env("HPSEARCH_PARAMS"))


def _clean(metrics: dict[str, Any]) -> dict[str, float]:
    out = {}
    for name, value in metrics.items():
        if name in ("step", "time"):
            raise ValueError(f"'{name}' is reserved in metric reports")
        if hasattr(value, "item"):  # numpy / torch scalars
            value = value.item()
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"metric {name}={value!r}: expected a number")
        out[name] = float(value)
    return out


def report(step: int, **metrics: float) -> None:
    """Record metrics at a step (epoch, iteration). One O_APPEND write per call, so
    concurrent ranks or threads never interleave partial lines."""
    if not isinstance(step, int) or isinstance(step, bool):
        raise TypeError(f"step must be an int; got {step!r}")
    record = {"step": step, "time": time.time(), **_clean(metrics)}
    line = (json.dumps(record, allow_nan=True) + "\n").encode()
    fd = os.open(trial_dir() / "metrics.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def result(**metrics: float) -> None:
    """Record the final metrics (objective values) atomically in result.json."""
    final = _clean(metrics)
    path = trial_dir() / "result.json"
    tmp = path.with_name(f".result.json.{os.getpid()}.tmp")
    with open(tmp, "w") as fh:
        json.dump(final, fh, allow_nan=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def checkpoint_dir() -> Path:
    """Where to save checkpoints; it survives retries and requeues of this trial."""
    path = Path(os.environ.get("HPSEARCH_CHECKPOINT_DIR") or trial_dir() / "checkpoints")
    path.mkdir(parents=True, exist_ok=True)
    return path


def latest_checkpoint() -> Path | None:
    """The newest entry in checkpoint_dir() (by modification time), or None.

    Save checkpoints under a temporary name and rename them into place, so a checkpoint
    that is half-written when the job dies is never returned here.
    """
    entries = [p for p in checkpoint_dir().iterdir() if not p.name.startswith(".")
               and not p.name.endswith(".tmp")]
    return max(entries, key=lambda p: (p.stat().st_mtime, p.name), default=None)


def _on_signal(signum: int, frame: Any) -> None:
    global _stop_signalled
    _stop_signalled = True


def _install_handlers() -> None:
    global _handlers_installed
    if _handlers_installed:
        return
    _handlers_installed = True
    for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2):
        try:
            if signal.getsignal(sig) in (signal.SIG_DFL, None):
                signal.signal(sig, _on_signal)
        except ValueError:  # not the main thread
            pass


def should_stop() -> bool:
    """True once the driver asked this trial to stop (a STOP file in the trial dir) or the
    process got SIGTERM/SIGUSR1/SIGUSR2 (cancel, time limit, preemption): save a checkpoint
    and exit. The first call installs the signal handlers; call it once early."""
    _install_handlers()
    return _stop_signalled or (trial_dir() / "STOP").exists()

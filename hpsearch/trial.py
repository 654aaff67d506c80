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

Run by hand, outside hpsearch (no HPSEARCH_* variables), the same script works: params()
gives its defaults (`trial.params({"lr": 0.01})`), and its files go to a private temporary
trial dir, named once on stderr (trial_dir(); docs/trial.md#running-a-script-by-hand).

Files in $HPSEARCH_TRIAL_DIR:
    params.json      the params (also in $HPSEARCH_PARAMS)
    metrics.jsonl    one JSON object per report: {"step": 3, "attempt": 1, "loss": 0.25, ...}
    result.json      final metrics, written atomically (temp file + rename)
    checkpoints/     $HPSEARCH_CHECKPOINT_DIR
    checkpoints.jsonl  one JSON object per saved checkpoint: {"step": 3, "path": "step-00000003.pt"}
    timing.<rank>.jsonl  each rank's step and compute times (report_timing, docs/scaling.md)
    first_call.<attempt>  when the attempt's code first called this module (its start-up
                     ends there: docs/trial.md#start-up), written once, by its first process
    STOP             asks the trial to stop early: written when search.pruner rejects it
                     (obeyed only if it is a regular file of this user's, not a link)
    JUDGED           "ATTEMPT STEP [QUIET]": the driver read this attempt's reports through
                     STEP and its pruner let it go on, and cannot stop it on a report of a
                     step below QUIET (should_stop() waits for it: _await_verdict)
    stdout.log, stderr.log, exit_code

A trial in another language reports by appending the same JSON lines to metrics.jsonl, or
by printing lines to stdout of the form
    @hpsearch step=3 loss=0.25 acc=0.91
    @hpsearch {"step": 3, "loss": 0.25}
    @hpsearch result loss=0.2
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import stat
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# Exit status of an attempt that saved its state and wants to be run again (EX_TEMPFAIL):
# the driver starts a new attempt, which resumes from the latest checkpoint.
EXIT_RESUME = 75
CHECKPOINT_MANIFEST = "checkpoints.jsonl"
TIMING_FILE = "timing.{rank}.jsonl"  # one per rank; read by hpsearch.ingest.timing_lines
FIRST_CALL_FILE = "first_call.{attempt}"  # read by hpsearch.ingest.first_call

_stop_signal: str | None = None  # the name of the signal that asked us to stop
_handlers_installed = False
_STEP_IN_NAME = re.compile(r"(\d+)(?!.*\d)")


_made_dir = threading.Lock()  # one temporary trial dir per process, however many threads ask
_marked: tuple[int, str, str] | None = None  # (pid, trial dir, attempt) first_call was told


def _first_call() -> None:
    """Note, once per attempt, when its code first called this module: the end of its
    start-up (launch, imports, a wait for a warm server), which the cost objectives leave
    out (docs/spec.md#cost-as-an-objective). The attempt's first process to call writes
    first_call.<attempt> in the trial dir: private, whole (written beside it, then linked
    into place, so a reader never sees a part), never replaced and no link followed (a
    hard link to a name that is taken fails). Outside hpsearch nothing is written; a
    failure to write never fails the trial."""
    global _marked
    folder, number = os.environ.get("HPSEARCH_TRIAL_DIR"), os.environ.get("HPSEARCH_ATTEMPT")
    if not folder or not number:
        return
    key = (os.getpid(), folder, number)  # a forked child (a warm start) notes its own
    if key == _marked:
        return
    _marked = key
    now = time.time()
    try:
        path = os.path.join(folder, FIRST_CALL_FILE.format(attempt=int(number)))
        if os.path.lexists(path):  # another process of the attempt was first
            return
        tmp = os.path.join(folder, f".first_call.{number}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, json.dumps({"time": now, "pid": os.getpid()}).encode())
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
        finally:
            os.unlink(tmp)
    except (OSError, ValueError):
        pass


def trial_dir() -> Path:
    """This trial's folder. Outside hpsearch (the script run by hand: HPSEARCH_TRIAL_DIR is
    not set) a new private temporary folder (tempfile.mkdtemp: 0700, made new, no link
    followed) stands in for it: made at the first call, exported as HPSEARCH_TRIAL_DIR so
    this process's children use it too, and named once on stderr."""
    with _made_dir:
        path = os.environ.get("HPSEARCH_TRIAL_DIR")
        if not path:
            import tempfile
            path = os.environ["HPSEARCH_TRIAL_DIR"] = tempfile.mkdtemp(prefix="hpsearch-trial-")
            print(f"hpsearch.trial: running outside hpsearch (HPSEARCH_TRIAL_DIR is not set): "
                  f"params are the script's defaults; metrics, checkpoints and result go to "
                  f"{path}, a private temporary folder (set HPSEARCH_TRIAL_DIR to choose one)",
                  file=sys.stderr, flush=True)
    return Path(path)


def trial_id() -> int:
    """The trial's number; 0 outside hpsearch (HPSEARCH_TRIAL_ID not set)."""
    _first_call()
    return int(os.environ.get("HPSEARCH_TRIAL_ID") or 0)


def attempt() -> int:
    _first_call()
    return int(os.environ.get("HPSEARCH_ATTEMPT", "1"))


def params(defaults: dict[str, Any] | None = None) -> dict[str, Any]:
    """This trial's parameters (search and fixed), over `defaults` for any it lacks.
    Outside hpsearch (HPSEARCH_PARAMS not set: the script run by hand) `defaults`, or {};
    the temporary trial dir is made then, so its note on stderr says so (trial_dir)."""
    _first_call()
    given = os.environ.get("HPSEARCH_PARAMS")
    if given is None and not os.environ.get("HPSEARCH_TRIAL_DIR"):
        trial_dir()
    return {**(defaults or {}), **(json.loads(given) if given else {})}


def budget() -> int | None:
    """How many steps this trial may run in all, in promotion mode (`search.pruner.mode:
    promotion`, docs/early-stopping.md): run steps `start .. budget()-1` (start: from
    latest_checkpoint()), save a checkpoint, report, and exit 0; if the trial is promoted, a
    new attempt resumes from that checkpoint with a larger budget. None: no budget, run to
    the end. From $HPSEARCH_BUDGET."""
    _first_call()
    value = os.environ.get("HPSEARCH_BUDGET")
    return int(value) if value else None


def _clean(metrics: dict[str, Any]) -> dict[str, float]:
    out = {}
    for name, value in metrics.items():
        if name in ("step", "time", "attempt"):
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
    if "HPSEARCH_ATTEMPT" in os.environ:  # the driver counts a report for its attempt only
        record["attempt"] = attempt()
    line = (json.dumps(record, allow_nan=True) + "\n").encode()
    fd = os.open(trial_dir() / "metrics.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
    global _awaiting, _last_report
    now = time.monotonic()
    _awaiting = (step, now, None if _last_report is None else now - _last_report)
    _last_report = now


def rank() -> int:
    """This process's rank among the trial's ranks: $RANK, which hpsearch's launchers and
    torchrun set in every rank (else $SLURM_PROCID, else 0)."""
    return int(os.environ.get("RANK") or os.environ.get("SLURM_PROCID") or 0)


def _seconds(name: str, value: Any) -> float:
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            0 <= value < float("inf")):
        raise ValueError(f"{name}={value!r}: expected a finite number of seconds >= 0")
    return float(value)


def report_timing(step: int, *, step_s: float, compute_s: float | None = None,
                  items: float | None = None) -> None:
    """Record, from EVERY rank (unlike report()), how long a training step took on this rank
    (`step_s`, wall time) and how much of it was computing rather than communicating or
    waiting for other ranks (`compute_s`; None: all of it). `items`: what the step
    processed in all ranks together (samples, tokens), for throughput in items/s; None:
    throughput is counted in steps/s. The driver derives load balance, communication and
    parallel efficiency and, across trial sizes, speedup (docs/scaling.md). One O_APPEND
    write per call to timing.<rank>.jsonl, private to the owner."""
    if not isinstance(step, int) or isinstance(step, bool):
        raise TypeError(f"step must be an int; got {step!r}")
    record: dict[str, Any] = {"step": step, "time": time.time(), "attempt": attempt(),
                              "step_s": _seconds("step_s", step_s)}
    compute = record["step_s"] if compute_s is None else _seconds("compute_s", compute_s)
    record["compute_s"] = min(compute, record["step_s"])
    if items is not None:
        record["items"] = _seconds("items", items)
    line = (json.dumps(record) + "\n").encode()
    path = trial_dir() / TIMING_FILE.format(rank=rank())
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


class StepTimer:
    """What timed_step() yields: set `comm_s` (or add to it) to the seconds of the step
    spent communicating or waiting for other ranks, and `items` to what the step
    processed in all ranks; `step_s` and `compute_s` are set when the block ends."""

    def __init__(self, step: int) -> None:
        self.step = step
        self.comm_s = 0.0
        self.items: float | None = None
        self.step_s: float | None = None
        self.compute_s: float | None = None


@contextlib.contextmanager
def timed_step(step: int, sync: Any = None, report: bool = True) -> Iterator[StepTimer]:
    """Time one training step on this rank and report_timing() it (every rank calls it):

        with trial.timed_step(step) as t:
            loss = model(x); loss.backward(); opt.step()
            t.comm_s = seconds_waited_in_allreduce      # e.g. from a DDP comm hook

    `sync`: called before the clock is read at both ends (torch.cuda.synchronize on a GPU,
    whose work is asynchronous). Nothing is reported if the block raises, or with
    report=False (a warm-up step: its time is in StepTimer all the same)."""
    timer = StepTimer(step)
    if sync is not None:
        sync()
    start = time.perf_counter()
    yield timer
    if sync is not None:
        sync()
    timer.step_s = time.perf_counter() - start
    timer.compute_s = max(0.0, timer.step_s - min(max(timer.comm_s, 0.0), timer.step_s))
    if report:
        report_timing(step, step_s=timer.step_s, compute_s=timer.compute_s, items=timer.items)


def result(**metrics: float) -> None:
    """Record the final metrics (objective values) atomically in result.json. A checkpoint
    signal (SIGUSR1, SIGUSR2) that comes after it asks for nothing: it is ignored from then
    on. Python puts its signals back to their default as it exits, so one that came while
    the process exited killed it (exit 140) and its finished attempt counted as failed."""
    write_json_atomic(trial_dir() / "result.json", _clean(metrics))
    for sig in (signal.SIGUSR1, signal.SIGUSR2):
        try:
            if signal.getsignal(sig) is _on_signal:
                signal.signal(sig, signal.SIG_IGN)
        except ValueError:  # not the main thread
            pass


def write_json_atomic(path: Path, data: dict, sync: bool = True) -> None:
    """Write JSON so that a reader sees the old file or the whole new one, never a part
    (a temporary file beside it, renamed over it; with sync, flushed to disk first, so it is
    whole after a crash of the host too)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with open(tmp, "w") as fh:
        json.dump(data, fh, allow_nan=True, sort_keys=True)
        if sync:
            fh.flush()
            os.fsync(fh.fileno())
    os.replace(tmp, path)


def checkpoint_dir() -> Path:
    """Where to save checkpoints; it survives retries and requeues of this trial."""
    _first_call()
    path = Path(os.environ.get("HPSEARCH_CHECKPOINT_DIR") or trial_dir() / "checkpoints")
    path.mkdir(parents=True, exist_ok=True)
    return path


def checkpoint_step(name: str) -> int | None:
    """The step a checkpoint's file name tells: its last number (epoch-0007.pt -> 7)."""
    match = _STEP_IN_NAME.search(name)
    return int(match.group(1)) if match else None


def _manifest_steps() -> dict[str, int]:
    """Registered checkpoints: file name in checkpoint_dir() -> step (the last line wins)."""
    steps: dict[str, int] = {}
    try:
        text = (trial_dir() / CHECKPOINT_MANIFEST).read_text(errors="replace")
    except FileNotFoundError:
        return steps
    for line in text.splitlines():
        try:
            rec = json.loads(line)
            steps[Path(rec["path"]).name] = int(rec["step"])
        except (ValueError, KeyError, TypeError):
            continue  # a line cut short by a crash
    return steps


_REFUSED: set[str] = set()  # checkpoints latest_checkpoint() has named as not this user's


def _not_yours(entry: Path, folder: Path) -> str | None:
    """Why the checkpoint at `entry` is not this user's own to load, or None. A link is
    followed only to a checkpoint in the same folder (Lightning's save_last="link")."""
    me = os.geteuid()
    try:
        info = entry.lstat()
        if stat.S_ISLNK(info.st_mode):
            target = Path(os.path.realpath(entry))
            if target.parent != Path(os.path.realpath(folder)):
                return "a link out of the checkpoint folder"
            entry, info = target, target.lstat()
    except OSError:
        return None if not os.path.lexists(entry) else "it cannot be read"
    if info.st_uid != me:
        return f"it belongs to uid {info.st_uid}, not to you (uid {me})"
    if stat.S_ISDIR(info.st_mode):  # a checkpoint saved as a folder: all of it
        for root, dirs, files in os.walk(entry):
            for name in dirs + files:
                inner = os.lstat(os.path.join(root, name))
                if stat.S_ISLNK(inner.st_mode) or inner.st_uid != me:
                    return f"{os.path.join(root, name)} in it is a link or not yours"
        return None
    return None if stat.S_ISREG(info.st_mode) else "it is not a regular file"


def latest_checkpoint() -> Path | None:
    """The checkpoint to resume from, or None: the highest step (registered with
    checkpoint()/register_checkpoint(), or else the last number in the name), newest first
    among equals. The driver never deletes this one while the trial may still run.

    Entries starting with '.' or ending in '.tmp' are ignored: save under such a name and
    rename into place, so a checkpoint half-written when the job dies is never returned.
    Loading a checkpoint runs code (torch.load, pickle): one that is not this user's own
    (another user's file or folder, a link out of the checkpoint folder, a FIFO) is never
    returned, and stderr names it once (docs/security.md).
    """
    registered = _manifest_steps()
    best, best_key = None, None
    folder = checkpoint_dir()
    for entry in folder.iterdir():
        if entry.name.startswith(".") or entry.name.endswith(".tmp"):
            continue
        why = _not_yours(entry, folder)
        if why:
            if entry.name not in _REFUSED:
                _REFUSED.add(entry.name)
                print(f"hpsearch.trial: not resuming from {entry}: {why}", file=sys.stderr,
                      flush=True)
            continue
        step = registered.get(entry.name, checkpoint_step(entry.name))
        try:
            key = (step if step is not None else -1, entry.stat().st_mtime, entry.name)
        except FileNotFoundError:
            continue  # deleted by the checkpoint policy meanwhile
        if best_key is None or key > best_key:
            best, best_key = entry, key
    return best


@contextlib.contextmanager
def checkpoint(step: int, suffix: str = "") -> Iterator[Path]:
    """Save a checkpoint of `step` safely: write to the path yielded (a file, or a folder
    you create there), and on leaving the block it is renamed to
    checkpoint_dir()/step-<step><suffix> and registered for the driver. If the block
    raises, nothing is registered and the partial save is removed.

        with trial.checkpoint(epoch, ".pt") as path:
            torch.save(state, path)
    """
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise TypeError(f"step must be an int >= 0; got {step!r}")
    final = checkpoint_dir() / f"step-{step:08d}{suffix}"
    tmp = final.with_name(f".{final.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        if not tmp.exists():
            raise FileNotFoundError(f"nothing was saved at {tmp}")
        if tmp.is_file():
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
        if final.is_dir() and not final.is_symlink():
            shutil.rmtree(final)  # os.replace cannot replace a folder
        os.replace(tmp, final)
    except BaseException:
        if tmp.is_dir() and not tmp.is_symlink():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)
        raise
    register_checkpoint(step, final)


def register_checkpoint(step: int, path: str | Path) -> None:
    """Tell the driver a checkpoint of `step` is complete at `path` (inside checkpoint_dir();
    any name). Use it when you save without checkpoint(). One atomic append per call."""
    path = Path(path)
    if not path.is_absolute():
        path = checkpoint_dir() / path
    if path.resolve().parent != checkpoint_dir().resolve():
        raise ValueError(f"{path} is not directly inside {checkpoint_dir()}")
    line = json.dumps({"step": int(step), "path": path.name, "time": time.time()}) + "\n"
    fd = os.open(trial_dir() / CHECKPOINT_MANIFEST, os.O_WRONLY | os.O_APPEND | os.O_CREAT,
                 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


_STOP_SIGNALS = {int(s): s.name.removeprefix("SIG")
                 for s in (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)}


def _on_signal(signum: int, frame: Any) -> None:
    # A lookup, no call: Python runs a signal that comes while a handler runs inside it,
    # at the handler's next call. The handler that built the name through signal.Signals
    # (a dozen calls into enum) nested under a flood of SIGUSR2 until RecursionError killed
    # the trial (tests/test_trial_contract.py, seen in the quick tier under load).
    global _stop_signal
    _stop_signal = _STOP_SIGNALS.get(signum, "signal")


def _install_handlers() -> None:
    global _handlers_installed
    if _handlers_installed:
        return
    _handlers_installed = True
    for sig in _STOP_SIGNALS:
        try:
            if signal.getsignal(sig) in (signal.SIG_DFL, None):
                signal.signal(sig, _on_signal)
        except ValueError:  # not the main thread
            pass


def should_stop() -> bool:
    """True once a STOP file is in the trial dir (the pruner rejected it) or the
    process got SIGTERM/SIGUSR1/SIGUSR2 (cancel, time limit, preemption): save a checkpoint
    and exit. The first call installs the signal handlers; call it once early."""
    _first_call()
    _install_handlers()
    if _awaiting is not None:
        _await_verdict()
    return _stop_signal is not None or _stop_file()


# The verdict on a report, before the next step (Optuna's `report(); should_prune()` has it
# at once, in process). Where the driver reads reports as they are written and a pruner
# judges them, it sets HPSEARCH_VERDICT_WAIT (seconds): the first should_stop() after a
# report then waits, that long at most from the report and never more than VERDICT_SHARE
# of the time between the last two reports, for the driver's verdict: STOP, or JUDGED
# naming this attempt and a step at least the reported one. Without it, a rejected trial
# ran its next step before it saw STOP (benchmarks/peers.py, ASHA in stop mode). After
# VERDICT_MISSES waits in a row that timed out (the driver is gone or stalled) it waits no
# more, until a verdict is there again when it looks. A verdict may add the first step the
# pruner could stop this attempt at (successive halving: its next rung): a report of an
# earlier step is not waited for.
VERDICT_SHARE = 0.5
VERDICT_MISSES = 2
_awaiting: tuple[int, float, float | None] | None = None  # (step, when, since the last)
_last_report: float | None = None  # when the last report was written (time.monotonic)
_missed = 0  # waits in a row that timed out
_quiet: tuple[int, int] = (0, 0)  # (attempt, step): no stop on a report below that step


def _await_verdict() -> None:
    global _awaiting, _missed
    assert _awaiting is not None
    step, at, interval = _awaiting
    _awaiting = None
    try:
        most = float(os.environ.get("HPSEARCH_VERDICT_WAIT") or 0)
    except ValueError:
        return
    if most <= 0:
        return
    if _quiet[0] == attempt() and step < _quiet[1]:
        return  # the pruner cannot stop this attempt at this step: nothing to wait for
    if interval is not None:
        most = min(most, VERDICT_SHARE * interval)
    deadline, pause = at + (most if _missed < VERDICT_MISSES else 0.0), 0.0005
    while _stop_signal is None and not _stop_file() and not _judged(step):
        rest = deadline - time.monotonic()
        if rest <= 0:
            _missed += 1
            return
        time.sleep(min(pause, rest))
        pause = min(2 * pause, 0.004)
    _missed = 0


def _judged(step: int) -> bool:
    """Whether JUDGED names this attempt and `step` or a later one (its QUIET is kept for
    the next reports): read only if it is a small regular file of this user's (no link
    followed, no FIFO waited on)."""
    global _quiet
    try:
        fd = os.open(trial_dir() / "JUDGED", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            return False
        words = os.read(fd, 64).split()
        if len(words) not in (2, 3) or int(words[0]) != attempt():
            return False
        if len(words) == 3:
            _quiet = (attempt(), int(words[2]))
        return int(words[1]) >= step or step < _quiet[1]
    except (OSError, ValueError):
        return False
    finally:
        os.close(fd)


_refused_stop: str | None = None  # why a STOP file was not obeyed, told once on stderr


def _stop_file() -> bool:
    """Whether the driver's STOP file is there: a regular file of this user's (lstat, so a
    link is not followed nor a FIFO opened). Another user's file there stops nothing."""
    global _refused_stop
    path = trial_dir() / "STOP"
    try:
        info = os.lstat(path)
    except OSError:
        return False
    if stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid():
        return True
    why = "not a regular file" if not stat.S_ISREG(info.st_mode) else \
        f"owned by uid {info.st_uid}, not by this user (uid {os.geteuid()})"
    if why != _refused_stop:
        _refused_stop = why
        print(f"hpsearch.trial: ignored {path}: {why}", file=sys.stderr, flush=True)
    return False


def interrupted() -> str | None:
    """The signal (e.g. 'USR2', 'TERM') that interrupted this attempt, or None. After one,
    save a checkpoint and call resume_later(): the trial goes on in a new attempt."""
    _first_call()
    _install_handlers()
    return _stop_signal


def resume_later() -> None:
    """End this attempt with EXIT_RESUME (75): the driver runs the trial again, and the new
    attempt resumes from latest_checkpoint(). Call it after saving a checkpoint."""
    sys.stdout.flush()
    sys.stderr.flush()
    raise SystemExit(EXIT_RESUME)

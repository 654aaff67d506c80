"""Mirror an experiment into a TensorBoard log directory (`hpsearch tensorboard`).

Layout, as TensorBoard's HParams dashboard expects it (one run per trial, the experiment's
configuration at the root):

  LOGDIR/events.out.tfevents.0000000000.hpsearch-config   the HParams experiment config: each
                        parameter with its domain from the spec's space, each metric
  LOGDIR/<trial>/events.out.tfevents.<time>.<host>.hpsearch   one event file per trial, in
                        a run named as its trial dir (00002: runs sort as numbers): the
                        HParams session start (its parameters; integer choices as text, as
                        TensorBoard has no integer type and shows 16 as 16.000), every
                        reported metric as a scalar by step, once it is not in flight what
                        it cost and its rung (`values`: hpsearch.report.mirror_values), at
                        its last reported step, and once it has ended, the session end
  LOGDIR/.hpsearch-tensorboard.json   what was written (private; see Idempotent)

Written with what the tensorboard package ships and runs without TensorFlow: the summaries
are built by `tensorboard.plugins.scalar.summary_v2.scalar_pb` and
`tensorboard.plugins.hparams.summary_v2.hparams_pb` / `hparams_config_pb` (session end: the
same plugin data, `plugin_data_pb2.SessionEndInfo`), and written as `Event` records by
`tensorboard.summary.writer.record_writer.RecordWriter`. Not `tensorboard.summary.Writer`: it
starts a new event file each time it is opened (under `--follow`, one file per trial and sync)
and writes scalars only.

Idempotent: a private state file (0600, written atomically: a temporary file renamed over
it) holds, per trial, its event file, the last step written of each metric and whether its
session end was written. A sync appends to each trial's event file only the steps beyond
those (the last report of a step wins, as in the Optuna mirror), and a trial's session end
once. A state file is cheaper than reading every event file back on each sync of `--follow`;
the price: a sync killed between its writes and its state file may write those points again
(TensorBoard then shows a step twice). Delete the log directory, state file included, to start
over. One sync at a time per log directory (a lock file refuses a second).

States: completed -> STATUS_SUCCESS; failed, cancelled, pruned -> STATUS_FAILURE (pruned:
stopped before its last step); paused (promotion: it waits at a rung, and may be promoted
even after the search ended, by `hpsearch finish`), queued, submitting, running: no session
end (the dashboard's STATUS_UNKNOWN; TensorBoard keeps a run's first session end, so one
written for a paused trial could never become its success). A paused trial's rung and value
there are its `rung` and `rung_value` metrics.

hpsearch's store is only read (hpsearch.interop.store_view).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import os
import socket
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from hpsearch.errors import BadInput
from hpsearch.interop.store_view import MetricRow, StoreView
from hpsearch.interop.trial_times import trial_times
from hpsearch.spec.model import Param
from hpsearch.store import rows
from hpsearch.store.atomic import replace_file
from hpsearch.store.runs import trial_name
from hpsearch.store.trusted import Untrusted, read_trusted

STATE_FILE = ".hpsearch-tensorboard.json"
STATE_LIMIT = 256 << 20  # bytes: the steps written of every metric of 10,000s of trials
LOCK_FILE = ".hpsearch-tensorboard.lock"
CONFIG_FILE = "events.out.tfevents.0000000000.hpsearch-config"
STATE_FORMAT = 1
SUCCESS = (rows.COMPLETED,)
FAILURE = (rows.FAILED, rows.CANCELLED, rows.PRUNED)


@dataclass(frozen=True)
class SyncResult:
    trials: int     # trials of the experiment
    added: int      # new runs (trial folders) in the log directory
    updated: int    # runs that got new points or their session end
    points: int     # scalar points written


def sync(view: StoreView, logdir: Path,
         values: Mapping[int, Mapping[str, float]] | None = None) -> SyncResult:
    """Bring `logdir` up to date with `view` (idempotent; see the module docstring); `values`:
    trial id -> what it cost and its rung (hpsearch.report.mirror_values). Raises BadInput
    if another sync holds the log directory."""
    logdir = Path(logdir)
    values = values or {}
    _mkdir_private(logdir)
    with _locked(logdir):
        state = _read_state(logdir)
        _write_config(view, logdir, state, values)
        added = updated = points = 0
        for trial in view.trials:
            key = str(trial.id)
            fresh = key not in state["trials"]
            if fresh:
                state["trials"][key] = _new_run(logdir, trial, view)
                added += 1
            written, end = _append(logdir, trial, view, state["trials"][key],
                                   values.get(trial.id, {}))
            points += written
            updated += int(not fresh and (written > 0 or end))
        _write_state(logdir, state)
    return SyncResult(len(view.trials), added, updated, points)


def ended(state: str) -> bool:
    """Whether a trial in `state` gets its session end (a paused one never: see States)."""
    return state in SUCCESS + FAILURE


def _new_run(logdir: Path, trial: rows.TrialRow, view: StoreView) -> dict[str, Any]:
    """Create the trial's folder and event file with its HParams session start."""
    from tensorboard.plugins.hparams import summary_v2 as hp

    started = trial_times(trial, view.attempts_of(trial.id)).started or trial.created
    name = f"events.out.tfevents.{int(started):010d}.{socket.gethostname()}.hpsearch"
    space = {p.name: p for p in view.spec.search.space}
    params = {k: _hparam_value(v, _as_text(space.get(k))) for k, v in trial.params.items()}
    run = trial_name(trial.id)
    with _events(logdir, run, name) as write:
        write(hp.hparams_pb(params, trial_id=run, start_time_secs=started),
              step=0, wall_time=started)
    return {"file": name, "run": run, "steps": {}, "ended": False, "values": {}}


def _append(logdir: Path, trial: rows.TrialRow, view: StoreView, entry: dict[str, Any],
            values: Mapping[str, float]) -> tuple[int, bool]:
    """Append the trial's points beyond those written, its `values` that changed once it is
    not in flight, and its session end if it has ended and that was not written yet.
    Returns (points written, session end written)."""
    from tensorboard.plugins.scalar.summary_v2 import scalar_pb

    steps: dict[str, int] = entry["steps"]
    reports = view.metrics_of(trial.id)
    new = [m for m in _last_per_step(reports) if m.step > steps.get(m.name, -1)]
    written: dict[str, float] = entry.setdefault("values", {})
    changed = {} if trial.state in rows.IN_FLIGHT else \
        {k: v for k, v in values.items() if written.get(k) != v}
    end = ended(trial.state) and not entry["ended"]
    if not new and not changed and not end:
        return 0, False
    # an entry of a state file written before runs were named as trial dirs: its run
    with _events(logdir, entry.get("run", str(trial.id)), entry["file"]) as write:
        for m in new:
            write(scalar_pb(m.name, m.value), step=m.step, wall_time=m.time)
            steps[m.name] = max(m.step, steps.get(m.name, -1))
        at = max((m.step for m in reports), default=0)  # beside its last report
        for name, value in changed.items():
            write(scalar_pb(name, value), step=at, wall_time=None)
            written[name] = value
        if end:
            finished = trial_times(trial, view.attempts_of(trial.id)).finished or time.time()
            write(_session_end(trial.state, finished), step=0, wall_time=finished)
            entry["ended"] = True
    return len(new) + len(changed), end


def _last_per_step(metrics: list[MetricRow]) -> list[MetricRow]:
    """One row per (metric, step), the last reported, by step."""
    last = {(m.name, m.step): m for m in metrics}
    return sorted(last.values(), key=lambda m: (m.step, m.name))


def _session_end(state: str, finished: float):
    from tensorboard.compat.proto import summary_pb2
    from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2

    status = api_pb2.STATUS_SUCCESS if state in SUCCESS else api_pb2.STATUS_FAILURE
    data = plugin_data_pb2.HParamsPluginData(session_end_info=plugin_data_pb2.SessionEndInfo(
        status=status, end_time_secs=finished))
    summary = summary_pb2.Summary()
    summary.value.add(tag=metadata.SESSION_END_INFO_TAG, tensor=metadata.NULL_TENSOR,
                      metadata=metadata.create_summary_metadata(data))
    return summary


def _write_config(view: StoreView, logdir: Path, state: dict[str, Any],
                  values: Mapping[int, Mapping[str, float]]) -> None:
    """(Re)write the root's HParams experiment config where it changed (a metric reported
    for the first time): TensorBoard keeps the first config of a run it has read, so the
    file is replaced, not appended to; a TensorBoard started before shows the new metrics
    once restarted."""
    from tensorboard.plugins.hparams import summary_v2 as hp

    params = _space_and_params(view)
    config = hp.hparams_config_pb(
        hparams=[hp.HParam(name, _domain(param)) for name, param in params.items()],
        metrics=[hp.Metric(name) for name in dict.fromkeys(
            [*view.metric_names, *(k for v in values.values() for k in v)])],
        time_created_secs=view.experiment.created)
    digest = hashlib.sha256(config.SerializeToString(deterministic=True)).hexdigest()
    if state.get("config") == digest and (logdir / CONFIG_FILE).exists():
        return
    records = io.BytesIO()
    _writer(records, fresh=True)(config, step=0, wall_time=view.experiment.created)
    replace_file(logdir / CONFIG_FILE, records.getvalue(), sync=True)
    state["config"] = digest


def _space_and_params(view: StoreView) -> dict[str, Param | None]:
    """Every parameter name: the space's, in spec order, then those only trials have."""
    found: dict[str, Param | None] = {p.name: p for p in view.spec.search.space}
    for trial in view.trials:
        for name in trial.params:
            found.setdefault(name, None)
    return found


def _domain(param: Param | None):
    """The HParams domain of a spec parameter, or None where it has none TensorBoard
    knows (mixed-type choices, a fixed list)."""
    from tensorboard.plugins.hparams import summary_v2 as hp

    if param is None:
        return None
    if param.kind == "float" and param.low is not None and param.high is not None:
        return hp.RealInterval(float(param.low), float(param.high))
    if param.kind == "int" and param.low is not None and param.high is not None:
        return hp.IntInterval(int(param.low), int(param.high))
    choices = _choices(param)
    try:
        return hp.Discrete([_hparam_value(v, _as_text(param)) for v in choices])
    except ValueError:  # mixed types: TensorBoard takes one type per parameter
        return None


def _choices(param: Param) -> list:
    return list(param.choices) if param.kind == "categorical" else [param.value]


def _as_text(param: Param | None) -> bool:
    """Whether the parameter is a choice of integers: written as text ("16"), which the
    HPARAMS table shows as it is, where a number shows as 16.000 (its one number type
    is float64). Integer ranges stay numbers: an axis TensorBoard can scale and filter."""
    return param is not None and param.kind in ("categorical", "fixed") and all(
        isinstance(v, int) and not isinstance(v, bool) for v in _choices(param))


def _hparam_value(value: Any, as_text: bool = False) -> bool | int | float | str:
    """A parameter value as the HParams plugin takes it (bool, number, string): an integer
    choice as text (_as_text), anything else as JSON."""
    if as_text and isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, (bool, int, float, str)):
        return value
    return json.dumps(value, default=str)


@contextlib.contextmanager
def _events(logdir: Path, run_name: str, name: str) -> Iterator:
    """write(summary, step, wall_time) appending Event records to the event file `name` in
    the trial's run folder (created 0600 with its file_version record first; neither it nor
    the folder through a link: _run_folder); flushed to disk when the block ends."""
    with _run_folder(logdir / run_name) as run:
        fd = os.open(name, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
                     | os.O_CLOEXEC, 0o600, dir_fd=run)
    with os.fdopen(fd, "ab") as fh:
        yield _writer(fh, fresh=os.fstat(fd).st_size == 0)
        fh.flush()
        os.fsync(fd)


def _writer(fh: BinaryIO, fresh: bool):
    """write(summary, step, wall_time) appending Event records to `fh` (a fresh file gets
    the file_version record first)."""
    from tensorboard.compat.proto import event_pb2
    from tensorboard.summary.writer.record_writer import RecordWriter

    writer = RecordWriter(fh)
    if fresh:
        writer.write(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2")
                     .SerializeToString())

    def write(summary, step: int, wall_time: float | None) -> None:
        event = event_pb2.Event(wall_time=wall_time if wall_time is not None
                                else time.time(), step=step, summary=summary)
        writer.write(event.SerializeToString())
    return write


@contextlib.contextmanager
def _run_folder(run: Path) -> Iterator[int]:
    """A descriptor of a trial's run folder, made 0700 where missing. One that is there
    already must be a folder of this user's, not a link: a link planted at `<logdir>/<trial>`
    (by someone who may write the log directory) would have the mirror write its event file
    wherever it points. Opened without following a link, and checked on the descriptor, so
    a swap after the check changes nothing. Refused: BadInput."""
    try:
        run.mkdir(mode=0o700)
    except FileExistsError:
        pass
    try:
        fd = os.open(run, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:  # ELOOP: a link; ENOTDIR: not a folder
        why = "a symbolic link" if os.path.islink(run) else exc.strerror
        raise BadInput(f"--logdir: {run} is {why}, not a folder of the mirror's: it is not "
                       f"written through; remove it, or choose another --logdir") from None
    try:
        owner = os.fstat(fd).st_uid
        if owner != os.geteuid():
            raise BadInput(f"--logdir: {run} belongs to uid {owner}, not to you (uid "
                           f"{os.geteuid()}): the mirror does not write in it; remove it, or "
                           "choose a log directory of your own")
        yield fd
    finally:
        os.close(fd)


def _mkdir_private(folder: Path) -> None:
    """The log dir (0700), and the folders above it where missing (as `mkdir -p`: the
    documented `--logdir tb/NAME` in a fresh folder)."""
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise BadInput(f"--logdir {folder}: a file is in the way of its folders") from None
    try:
        folder.mkdir(mode=0o700)
    except FileExistsError:
        if not folder.is_dir():
            raise BadInput(f"--logdir: {folder} exists and is not a folder") from None


@contextlib.contextmanager
def _locked(logdir: Path) -> Iterator[None]:
    fd = os.open(logdir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise BadInput(f"--logdir {logdir}: another `hpsearch tensorboard` is writing "
                           "it; let it end, or choose another --logdir") from None
        yield
    finally:
        os.close(fd)


def _read_state(logdir: Path) -> dict[str, Any]:
    """The state file's content; a fresh one where there is none. Read only if it is a
    regular file of this user's of at most STATE_LIMIT bytes, not through a link
    (store.trusted: the log dir may be shared). Refuses one it cannot read or trust
    (BadInput): writing on would duplicate what is there."""
    path = logdir / STATE_FILE
    try:
        data = read_trusted(path, STATE_LIMIT)
    except (OSError, Untrusted) as exc:
        why = exc.strerror if isinstance(exc, OSError) else str(exc)
        raise BadInput(f"--logdir {logdir}: cannot read {STATE_FILE}: {why}") from None
    if data is None:
        return {"format": STATE_FORMAT, "trials": {}}
    try:
        state = json.loads(data)
        if state.get("format") != STATE_FORMAT or not isinstance(state["trials"], dict):
            raise ValueError("unknown format")
    except (ValueError, KeyError, AttributeError, RecursionError) as exc:
        raise BadInput(f"{path}: not a state file of this hpsearch ({exc}); delete "
                       f"{logdir} to write the mirror afresh") from None
    return state


def _write_state(logdir: Path, state: dict[str, Any]) -> None:
    """The state file, atomically (a private temporary file renamed over it)."""
    replace_file(logdir / STATE_FILE, json.dumps(state, sort_keys=True, allow_nan=False),
                 sync=True)


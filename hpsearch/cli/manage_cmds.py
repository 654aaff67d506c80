"""`hpsearch delete` and `hpsearch events`: remove an experiment, read its event log.

Deleting is safe against what could still write into the experiment and against a crash
half-way: it refuses while a driver holds the experiment, or (without --force) while trials
or pilot jobs are still in flight with no driver; it then takes the driver lock itself, so no
driver can start meanwhile, and renames the experiment's folder in one step into the runs
dir's hidden `.deleting/` folder (no experiment name starts with '.', and nothing lists what
is in there) before removing it. A crash after the rename leaves no experiment that looks
valid; the next `delete` removes what is left there. An experiment folder that is a symbolic
link is unlinked: the folder it points to is left alone.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import TextIO

from hpsearch.cli.common import add_command, add_runs_dir, runs_dir_of
from hpsearch.errors import EXIT_INCOMPLETE, Conflict
from hpsearch.store import runs
from hpsearch.store.lockfile import DriverLock
from hpsearch.store.runs import STORE_FILE

TRASH = ".deleting"  # <runs_dir>/.deleting/<name>-<pid>-<random>: folders being removed
IN_FLIGHT = ("submitting", "running")  # states whose process or job may still write


def register(sub) -> None:
    p = add_command(sub, "delete", "Delete an experiment: its folder under the runs dir "
                    "(store, trial folders, logs, checkpoints). On a terminal it asks you to "
                    "type the experiment's name; elsewhere it needs --yes. Refuses while a "
                    "driver runs it, or while trials are still running with no driver "
                    "(`hpsearch cancel NAME` first, or --force). Not confirmed: exit 1, "
                    "nothing deleted.",
                    "  hpsearch delete quadratic                 # asks: type 'quadratic'\n"
                    "  hpsearch delete quadratic --yes           # scripts: no question\n"
                    "  hpsearch delete examples/quadratic/spec.yaml --yes\n"
                    "  hpsearch cancel quadratic && hpsearch delete quadratic --yes",
                    delete)
    p.add_argument("name", help="the experiment (or its spec file)")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.add_argument("--force", action="store_true",
                   help="delete even while trials run with no driver (they keep running)")
    add_runs_dir(p)
    p = add_command(sub, "events", "The experiment's event log, oldest first: its "
                    "creation and status changes, each attempt's end (completed, failed, "
                    "pruned, cancelled, requeued), retries, adoptions, warnings, the driver "
                    "leaving.",
                    "  hpsearch events quadratic                 # the last 50 events\n"
                    "  hpsearch events quadratic --trial 3 --limit 0\n"
                    "  hpsearch events quadratic --kind failed warning\n"
                    "  hpsearch events quadratic --json", events)
    p.add_argument("name", help="the experiment (or its spec file)")
    p.add_argument("--trial", type=int, default=None, help="only this trial's events")
    p.add_argument("--kind", action="extend", nargs="+", default=None, metavar="KIND",
                   help="only events of these kinds (e.g. failed requeued warning "
                        "adopted driver_left)")
    p.add_argument("--limit", type=_limit, default=50,
                   help="the last N events (default 50; 0: all); when some are left "
                        "out, a line on stderr says how many there are")
    p.add_argument("--json", action="store_true", help="print JSON")
    add_runs_dir(p)


def _limit(text: str) -> int:
    import argparse
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected 0 (all) or a positive number")
    return value


# -- delete --------------------------------------------------------------------------------

def delete(args) -> int:
    runs_dir = runs_dir_of(args)
    exp_dir = runs.existing_experiment_dir(runs_dir, args.name)  # bad name, did-you-mean
    _refuse_if_driven(exp_dir)
    busy = _refuse_if_in_flight(exp_dir, args.force)
    if not args.yes:
        if busy:
            print(f"still in flight with no driver: {busy}; --force deletes the folder, they "
                  "keep running", file=sys.stderr)
        if not sys.stdin.isatty():
            raise Conflict(f"not deleting '{args.name}': stdin is not a terminal to confirm "
                           f"on; pass --yes to delete {exp_dir} without a question")
        if not confirm(args.name, exp_dir, sys.stdin, sys.stderr):
            print(f"not deleted: you did not type '{args.name}'", file=sys.stderr)
            return EXIT_INCOMPLETE
    lock = DriverLock(exp_dir)
    lock.acquire(private=False)  # no driver can start while we delete; Conflict if one just did
    try:
        left = _refuse_if_in_flight(exp_dir, args.force)  # again: a driver may have run
        if exp_dir.is_symlink():
            target = os.path.realpath(exp_dir)
            lock.release()  # its lock file lives in the target, which stays
            exp_dir.unlink()
            print(f"deleted experiment '{args.name}': removed the symbolic link {exp_dir}; "
                  f"the folder it pointed to ({target}) was left in place")
            return 0
        doomed = _move_to_trash(runs_dir, exp_dir)
    finally:
        lock.release()  # after the move: the lock file went with the folder, left as is
    failed = _remove(doomed)
    _empty_trash(runs_dir)
    if left:
        print(f"hpsearch: warning: deleted with {left} still in flight (--force): they keep "
              "running; stop them yourself (kill the process group, scancel the job)",
              file=sys.stderr)
    if failed:
        print(f"hpsearch: error: experiment '{args.name}' is deleted, but {len(failed)} "
              f"file(s) could not be removed ({failed[0]}); they are left in {doomed}",
              file=sys.stderr)
        return EXIT_INCOMPLETE
    print(f"deleted experiment '{args.name}' ({exp_dir})")
    return 0


def confirm(name: str, exp_dir: Path, answers: TextIO, out: TextIO) -> bool:
    """Ask on `out` for the experiment's name, read one line from `answers`: True only if
    it is exactly `name` (surrounding blanks aside). End of input is a no."""
    out.write(f"This deletes experiment '{name}' and everything in {exp_dir} (store, trial "
              f"folders, logs, checkpoints).\nType the experiment's name to delete it: ")
    out.flush()
    return answers.readline().strip() == name


def _refuse_if_driven(exp_dir: Path) -> None:
    """Conflict (nothing deleted) while a driver holds the experiment."""
    holder = DriverLock(exp_dir).owner()
    if holder is not None and holder.alive:
        raise Conflict(f"not deleting '{exp_dir.name}': its driver is running "
                       f"({holder.describe()}); stop it first with `hpsearch cancel "
                       f"{exp_dir.name}`")


def _refuse_if_in_flight(exp_dir: Path, force: bool) -> str | None:
    """Conflict (nothing deleted) while trials or pilot jobs are in flight with no driver to
    stop them; with `force`, what is in flight (None: nothing), for a warning."""
    from hpsearch.cli.inspect_cmds import _reader
    with _reader(exp_dir / STORE_FILE) as reader:
        busy = reader.trials(IN_FLIGHT)
        pilots = reader.pilots(live_only=True)
    if not busy and not pilots:
        return None
    what = ", ".join(filter(None, [
        busy and f"{len(busy)} trial(s) ({', '.join(_where(t) for t in busy)})",
        pilots and f"{len(pilots)} pilot job(s) ("
                   f"{', '.join(p.job_id or 'not yet submitted' for p in pilots)})"]))
    if force:
        return what
    raise Conflict(f"not deleting '{exp_dir.name}': {what} still in flight with no driver; "
                   f"their processes or Slurm jobs would keep writing into a deleted folder. "
                   f"Run `hpsearch cancel {exp_dir.name}` first (or delete --force to delete "
                   "anyway)")


def _where(t) -> str:
    runs_as = f"Slurm job {t.job_id}" if t.job_id else (f"pid {t.pid}" if t.pid else "")
    return f"#{t.id} {t.state}" + (f", {runs_as}" if runs_as else "")


def _move_to_trash(runs_dir: Path, exp_dir: Path) -> Path:
    """Rename `exp_dir` into <runs_dir>/.deleting/ (one atomic step): from then on it is no
    experiment. Returns its new path."""
    trash = runs_dir / TRASH
    doomed = trash / f"{exp_dir.name}-{os.getpid()}-{os.urandom(3).hex()}"
    for _ in range(5):  # another delete may remove an empty .deleting/ between both steps
        try:
            trash.mkdir(exist_ok=True)
            if trash.is_symlink():
                raise Conflict(f"{trash} is a symbolic link, not the folder hpsearch deletes "
                               "experiments through; remove it and run delete again")
            os.rename(exp_dir, doomed)
            return doomed
        except FileNotFoundError:
            if not exp_dir.exists():
                raise
    raise Conflict(f"could not move {exp_dir} into {trash}: that folder kept disappearing")


def _remove(path: Path) -> list[str]:
    """Remove the tree at `path` without following links in it. Returns what failed."""
    failed: list[str] = []

    def note(function, where, exc_info) -> None:
        if not isinstance(exc_info[1], FileNotFoundError):  # another delete got it first
            failed.append(f"{where}: {exc_info[1].strerror or exc_info[1]}")
    shutil.rmtree(path, onerror=note)
    return failed


def _empty_trash(runs_dir: Path) -> None:
    """Remove what earlier deletes left in .deleting/ (a crash, Ctrl-C), then the folder."""
    trash = runs_dir / TRASH
    if trash.is_symlink() or not trash.is_dir():
        return
    for left in trash.iterdir():
        _remove(left)
    try:
        trash.rmdir()
    except OSError:
        pass  # not empty: another delete is under way, or files could not be removed


# -- events --------------------------------------------------------------------------------

def events(args) -> int:
    from hpsearch.cli.checkpoint_cmds import _exists
    from hpsearch.cli.inspect_cmds import _reader

    with _reader(runs.existing_experiment_dir(runs_dir_of(args), args.name) / STORE_FILE) as reader:
        if args.trial is not None:
            _exists(reader, reader.experiment().name, args.trial)
        every = reader.events(args.trial, limit=None)
    matching = [e for e in every if not args.kind or e["kind"] in args.kind]
    shown = matching[-args.limit:] if args.limit else matching
    if len(shown) < len(matching):  # say so, first; on stderr: stdout stays one line an event
        print(f"last {len(shown)} of {len(matching)} events, oldest first; --limit N shows "
              "the last N, --limit 0 all", file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps([{"time": _iso(e["time"]), "timestamp": e["time"], "trial": e["trial"],
                           "kind": e["kind"], "message": e["message"]} for e in shown],
                         indent=1))
    else:
        for line in event_lines(shown):
            print(line)
    if not shown and every and args.kind:
        kinds = sorted({e["kind"] for e in every})
        print(f"no events of kind {', '.join(args.kind)}; this log has: {', '.join(kinds)}",
              file=sys.stderr)
    return 0


def event_lines(rows: list[dict]) -> list[str]:
    """`YYYY-mm-dd HH:MM:SS  trial  kind  message` per event (local time; trial `-` for
    the experiment's own events), columns aligned; a message's further lines are indented
    under its first, at the message column."""
    if not rows:
        return []
    trials = [str(e["trial"]) if e["trial"] is not None else "-" for e in rows]
    width_trial = max(len(t) for t in trials)
    width_kind = max(len(e["kind"] or "") for e in rows)
    lines = []
    for e, trial in zip(rows, trials):
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e["time"]))
        head = f"{when}  {trial.rjust(width_trial)}  {(e['kind'] or '').ljust(width_kind)}  "
        first, *rest = (e["message"] or "").splitlines() or [""]
        lines.append((head + first).rstrip())
        lines.extend((" " * len(head) + more).rstrip() for more in rest)
    return lines


def _iso(when: float) -> str:
    from datetime import datetime
    return datetime.fromtimestamp(when).astimezone().isoformat(timespec="seconds")

"""Reading an experiment's store: the Reader every process but the driver opens (status,
watch, export, report, the TUI, the Python API), and the Store's queries (a Store is a
Reader that also writes, hpsearch.store.store).

A Reader opens the file with mode=ro, so it can never write it. On a store in
rollback-journal mode it takes no lock (hpsearch.store.lock_free), so that no reader holds
up the driver's commits; around a hot journal it reads the last commit from a snapshot.
"""

from __future__ import annotations

import functools
import json
import math
import sqlite3
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from hpsearch.errors import NotFound
from hpsearch.store.lib import sqlite_utils
from hpsearch.store.lock_free import open_lock_free, rollback_journal
from hpsearch.store.read_only import hot_journal, hot_journal_wait, open_read_only, open_snapshot
from hpsearch.store.rows import (
    COMPLETED,
    PILOT_ENDED,
    CheckpointRow,
    ExperimentRow,
    PilotRow,
    TrialRow,
)

T = TypeVar("T")


def _reads(method: Callable[..., T]) -> Callable[..., T]:
    """A Reader's query, around a hot journal: a mode=ro connection cannot read while one
    is there (a driver mid-transaction that this host cannot see locked, or one that died).
    Wait for it to go, then read the last commit from a snapshot (read_only.open_snapshot) for this
    call; the next call reads the store again. The store is never written."""
    @functools.wraps(method)
    def reading(self: Reader, *args: Any, **kwargs: Any) -> T:
        deadline = time.monotonic() + hot_journal_wait()
        while True:
            try:
                return method(self, *args, **kwargs)
            except sqlite3.OperationalError as exc:
                if not hot_journal(exc) or self._writer:
                    raise
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        live, self.db = self.db, sqlite_utils.Database(open_snapshot(self.path))
        try:
            return method(self, *args, **kwargs)
        finally:
            self.db.conn.close()
            self.db = live
    return reading


_Handle = TypeVar("_Handle", bound="Reader")


class Reader:
    """Read-only access. Opens the file with mode=ro, so it can never write it; reads
    around a hot journal (_reads) instead of rolling it back. A store in rollback-journal
    mode is read without SQLite's locks (hpsearch.store.lock_free), so that no reader can
    hold up the driver's commits."""

    _writer = False  # True for a Store: it never reads from a snapshot

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.exists():
            raise NotFound(f"no store at {self.path}")
        self.db = sqlite_utils.Database(open_lock_free(self.path)
                                        if rollback_journal(self.path)
                                        else open_read_only(self.path))

    def close(self) -> None:
        self.db.conn.close()

    def __enter__(self: _Handle) -> _Handle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def experiment(self) -> ExperimentRow:
        rows = list(self.db["experiment"].rows)
        if not rows:
            raise NotFound(f"store {self.path} holds no experiment")
        return ExperimentRow.from_db(rows[0])

    def trials(self, states: Iterable[str] | None = None) -> list[TrialRow]:
        if states is None:
            found = self.db["trials"].rows_where(order_by="id")
        else:
            states = list(states)
            marks = ",".join("?" * len(states))
            found = self.db["trials"].rows_where(f"state in ({marks})", states, order_by="id")
        return [TrialRow.from_db(row) for row in found]

    def last_trials(self, count: int) -> list[TrialRow]:
        """The `count` trials of the highest ids, by id (status's listing of a big search)."""
        found = self.db["trials"].rows_where(order_by="id desc", limit=count)
        return [TrialRow.from_db(row) for row in reversed(list(found))]

    def trials_by_id(self, ids: Iterable[int]) -> list[TrialRow]:
        """The trials of `ids`, in that order (an id with no trial is left out)."""
        ids = list(ids)
        found = {row["id"]: TrialRow.from_db(row) for row in self.db["trials"].rows_where(
            "id in (select value from json_each(?))", [json.dumps(ids)])}
        return [found[i] for i in ids if i in found]

    def scored(self) -> list[tuple[int, list]]:
        """(id, objective values) of every completed trial that has them, by id: all that
        ranking needs (best, status), without reading and parsing every trial's row."""
        return [(tid, values) for tid, text in self.db.execute(
            "select id, objective_values from trials where state = ? and objective_values"
            " is not null order by id", (COMPLETED,)) if (values := json.loads(text))]

    def top_scored(self, sign: int, k: int) -> list[tuple[int, list]]:
        """scored()'s k first by (sign * the first value, id), ranked by SQLite, with every
        trial whose values it cannot read (NaN, Infinity: not JSON) for the caller to rank
        among them (hpsearch.store.results.best_of)."""
        head = ("select id, objective_values from trials where state = ? and objective_values"
                " is not null and ")
        found = self.db.execute(
            head + "json_valid(objective_values) and json_array_length(objective_values) > 0"
            " order by ? * json_extract(objective_values, '$[0]'), id limit ?",
            (COMPLETED, sign, k)).fetchall()
        found += self.db.execute(head + "not json_valid(objective_values)", (COMPLETED,))
        return [(tid, values) for tid, text in found if (values := json.loads(text))]

    def trial(self, trial_id: int) -> TrialRow:
        rows = list(self.db["trials"].rows_where("id = ?", [trial_id]))
        if not rows:
            raise NotFound(f"no trial {trial_id}")
        return TrialRow.from_db(rows[0])

    def state_counts(self) -> dict[str, int]:
        return dict(self.db.execute("select state, count(*) from trials group by state").fetchall())

    def metrics(self, trial_id: int) -> list[dict]:
        return list(self.db["metrics"].rows_where("trial = ?", [trial_id], order_by="step, name"))

    def objective_curves(self, metric: str) -> dict[int, dict[int, float]]:
        """Every trial's reported values of `metric`: trial -> {step: value}."""
        curves: dict[int, dict[int, float]] = {}
        for trial, step, value in self.db.execute(
                "select trial, step, value from metrics where name = ? order by trial, step",
                [metric]):
            curves.setdefault(trial, {})[step] = value
        return curves

    def attempts(self, trial_id: int) -> list[dict]:
        return list(self.db["attempts"].rows_where("trial = ?", [trial_id], order_by="attempt"))

    def all_metrics(self) -> list[dict]:
        """Every trial's metrics in one query, by trial, then as metrics() orders them."""
        return list(self.db["metrics"].rows_where(order_by="trial, step, name"))

    def all_attempts(self) -> list[dict]:
        """Every trial's attempts in one query, by trial and attempt."""
        return list(self.db["attempts"].rows_where(order_by="trial, attempt"))

    def table_rows(self, table: str, order: str) -> tuple[tuple[str, ...], list[tuple]]:
        """(column names, every row as a tuple) of `table` ordered by `order` (SQL): what
        hpsearch.interop.store_view.read_raw keeps."""
        cursor = self.db.execute(f"select * from [{table}] order by {order}")
        return tuple(d[0] for d in cursor.description), cursor.fetchall()

    def trials_after(self, last: int, count: int) -> list[TrialRow]:
        """The first `count` trials of ids above `last`, by id (export reads them so)."""
        found = self.db["trials"].rows_where("id > ?", [last], order_by="id", limit=count)
        return [TrialRow.from_db(row) for row in found]

    def rows_between(self, table: str, first: int, last: int) -> list[dict]:
        """The metrics or attempts rows of trials `first` to `last`, in all_metrics' and
        all_attempts' order."""
        order = {"metrics": "trial, step, name", "attempts": "trial, attempt"}[table]
        return list(self.db[table].rows_where("trial between ? and ?", [first, last],
                                              order_by=order))

    def metric_order(self) -> list[str]:
        """Every reported metric's name, in the order first reported: of all_metrics' rows
        (by trial, step, name), where each name first appears; one pass of the table."""
        first = self.db.execute("select name, min(trial) from metrics group by name")
        keys = [(trial, self.db.execute("select min(step) from metrics where trial = ? and"
                                        " name = ?", (trial, name)).fetchone()[0], name)
                for name, trial in first.fetchall()]
        return [name for _, _, name in sorted(keys)]

    def param_order(self) -> list[str]:
        """Every parameter name of the trials, in the order first seen (by trial id, then in
        its params), without parsing each trial's row in Python."""
        try:
            first = dict(self.db.execute("select key, min(trials.id) from trials, json_each("
                                         "trials.params) group by key").fetchall())
        except sqlite3.OperationalError:  # a value JSON cannot hold (NaN): parse them here
            return list(dict.fromkeys(key for (text,) in self.db.execute(
                "select params from trials order by id") for key in json.loads(text)))
        order: list[str] = []
        for trial in sorted(set(first.values())):
            (text,) = self.db.execute("select params from trials where id = ?",
                                      (trial,)).fetchone()
            order += [key for key in json.loads(text) if first.get(key) == trial]
        return order

    def attempts_of(self, ids: Iterable[int]) -> list[dict]:
        """The attempts of the trials `ids` in one query, by trial and attempt."""
        return list(self.db["attempts"].rows_where(
            "trial in (select value from json_each(?))", [json.dumps(list(ids))],
            order_by="trial, attempt"))

    def checkpoints(self, trial_id: int | None = None,
                    include_deleted: bool = False) -> list[CheckpointRow]:
        """Registered checkpoints by trial and step; deleted ones only with include_deleted."""
        where = [] if include_deleted else ["deleted is null"]
        args: list = []
        if trial_id is not None:
            where.append("trial = ?")
            args.append(trial_id)
        found = self.db["checkpoints"].rows_where(" and ".join(where) or None, args,
                                                  order_by="trial, step, path")
        return [CheckpointRow.from_db(row) for row in found]

    def checkpoint_steps(self, trial_id: int) -> dict[int, int]:
        """attempt -> the highest step it saved a checkpoint of (deleted ones included)."""
        return dict(self.db.execute(
            "select attempt, max(step) from checkpoints where trial = ? and attempt is not"
            " null group by attempt", (trial_id,)).fetchall())

    def reads(self, trial_id: int) -> dict[str, object]:
        """source -> where the driver stopped reading that trial's output (add_output)."""
        found = {}
        for source, text in self.db.execute(
                "select source, state from trial_reads where trial = ?", (trial_id,)):
            try:
                found[source] = json.loads(text)
            except ValueError:
                pass  # unreadable: that reader starts from the beginning again
        return found

    def last_metrics(self, trial_id: int) -> dict[str, tuple[int, float]]:
        """metric -> (step, value) at the highest step the trial reported it (NaN, which
        SQLite stores as NULL, comes back as NaN)."""
        rows = self.db.execute("select name, max(step), value from metrics where trial = ?"
                               " group by name", (trial_id,))  # value: of the max(step) row
        return {name: (step, math.nan if value is None else value) for name, step, value in rows}

    def gpu_use(self) -> list[dict]:
        """Every row of gpu_use (per trial, attempt and node: what its GPU samples added up
        to); [] for a store written before it existed."""
        if not self.db["gpu_use"].exists():
            return []
        return list(self.db["gpu_use"].rows_where(order_by="trial, attempt, node"))

    def rank_timing(self) -> list[dict]:
        """Every row of rank_timing (per trial, attempt and rank: the sums of its timing
        lines, hpsearch.ingest.timing_lines); [] for a store written before it existed."""
        if not self.db["rank_timing"].exists():
            return []
        return list(self.db["rank_timing"].rows_where(order_by="trial, attempt, rank"))

    def events(self, trial_id: int | None = None, limit: int | None = 50,
               kind: str | None = None) -> list[dict]:
        """The last `limit` events (None: all), oldest first; of one trial, of one kind."""
        where = [w for w, a in (("trial = ?", trial_id), ("kind = ?", kind)) if a is not None]
        args = [a for a in (trial_id, kind) if a is not None]
        found = self.db["events"].rows_where(" and ".join(where) or None, args,
                                             order_by="id desc", limit=limit)
        return list(reversed(list(found)))

    def pilots(self, live_only: bool = False) -> list[PilotRow]:
        """The experiment's pilot jobs, oldest first (live_only: those not ended)."""
        where = "state != ?" if live_only else None
        return [PilotRow.from_db(row) for row in self.db["pilots"].rows_where(
            where, [PILOT_ENDED] if live_only else [], order_by="id")]

    def slurm_trouble(self) -> str | None:
        """The message of the Slurm trouble the driver last reported and has not seen end
        ("Slurm unreachable since ...", "sbatch refused by a limit since ..."), or None."""
        row = self.db.execute(
            "select kind, message from events where trial is null and kind in (?, ?, ?, ?)"
            " order by id desc limit 1", TROUBLE_KINDS).fetchone()
        return row[1] if row and row[0] in TROUBLE_KINDS[:2] else None


# Events of the Slurm executor (hpsearch.executors.slurm_health): trouble began, then ended.
TROUBLE_KINDS = ("slurm_unreachable", "slurm_limit", "slurm_reachable", "slurm_accepts")


for _query in ("experiment", "trials", "last_trials", "trials_by_id", "scored", "top_scored",
               "trial", "attempts_of", "table_rows", "trials_after", "rows_between",
               "metric_order", "param_order", "state_counts", "metrics", "objective_curves",
               "attempts", "all_metrics", "all_attempts", "checkpoints", "checkpoint_steps",
               "reads", "last_metrics", "events", "pilots", "slurm_trouble", "gpu_use",
               "rank_timing"):
    setattr(Reader, _query, _reads(getattr(Reader, _query)))

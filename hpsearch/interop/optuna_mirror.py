"""Mirror an experiment into an Optuna storage as a study (`hpsearch optuna`, `dashboard`).

The mirror is written through Optuna's public storage API only, into a storage of its own;
hpsearch's store is only read (hpsearch.interop.store_view). Each trial of the study carries
the user attr `hpsearch_trial` (its hpsearch id), so a sync adds a trial once and afterwards
only updates it while the mirror holds it unfinished (RUNNING or WAITING): new intermediate
values and user attrs, then its final state and values. A finished mirror trial is never
changed again (Optuna's storages refuse it). Times: a trial added finished, or added running,
keeps the store's start (and end) times; a trial the mirror saw running gets its
datetime_complete when a later sync sees it end (the store's own times are in the user attrs
hpsearch_started and hpsearch_finished).

Storage argument: an RDB URL (sqlite:///mirror.db, postgresql://..., mysql://...), or a
JournalStorage file: `journal:PATH`, or a path ending in .log or .jsonl.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hpsearch.errors import HpsearchError
from hpsearch.interop import follow as following
from hpsearch.interop.optuna_trials import TRIAL_ATTR, frozen_trials, optuna
from hpsearch.interop.store_view import StoreView
from hpsearch.search import optuna_compat as compat

JOURNAL_PREFIX = "journal:"
JOURNAL_SUFFIXES = (".log", ".jsonl")


@dataclass(frozen=True)
class SyncResult:
    trials: int     # trials of the experiment
    added: int      # new in the mirror
    updated: int    # mirror trials that changed (reports, attrs or state)


def is_journal(url: str) -> bool:
    return url.startswith(JOURNAL_PREFIX) or url.endswith(JOURNAL_SUFFIXES)


def open_storage(url: str):
    """The Optuna storage `url` names (see the module docstring). Raises HpsearchError for a
    value that is neither an RDB URL nor a journal file (exit 2)."""
    o = optuna()
    if is_journal(url):
        path = Path(url[len(JOURNAL_PREFIX):] if url.startswith(JOURNAL_PREFIX) else url)
        if not path.parent.is_dir():
            raise HpsearchError(f"--storage {url}: folder {path.parent} does not exist")
        return o.storages.JournalStorage(o.storages.journal.JournalFileBackend(str(path)))
    if "://" not in url:
        raise HpsearchError(f"--storage {url!r}: expected an RDB URL such as sqlite:///mirror.db, "
                       "or a JournalStorage file: journal:PATH or a path ending in .log or "
                       ".jsonl")
    try:
        return o.storages.RDBStorage(url)
    except Exception as exc:  # noqa: BLE001 - SQLAlchemy's URL and driver errors vary
        raise HpsearchError(f"--storage {url}: Optuna cannot open it: "
                       f"{str(exc).splitlines()[0]}") from None


def sync(view: StoreView, storage, study_name: str) -> SyncResult:
    """Bring the study `study_name` in `storage` up to date with `view` (idempotent)."""
    o = optuna()
    directions = [ob.direction for ob in view.spec.objectives]
    study = o.create_study(storage=storage, study_name=study_name, directions=directions,
                           load_if_exists=True)
    have = [d.name.lower() for d in study.directions]
    if have != directions:
        raise HpsearchError(f"study '{study_name}' in the storage has directions {have}, the "
                       f"experiment {directions}: choose another --study-name")
    mirrored = {t.user_attrs.get(TRIAL_ATTR): t for t in study.get_trials(deepcopy=False)}
    added = updated = 0
    for trial in frozen_trials(view):
        old = mirrored.get(trial.number)
        if old is None:
            study.add_trial(trial)
            added += 1
        elif not old.state.is_finished():
            updated += _update(storage, old, trial)
    return SyncResult(len(view.trials), added, updated)


def _update(storage, old, new) -> int:
    """Carry what changed from `new` to the unfinished mirror trial `old`; 1 if anything."""
    TrialState = optuna().trial.TrialState
    changed = False
    for step, value in new.intermediate_values.items():
        if step not in old.intermediate_values or not _same(old.intermediate_values[step], value):
            storage.set_trial_intermediate_value(compat.trial_id(old), step, value)
            changed = True
    for key, value in new.user_attrs.items():
        if key not in old.user_attrs or not _same(old.user_attrs[key], value):
            storage.set_trial_user_attr(compat.trial_id(old), key, value)
            changed = True
    # A requeued trial (store: queued again) stays RUNNING in the mirror: no way back.
    if new.state != old.state and not (new.state == TrialState.WAITING):
        storage.set_trial_state_values(compat.trial_id(old), new.state, values=new.values)
        changed = True
    return int(changed)


def _same(a, b) -> bool:
    return a == b or (a != a and b != b)  # NaN equals NaN here


def follow(exp_dir: Path, storage, study_name: str, interval: float,
           driver_running: Callable[[], bool], said: Callable[[SyncResult], None],
           stop: Callable[[], bool] = lambda: False) -> SyncResult:
    """Sync every `interval` seconds until the driver has ended (the last sync comes after
    it ended, so it holds the final states), or `stop()` is true. Returns the last sync."""
    return following.follow(exp_dir, lambda view: sync(view, storage, study_name), interval,
                            driver_running, said, stop)

"""Continue an experiment with a fixed spec: `hpsearch resume NAME --spec FILE` (issue 38).

A search stopped by `search.max_failures` for a typo in its command, a missing workdir or an
environment variable is fixed in the spec; the stored spec would fail the same way, and a new
submit of the fixed one is refused as a different spec. Two kinds of change are taken:

- what never changes a trial's result: `resources`, `executor`, `retries`, `placement`, and
  in `search` its `parallel`, `timeout` and `max_failures`;
- what runs the trial, `command`, `workdir`, `env`, `container`, `launcher`, `checkpoints`:
  only while no trial has a result (completed, pruned or paused), as a result of the old
  command beside those of the new would compare two different things.

Anything else (the space, the objective, the strategy, the pruner, the name) makes another
experiment: give it another name. The store keeps the new spec and a `spec_replaced` event
naming the changed sections. Where what runs a trial changed, a failed trial whose every
attempt could not start (`launch_error`: it never ran the command) goes back to `queued`: the
fix is for it too.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from hpsearch.errors import BadInput, Conflict
from hpsearch.spec.model import Spec
from hpsearch.store import rows
from hpsearch.store.lockfile import DriverLock
from hpsearch.store.reader import Reader
from hpsearch.store.runs import STORE_FILE
from hpsearch.store.store import Store

ANY_TIME = ("resources", "executor", "retries", "placement")
SEARCH_ANY_TIME = ("parallel", "timeout", "max_failures")
BEFORE_RESULTS = ("command", "workdir", "env", "container", "launcher", "checkpoints")
WITH_RESULTS = (rows.COMPLETED, rows.PRUNED, rows.PAUSED)


def changed_sections(old: Spec, new: Spec) -> list[str]:
    """The spec's sections that differ, in the order Spec lists them (`search.parallel` for
    a part of search that may change at any time)."""
    changed = []
    for f in dataclasses.fields(Spec):
        if not f.compare or f.name in ("source", "runs_dir"):
            continue
        a, b = getattr(old, f.name), getattr(new, f.name)
        if f.name == "search":
            changed += [f"search.{k}" for k in SEARCH_ANY_TIME if getattr(a, k) != getattr(b, k)]
            a = dataclasses.replace(a, **{k: getattr(b, k) for k in SEARCH_ANY_TIME})
        if a != b:
            changed.append(f.name)
    return changed


def replace_spec(stored: Spec, new: Spec, path: Path) -> Spec:
    """Check that `new` (read from `path`) may replace the experiment's `stored` spec, and
    store it (under the experiment's driver lock: not while its driver runs). Returns the
    spec to resume with. BadInput/Conflict (exit 2) with what may not change, and why."""
    if new.name != stored.name:
        raise BadInput(f"this spec names experiment '{new.name}'; `resume {stored.name} "
                       f"--spec` takes a fixed spec of '{stored.name}'", str(path), key="name")
    changed = changed_sections(stored, new)
    refused = [c for c in changed if c.split(".")[0] not in ANY_TIME + BEFORE_RESULTS
               and not c.startswith("search.")]
    if refused:
        raise Conflict(f"{path} changes {', '.join(refused)} of experiment '{stored.name}': "
                       "that is another search; give it another name and submit it. resume "
                       f"--spec takes changes to {', '.join(ANY_TIME + BEFORE_RESULTS)} and "
                       f"search.{', search.'.join(SEARCH_ANY_TIME)}")
    exp_dir = stored.experiment_dir
    lock = DriverLock(exp_dir)
    lock.acquire(group_readable=stored.share == "group")  # refuses while its driver runs
    try:
        with Store(exp_dir / STORE_FILE) as store:
            _check_no_results(store, [c for c in changed if c in BEFORE_RESULTS], path)
            if changed:
                store.replace_spec(new.text, str(path), str(path.parent),
                                   f"spec replaced from {path}: {', '.join(changed)} changed")
            if any(c in BEFORE_RESULTS for c in changed):
                _requeue_unstarted(store)
    finally:
        lock.release()
    return dataclasses.replace(new, source=path)


def _requeue_unstarted(store: Store) -> None:
    never = [t.id for t in store.trials([rows.FAILED])
             if all(a.get("failure") == "launch_error" for a in store.attempts(t.id))]
    if never:
        store.requeue_failed(never, f"{len(never)} failed trial(s) whose command never "
                                    "started run again with the fixed spec: "
                                    + ", ".join(map(str, never)))


def _check_no_results(store: Reader, changed: list[str], path: Path) -> None:
    if not changed:
        return
    counts = store.state_counts()
    done = {state: counts[state] for state in WITH_RESULTS if counts.get(state)}
    if done:
        held = ", ".join(f"{n} {state}" for state, n in done.items())
        raise Conflict(f"{path} changes {', '.join(changed)}, which the experiment's "
                       f"results depend on, and it holds results ({held}); give the changed "
                       "spec another name, or keep those sections as they were")

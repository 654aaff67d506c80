"""`hpsearch finish`: which paused trials of a promotion search to train to max_resource.

After a promotion search, most trials wait `paused` at a rung with a checkpoint. Finishing
sends chosen ones straight to the last rung: a new segment, written ahead like a promotion,
resumes each from its checkpoint up to max_resource (hpsearch.pruning.promoter). A trial
sent on keeps a mark in its pruner attrs (FINISH: the rung and value it paused at, and the
request), so it still ranks where it paused and is never sent twice: `finish --top 2` run
twice finishes the same 2 trials once.

Pure functions over the store's rows: the command line ranks with them (read-only); the
driver only checks that each trial it is asked to finish is still paused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hpsearch.store import rows

FINISH = "finish"  # pruner attr of a trial `hpsearch finish` sent on: {rung, value, request}


@dataclass(frozen=True)
class Candidate:
    """A trial `finish` may send on: paused at `rung` with `value`; `sent`: an earlier
    `finish` already did (it runs, or ran, to max_resource)."""

    trial: rows.TrialRow
    rung: int
    value: float
    sent: bool


def candidates(trials: list[rows.TrialRow], direction: str) -> list[Candidate]:
    """Paused trials and those an earlier `finish` sent on, best first: by the objective's
    value at the rung they paused at (`direction` respected; NaN last), then the higher rung,
    then the lower id."""
    found = []
    for t in trials:
        mark = t.pruner_attrs.get(FINISH)
        if isinstance(mark, dict):
            found.append(Candidate(t, int(mark["rung"]), float(mark["value"]), True))
        elif t.state == rows.PAUSED:
            rung = int(t.pruner_attrs.get("rung", 0))
            value = t.pruner_attrs.get("rungs", {}).get(str(rung))
            found.append(Candidate(t, rung, math.nan if value is None else float(value),
                                   False))
    sign = -1.0 if direction == "maximize" else 1.0
    return sorted(found, key=lambda c: (math.isnan(c.value), sign * c.value if not
                                        math.isnan(c.value) else 0.0, -c.rung, c.trial.id))


def top(trials: list[rows.TrialRow], direction: str, k: int) -> list[Candidate]:
    """The k best candidates (those already sent on count among them)."""
    return candidates(trials, direction)[:k]


def chosen(trials: list[rows.TrialRow], direction: str, ids: list[int]) -> list[Candidate]:
    """The candidates with these ids, in the order given. ValueError names the first id
    that is no trial, or a trial that is neither paused nor sent on (its state)."""
    by_id = {c.trial.id: c for c in candidates(trials, direction)}
    states = {t.id: t.state for t in trials}
    out = []
    for tid in dict.fromkeys(ids):
        if tid not in states:
            raise ValueError(f"no trial {tid} in this experiment")
        if tid not in by_id:
            raise ValueError(f"trial {tid} is {states[tid]}, not paused at a rung: there is "
                             "nothing to finish")
        out.append(by_id[tid])
    return out

"""Ranking finished trials: top-k for one objective, the Pareto front for several."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, TypeVar

from hpsearch.store import rows


class Ranked(Protocol):
    """What ranking reads of a trial: a TrialRow, or a Scored where only that was read."""

    @property
    def id(self) -> int: ...
    @property
    def state(self) -> str: ...
    @property
    def objective_values(self) -> list | None: ...
    @property
    def values(self) -> list[float]: ...


R = TypeVar("R", bound=Ranked)


@dataclass(frozen=True)
class Scored:
    """A completed trial's id and objective values (Reader.scored): ranking 100,000 trials
    needs no more of their rows; the winners' rows are read after (Reader.trials_by_id)."""

    id: int
    objective_values: list
    state: str = rows.COMPLETED

    @property
    def values(self) -> list[float]:
        return self.objective_values


def _signed(values: list[float], directions: list[str]) -> list[float]:
    """Values turned so that smaller is better in every objective."""
    return [v if d == "minimize" else -v for v, d in zip(values, directions)]


def completed(trials: list[R]) -> list[R]:
    return [t for t in trials if t.state == rows.COMPLETED and t.objective_values]


def top_k(trials: list[R], directions: list[str], k: int) -> list[R]:
    """The k best completed trials by the first objective (ties: lower trial id first)."""
    done = completed(trials)
    return sorted(done, key=lambda t: (_signed(t.values, directions)[0], t.id))[:k]


def pareto_front(trials: list[R], directions: list[str]) -> list[R]:
    """Completed trials that no other completed trial dominates, by trial id."""
    done = completed(trials)
    points = [(_signed(t.values, directions), t) for t in done]
    front: list[R] = []
    for p, t in points:
        dominated = any(all(a <= b for a, b in zip(q, p)) and any(a < b for a, b in zip(q, p))
                        for q, _ in points)
        if not dominated:
            front.append(t)
    return front


def best(trials: list[R], directions: list[str], k: int = 1) -> list[R]:
    """Top-k for one objective; the whole Pareto front for several."""
    if len(directions) > 1:
        return pareto_front(trials, directions)
    return top_k(trials, directions, k)


def best_of(reader, directions: list[str], k: int = 1) -> list[Scored]:
    """best() of the trials in a store (an open hpsearch.store.reader.Reader), from their ids
    and values only: for one objective SQLite ranks them (Reader.top_scored; best() then
    ranks its few), so 100,000 trials are not parsed in Python."""
    if len(directions) > 1:
        found = reader.scored()
    else:
        found = reader.top_scored(1 if directions[0] == "minimize" else -1, k)
    return best([Scored(*s) for s in found], directions, k)


def record(trial: rows.TrialRow, metrics: list[str]) -> dict:
    """A trial as `best --json` and `submit --best-out` write it."""
    return {"trial": trial.id, "values": dict(zip(metrics, trial.values)),
            "params": trial.params, "trial_dir": trial.trial_dir}


def best_checkpoint(saved: list, direction: str):
    """A finished trial's checkpoint to use, from its checkpoint rows: the best objective
    metric at its step, the highest step among equals (and when none has a metric); None if
    it kept none."""
    sign = 1.0 if direction == "minimize" else -1.0
    return min(saved, key=lambda c: (c.metric is None, sign * (c.metric or 0.0), -c.step),
               default=None)


def checkpoint_paths(trials: list[rows.TrialRow], saved: list, direction: str) -> dict:
    """trial id -> the path of its checkpoint to use (or None), for `trials`."""
    found = {t.id: best_checkpoint([c for c in saved if c.trial == t.id], direction)
             for t in trials}
    return {tid: c and c.path for tid, c in found.items()}

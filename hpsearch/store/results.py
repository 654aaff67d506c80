"""Ranking finished trials: top-k for one objective, the Pareto front for several."""

from __future__ import annotations

from hpsearch.store import rows


def _signed(values: list[float], directions: list[str]) -> list[float]:
    """Values turned so that smaller is better in every objective."""
    return [v if d == "minimize" else -v for v, d in zip(values, directions)]


def completed(trials: list[rows.TrialRow]) -> list[rows.TrialRow]:
    return [t for t in trials if t.state == rows.COMPLETED and t.objective_values]


def top_k(trials: list[rows.TrialRow], directions: list[str], k: int) -> list[rows.TrialRow]:
    """The k best completed trials by the first objective (ties: lower trial id first)."""
    done = completed(trials)
    return sorted(done, key=lambda t: (_signed(t.values, directions)[0], t.id))[:k]


def pareto_front(trials: list[rows.TrialRow], directions: list[str]) -> list[rows.TrialRow]:
    """Completed trials that no other completed trial dominates, by trial id."""
    done = completed(trials)
    points = [(_signed(t.values, directions), t) for t in done]
    front = []
    for p, t in points:
        dominated = any(all(a <= b for a, b in zip(q, p)) and any(a < b for a, b in zip(q, p))
                        for q, _ in points)
        if not dominated:
            front.append(t)
    return front


def best(trials: list[rows.TrialRow], directions: list[str], k: int = 1) -> list[rows.TrialRow]:
    """Top-k for one objective; the whole Pareto front for several."""
    if len(directions) > 1:
        return pareto_front(trials, directions)
    return top_k(trials, directions, k)


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

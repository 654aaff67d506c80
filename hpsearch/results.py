"""Ranking finished trials: top-k for one objective, the Pareto front for several."""

from __future__ import annotations

from hpsearch.store import rows as r


def _signed(values: list[float], directions: list[str]) -> list[float]:
    """Values turned so that smaller is better in every objective."""
    return [v if d == "minimize" else -v for v, d in zip(values, directions)]


def completed(trials: list[r.TrialRow]) -> list[r.TrialRow]:
    return [t for t in trials if t.state == r.COMPLETED and t.objective_values]


def top_k(trials: list[r.TrialRow], directions: list[str], k: int) -> list[r.TrialRow]:
    """The k best completed trials by the first objective (ties: lower trial id first)."""
    done = completed(trials)
    return sorted(done, key=lambda t: (_signed(t.objective_values, directions)[0], t.id))[:k]


def pareto_front(trials: list[r.TrialRow], directions: list[str]) -> list[r.TrialRow]:
    """Completed trials that no other completed trial dominates, by trial id."""
    done = completed(trials)
    points = [(_signed(t.objective_values, directions), t) for t in done]
    front = []
    for p, t in points:
        dominated = any(all(a <= b for a, b in zip(q, p)) and any(a < b for a, b in zip(q, p))
                        for q, _ in points)
        if not dominated:
            front.append(t)
    return front


def best(trials: list[r.TrialRow], directions: list[str], k: int = 1) -> list[r.TrialRow]:
    """Top-k for one objective; the whole Pareto front for several."""
    if len(directions) > 1:
        return pareto_front(trials, directions)
    return top_k(trials, directions, k)


def record(trial: r.TrialRow, metrics: list[str]) -> dict:
    """A trial as `best --json` and `submit --best-out` write it."""
    return {"trial": trial.id, "values": dict(zip(metrics, trial.objective_values)),
            "params": trial.params, "trial_dir": trial.trial_dir}

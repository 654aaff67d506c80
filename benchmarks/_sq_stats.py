"""Statistics of the search-quality benchmark: evaluations to a target regret, with censoring.

A run that never reaches the target within its T evaluations is censored: its count is
recorded as infinity, i.e. "more than T". Quantiles interpolate linearly between order
statistics; one that touches a censored run is itself censored and prints as ">T".
"""

from __future__ import annotations

import math


def best_so_far(regrets: list[float]) -> list[float]:
    """The running minimum: after each evaluation, the best regret found so far."""
    out, best = [], math.inf
    for value in regrets:
        best = min(best, value)
        out.append(best)
    return out


def evals_to_target(regrets: list[float], target: float) -> float:
    """How many evaluations the run needed to reach regret <= target (1-based), or inf if it
    never did."""
    for n, value in enumerate(regrets, start=1):
        if value <= target:
            return float(n)
    return math.inf


def quantile(values: list[float], q: float) -> float:
    """The q-quantile (0 <= q <= 1) by linear interpolation between the order statistics
    (numpy's default); inf if either neighbour is inf (censored)."""
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    if math.isinf(ordered[lo]) or math.isinf(ordered[hi]):
        return math.inf
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def upper_median(values: list[float]) -> float:
    """The (n//2 + 1)-th smallest of n values: more than half of them are <= it."""
    return sorted(values)[len(values) // 2]


def median(values: list[float]) -> float:
    return quantile(values, 0.5)


def fmt_evals(value: float, cap: int) -> str:
    """An evaluation count: whole numbers as such, halves from an even median as .5, and
    censored ones as >cap."""
    if math.isinf(value):
        return f">{cap}"
    return f"{value:.0f}" if value == int(value) else f"{value:.1f}"


def fmt_regret(value: float) -> str:
    return f"{value:.3g}" if value >= 1e-3 else f"{value:.1e}"


def ratio_text(method: float, random: float, cap: int) -> str:
    """method / random as text: '>x' (x = cap / random) when the method's count is censored,
    '?' when random's is (the ratio is then unknown)."""
    if math.isinf(random):
        return "?"
    if math.isinf(method):
        return f">{cap / random:.2f}"
    return f"{method / random:.2f}"

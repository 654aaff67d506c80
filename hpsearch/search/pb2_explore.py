"""PB2's explore (Parker-Holder et al. 2020, "Provably Efficient Online Hyperparameter
Optimization with Population-Based Bandits"): a member that exploits another takes its
checkpoint as in PBT, but its new parameters are chosen by a GP-bandit, not by random
perturbation.

The model: every boundary the population has reached (pbt_policy.Boundary) is a point
(step, the numeric mutable parameters it trained with, scaled to [0, 1] over their bounds,
log ones in log space) with its reward, the change of the objective over that segment
(score minus the score the segment started from; negated where the objective is
minimised), standardised. A Gaussian process of scikit-learn (a well-kept library; an RBF
kernel over (step, parameters) plus a white-noise term, its hyperparameters fitted by
maximum likelihood with a seeded optimizer) is fitted to them. The new parameters are the
best of 512 candidates drawn uniformly in the bounds (the decision's seeded generator) by
the upper confidence bound mean + 2 * stddev at the member's next step; integers and steps
are kept on their grid. As in Ray's PB2, only numbers are modelled: a categorical mutable
parameter is perturbed or resampled as PBT does, and with fewer than 3 boundaries seen (no
model yet) all of them are. The data are taken in (step, member) order, so a resumed search
fits the same model.
"""

from __future__ import annotations

import math
import random
import warnings
from typing import TYPE_CHECKING, Any

from hpsearch.search.pbt_policy import _fit

if TYPE_CHECKING:
    from hpsearch.search.pbt_policy import Population
    from hpsearch.spec.model import Param

CANDIDATES = 512
KAPPA = 2.0          # the UCB's weight of the standard deviation
MIN_POINTS = 3       # boundaries with a reward needed before the model is used


def explore(population: Population, member: int, params: dict[str, Any],
            rng: random.Random) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The donor's `params` with each numeric mutable parameter chosen by GP-UCB, the
    others explored as PBT does (pbt_policy.Population.explore)."""
    numeric = [p for p in population.space if p.name in population.settings.mutations
               and p.name in params and p.kind in ("float", "int")]
    points = sorted((b for b in population.history if b.before is not None),
                    key=lambda b: (b.step, b.member))
    out, resampled = population.explore(params, rng)  # categoricals (and, for now, all)
    if not numeric or len(points) < MIN_POINTS:
        return out, resampled
    step = (population.members[member].step or 0) + 1
    chosen = _ucb(population, numeric, points, step, rng)
    out.update({p.name: value for p, value in zip(numeric, chosen)})
    return out, tuple(name for name in resampled if name not in {p.name for p in numeric})


def _ucb(population: Population, numeric: list[Param], points: list, step: int,
         rng: random.Random) -> list[Any]:
    import numpy as np
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

    horizon = max(population.settings.max_resource, 1)
    sign = 1.0 if population.settings.maximize else -1.0
    x = np.array([[b.step / horizon] + [_unit(p, b.params.get(p.name, p.low)) for p in numeric]
                  for b in points])
    y = np.array([sign * (b.score - b.before) for b in points])
    if not np.all(np.isfinite(y)):
        keep = np.isfinite(y)
        x, y = x[keep], y[keep]
    y = (y - y.mean()) / (y.std() or 1.0)
    kernel = ConstantKernel(1.0) * RBF(length_scale=[1.0] * x.shape[1]) + WhiteKernel(0.1)
    gp = GaussianProcessRegressor(kernel=kernel, normalize_y=False,
                                  random_state=rng.randrange(2 ** 31))
    with warnings.catch_warnings():  # a length scale at its bound: said by sklearn, not news
        warnings.simplefilter("ignore", ConvergenceWarning)
        gp.fit(x, y)
    units = np.array([[rng.random() for _ in numeric] for _ in range(CANDIDATES)])
    candidates = np.hstack([np.full((CANDIDATES, 1), step / horizon), units])
    mean, std = gp.predict(candidates, return_std=True)
    best = units[int(np.argmax(mean + KAPPA * std))]
    return [_value(p, u) for p, u in zip(numeric, best)]


def _unit(p: Param, value: Any) -> float:
    """`value` of `p` on [0, 1] over its bounds (log space for a log parameter)."""
    low, high, v = float(p.low), float(p.high), float(value)  # type: ignore[arg-type]
    if p.log:
        low, high, v = math.log(low), math.log(high), math.log(max(v, float(p.low)))  # type: ignore[arg-type]
    return 0.0 if high == low else min(max((v - low) / (high - low), 0.0), 1.0)


def _value(p: Param, u: float) -> Any:
    """The value of `p` at `u` on [0, 1] (the inverse of _unit), on p's grid."""
    low, high = float(p.low), float(p.high)  # type: ignore[arg-type]
    x = math.exp(math.log(low) + u * (math.log(high) - math.log(low))) if p.log else \
        low + u * (high - low)
    return _fit(p, x)

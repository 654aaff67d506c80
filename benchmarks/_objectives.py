"""Test functions of the search-quality benchmark, light enough for a trial process to import.

Every function is minimized over a box, and its known optimum `f_opt` makes the regret
`y - f_opt` (0 at the optimum). The parameters are named x0, x1, ...

- BBOB functions (the COCO / IOHprofiler noiseless suite) come from `ioh` (IOHprofiler's
  maintained package, `pip install ioh`; the pyproject extra `bench`): instance 1 of each, on
  its box [-5, 5]^d, with the optimum ioh reports for that instance.
- Branin and Hartmann6 are written here from their standard definitions (Surjanovic & Bingham,
  Virtual Library of Simulation Experiments; the constants of Dixon & Szego 1978), because no
  maintained package offers them without heavy dependencies: BoTorch needs torch,
  mf-prior-bench (its MF-Hartmann) pins numpy < 2 and brings pandas, pyarrow and ConfigSpace,
  syne-tune brings xgboost and statsmodels. Their optima are the known constants below
  (tests/test_bench_search_quality.py checks each at its known minimizer).

Only `math` is imported at module level; ioh is imported when a BBOB function is evaluated
or described, so a Branin trial imports nothing else.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Function:
    """One test function: its name in the tables, dimension, box and known optimum."""

    name: str
    dim: int
    low: tuple[float, ...]
    high: tuple[float, ...]
    f_opt: float
    source: str


# Branin-Hoo, 2-d: three global minima, f = 5 / (4 pi) at (-pi, 12.275), (pi, 2.275), (9.42478, 2.475).
BRANIN_OPT = 5.0 / (4.0 * math.pi)
BRANIN_MINIMIZERS = ((-math.pi, 12.275), (math.pi, 2.275), (9.42478, 2.475))


def branin(x: list[float]) -> float:
    x1, x2 = x
    b, c, t = 5.1 / (4.0 * math.pi ** 2), 5.0 / math.pi, 1.0 / (8.0 * math.pi)
    return (x2 - b * x1 ** 2 + c * x1 - 6.0) ** 2 + 10.0 * (1.0 - t) * math.cos(x1) + 10.0


# Hartmann6 on [0, 1]^6: one global minimum, -3.32237 at the point below (value there to 1e-12).
HARTMANN6_OPT = -3.322368011415515
HARTMANN6_MINIMIZER = (0.20169, 0.150011, 0.476874, 0.275332, 0.311652, 0.6573)
_H6_ALPHA = (1.0, 1.2, 3.0, 3.2)
_H6_A = ((10.0, 3.0, 17.0, 3.5, 1.7, 8.0),
         (0.05, 10.0, 17.0, 0.1, 8.0, 14.0),
         (3.0, 3.5, 1.7, 10.0, 17.0, 8.0),
         (17.0, 8.0, 0.05, 10.0, 0.1, 14.0))
_H6_P = ((0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886),
         (0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991),
         (0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650),
         (0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381))


def hartmann6(x: list[float]) -> float:
    return -sum(alpha * math.exp(-sum(a * (xj - p) ** 2 for a, xj, p in zip(row, x, prow)))
                for alpha, row, prow in zip(_H6_ALPHA, _H6_A, _H6_P))


# BBOB functions: name -> (function id, dimension). Unimodal separable, ill-conditioned,
# multimodal with global structure, multimodal with weak structure.
BBOB = {
    "bbob-f1-sphere-5d": (1, 5),
    "bbob-f10-ellipsoid-4d": (10, 4),
    "bbob-f15-rastrigin-3d": (15, 3),
    "bbob-f21-gallagher101-4d": (21, 4),
}
BBOB_INSTANCE = 1

HANDWRITTEN: dict[str, tuple[Callable[[list[float]], float], Function]] = {
    "branin": (branin, Function("branin", 2, (-5.0, 0.0), (10.0, 15.0), BRANIN_OPT,
                                "standard definition (written here)")),
    "hartmann6": (hartmann6, Function("hartmann6", 6, (0.0,) * 6, (1.0,) * 6, HARTMANN6_OPT,
                                      "standard definition (written here)")),
}
NAMES = ("branin", "hartmann6", *BBOB)


def _bbob_problem(name: str):
    import ioh  # only BBOB trials pay for it

    fid, dim = BBOB[name]
    return ioh.get_problem(fid, instance=BBOB_INSTANCE, dimension=dim,
                           problem_class=ioh.ProblemClass.BBOB)


def describe(name: str) -> Function:
    """The function called `name` (one of NAMES); KeyError for any other name."""
    if name in HANDWRITTEN:
        return HANDWRITTEN[name][1]
    problem = _bbob_problem(name)
    dim = BBOB[name][1]
    return Function(name, dim, tuple(float(v) for v in problem.bounds.lb),
                    tuple(float(v) for v in problem.bounds.ub), float(problem.optimum.y),
                    f"ioh BBOB f{BBOB[name][0]} instance {BBOB_INSTANCE}")


def evaluate(name: str, x: list[float]) -> float:
    """The value of function `name` at x (len(x) == its dimension)."""
    if name in HANDWRITTEN:
        return HANDWRITTEN[name][0](x)
    return float(_bbob_problem(name)(x))

"""The learning curves of benchmarks/peers.py: one deterministic function of (config, step).

Standard library only: it is imported by hpsearch's trial processes, by the Optuna objective,
by Ray Tune's trainable and by Syne Tune's training script alike, each in its own
interpreter, and all of them must see the same curves.

A configuration is an index into a fixed list of CONFIGS (81) curves drawn once from a seeded
`random.Random(CURVE_SEED)`; a workload with fewer configurations takes the first ones. Curve i
at step s (0-based) of a workload of `steps` steps, t = (s + 1) / steps:

    loss(i, s) = final_i + amp_i * (exp(-rate_i * t) - exp(-rate_i))

It falls monotonically to final_i at the last step; curves with a low rate start high and
cross faster ones, so judging at low rungs makes some mistakes, as on real training.

Every step of every tool goes through `run_steps`: it sleeps the step, computes the value and
appends one line `time pid config step value` to the shared steps log (O_APPEND, one short
write: lines from concurrent processes never interleave). The benchmark reads steps run,
trial processes started (distinct pids), best value and time to target from that log, the
same way for every tool.
"""

from __future__ import annotations

import math
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

CONFIGS = 81
CURVE_SEED = 2024


def _draw() -> list[tuple[float, float, float]]:
    rng = random.Random(CURVE_SEED)
    curves = []
    for _ in range(CONFIGS):
        final = 0.05 + 0.6 * rng.random() ** 1.5
        amp = 0.5 + 1.5 * rng.random()
        rate = 1.0 + 6.0 * rng.random()
        curves.append((final, amp, rate))
    return curves


CURVES = _draw()


@dataclass(frozen=True)
class Workload:
    configs: int          # the first `configs` of CURVES
    steps: int            # a full trial's steps (max_resource)
    step_seconds: float   # each step sleeps this long

    def args(self) -> list[str]:
        return [str(self.configs), str(self.steps), repr(self.step_seconds)]

    @classmethod
    def from_args(cls, values: list[str]) -> Workload:
        return cls(int(values[0]), int(values[1]), float(values[2]))

    def best_final(self) -> float:
        """The true best final loss over the workload's configurations."""
        return min(loss(i, self.steps - 1, self.steps) for i in range(self.configs))


def loss(index: int, step: int, steps: int) -> float:
    final, amp, rate = CURVES[index]
    t = (step + 1) / steps
    return final + amp * (math.exp(-rate * t) - math.exp(-rate))


def run_steps(workload: Workload, index: int, start: int, end: int, log: str,
              report: Callable[[int, float], None],
              should_stop: Callable[[], bool] = lambda: False) -> float | None:
    """Run steps start..end-1 of config `index`: sleep, compute, log, report(step, value);
    leave early when should_stop() says so after a report. Returns the last value."""
    value = None
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        for step in range(start, end):
            time.sleep(workload.step_seconds)
            value = loss(index, step, workload.steps)
            os.write(fd, f"{time.time():.6f} {os.getpid()} {index} {step} {value!r}\n".encode())
            report(step, value)
            if should_stop():
                break
    finally:
        os.close(fd)
    return value


@dataclass(frozen=True)
class LogStats:
    steps_run: int
    processes: int          # distinct pids that ran steps, `exclude` left out
    best: float             # best value reported at the last step (nan: none)
    to_target: float        # seconds from `began` to the first value <= target (inf: never)


def read_log(log: str, workload: Workload, began: float, target: float,
             exclude: int | None = None) -> LogStats:
    steps_run, pids, best, first = 0, set(), math.inf, math.inf
    try:
        with open(log) as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        lines = []
    for line in lines:
        when, pid, _index, step, value = line.split()
        steps_run += 1
        if int(pid) != exclude:
            pids.add(int(pid))
        v = float(value)
        if int(step) == workload.steps - 1:
            best = min(best, v)
        if v <= target:
            first = min(first, float(when) - began)
    return LogStats(steps_run, len(pids), best if best < math.inf else math.nan, first)

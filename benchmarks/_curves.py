"""The learning curves of benchmarks/peers.py: one deterministic function of (config, step).

Standard library only: it is imported by hpsearch's trial processes, by the Optuna objective,
by Ray Tune's trainable, by Syne Tune's training script and by the hydra app alike, each in
its own interpreter, and all of them must see the same curves.

A configuration is an index into a fixed list of CONFIGS (81) curves drawn once from a seeded
`random.Random(CURVE_SEED)`; a workload with fewer configurations takes the first ones. Curve i
at step s (0-based) of a workload of `steps` steps, t = (s + 1) / steps:

    loss(i, s) = final_i + amp_i * (exp(-rate_i * t) - exp(-rate_i))

It falls monotonically to final_i at the last step; curves with a low rate start high and
cross faster ones, so judging at low rungs makes some mistakes, as on real training.

The step log: every step of every tool goes through `run_steps`, which sleeps the step,
computes the value and appends one line to the run's step log, one file for all the rows of
a benchmark run (O_APPEND, one short write a line: lines from concurrent processes never
interleave, and the file's order is the order they were written in):

    TIME ROW PID CONFIG step STEP VALUE     a step ran (ROW: the row's key, e.g. pilots-stop)
    TIME ROW PID CONFIG left STEP WHY       the process left the configuration after STEP
                                            of its own accord: WHY is `pruned` (the tool said
                                            stop: an hpsearch STOP file, Optuna's
                                            should_prune()), `paused` (the segment's budget,
                                            hpsearch promotion) or the signal that stopped it
                                            (`TERM`: a cancel or wind-down, not a verdict)
    TIME ROW PID CONFIG told STEP WHY       during the step after STEP, the tool's verdict
                                            came (hpsearch's STOP file, looked for every
                                            5 ms while a step sleeps); the step still runs
                                            to its end, as a training loop that asks
                                            should_stop() once a step does
    TIME ROW PID CONFIG judged STEP WHY     written after the run, by the kill runs of
                                            benchmarks/_peers_kill.py only: the tool's
                                            verdict (hpsearch's STOP file, TIME its mtime)
                                            came after PID's last line, STEP, when PID was
                                            already dead with the node; the verdict judged
                                            the step PID reported, so nothing was lost

A process that is killed writes nothing more: a `told` line is what says that a trial the
tool stopped by killing it (hpsearch's pilots stop a trial on another node through srun,
which kills it outright) was stopped, not lost. `read_log` reads every column of every tool
from this log alone, never from a tool's own store: steps run, processes, best value, time
to target, configurations lost and steps repeated.
"""

from __future__ import annotations

import math
import os
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

CONFIGS = 81
CURVE_SEED = 2024
# what a `left`, `told` or `judged` line may say for the configuration to count as ended: the tool's
# verdict
VERDICTS = ("pruned", "paused")
TOLD_POLL = 0.005  # seconds between looks for the tool's verdict while a step sleeps


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


@dataclass(frozen=True)
class StepLog:
    """Where a row's steps are logged: the run's step log, and the row's key (one word)."""
    path: str
    row: str


def loss(index: int, step: int, steps: int) -> float:
    final, amp, rate = CURVES[index]
    t = (step + 1) / steps
    return final + amp * (math.exp(-rate * t) - math.exp(-rate))


def run_steps(workload: Workload, index: int, start: int, end: int, log: StepLog,
              report: Callable[[int, float], None],
              stop: Callable[[], str | None] = lambda: None,
              told: Callable[[], str | None] | None = None) -> float | None:
    """Run steps start..end-1 of config `index`: sleep, compute, log, report(step, value);
    leave early when stop() gives a reason after a report (logged as a `left` line, as is
    the end of a segment short of the last step: `paused`). While a step sleeps, told()
    (if given) is asked every TOLD_POLL for the tool's verdict, logged once as a `told`
    line. Returns the last value."""
    value, left, step, said = None, None, start - 1, told is None
    fd = os.open(log.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    head = f"{log.row} {os.getpid()} {index}"
    try:
        for step in range(start, end):
            deadline = time.monotonic() + workload.step_seconds
            while (rest := deadline - time.monotonic()) > 0:
                time.sleep(rest if said else min(rest, TOLD_POLL))
                verdict = None if said else told()
                if verdict:
                    os.write(fd, f"{time.time():.6f} {head} told {step - 1} {verdict}\n".encode())
                    said = True
            value = loss(index, step, workload.steps)
            os.write(fd, f"{time.time():.6f} {head} step {step} {value!r}\n".encode())
            report(step, value)
            left = stop()
            if left:
                break
        if left is None and end < workload.steps:
            left = "paused"
        if left:
            os.write(fd, f"{time.time():.6f} {head} left {step} {left}\n".encode())
    finally:
        os.close(fd)
    return value


class Line(NamedTuple):
    time: float
    row: str
    pid: int
    config: int
    kind: str     # "step", "left" or "told"
    step: int
    detail: str   # the value (step), or why it left


def lines(path: str, row: str) -> list[Line]:
    """The row's lines of the step log, in the order they were written."""
    try:
        with open(path) as f:
            text = f.read().splitlines()
    except FileNotFoundError:
        return []
    out = []
    for raw in text:
        when, key, pid, config, kind, step, detail = raw.split()
        if key == row:
            out.append(Line(float(when), key, int(pid), int(config), kind, int(step), detail))
    return out


@dataclass(frozen=True)
class LogStats:
    steps_run: int
    processes: int          # distinct pids that ran steps, `exclude` left out
    best: float             # best value reported at the last step (nan: none)
    to_target: float        # seconds from `began` to the first value <= target (inf: never)
    lost: int               # configurations that did not end (see read_log)
    repeated: int           # steps run again: a (configuration, step) logged more than once
    repeated_configs: int   # the configurations those belong to


def read_log(log: StepLog, workload: Workload, began: float, target: float,
             exclude: int | None = None) -> LogStats:
    """Every column of the row `log.row`, from the step log alone. A configuration is lost
    when it never ran its last step (a signal that came after it, a `left ... TERM` line,
    takes nothing away), and the process
    that wrote that line logged no verdict for it (a `left` or `told` line naming one of
    VERDICTS, or a `judged` line for it): its process died, or was stopped by a signal, and
    nothing ran it on."""
    steps, pids, last, verdicts = Counter(), set(), {}, set()
    best, first = math.inf, math.inf
    for line in lines(log.path, log.row):
        last[line.config] = line
        if line.kind != "step":
            if line.detail in VERDICTS:
                verdicts.add((line.pid, line.config))
            continue
        steps[line.config, line.step] += 1
        if line.pid != exclude:
            pids.add(line.pid)
        value = float(line.detail)
        if line.step == workload.steps - 1:
            best = min(best, value)
        if value <= target:
            first = min(first, line.time - began)
    ended = [c for c, line in last.items()
             if (c, workload.steps - 1) in steps or (line.pid, c) in verdicts]
    again = {key: n - 1 for key, n in steps.items() if n > 1}
    return LogStats(sum(steps.values()), len(pids), best if best < math.inf else math.nan,
                    first, workload.configs - len(ended), sum(again.values()),
                    len({config for config, _ in again}))

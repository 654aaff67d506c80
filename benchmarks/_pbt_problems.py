"""The two problems of benchmarks/pbt.py and the spec of each of its methods on them.

- `toy`: the PBT paper's toy (examples/pbt_toy/train.py), steps of a gradient ascent,
  h = (h0, h1) in [0, 1]^2, objective Q (the paper's 1.2 - |theta|^2);
- `digits`: the DDP example's MLP on scikit-learn's digits (examples/digits_ddp/train.py
  --pbt, one process, CPU), epochs, lr in [1e-4, 0.1] (log) with SGD and momentum, the rest
  fixed; objective val_acc. Each segment is forked from a server that imported torch
  (executor.warm), as in examples/digits_ddp/pbt.yaml.

Every method gets a budget of `members x steps` steps (epochs):

- `pbt` and `pb2`: a population of `members`, each trained to `steps`;
- `random`: `members` trials of `steps` each, h fixed;
- `asha`: random search with ASHA promoting (pause and resume from the checkpoint) over the
  rungs steps/8, steps/4, steps/2, steps (reduction factor 2); a promotion spends no step
  twice. If 1/2 of a rung went on, a trial would cost `asha_cost()` steps on average (12.5
  of 40); asynchronous ASHA promotes more while a rung is nearly empty, and the search ends
  by promoting the best paused trial to the top, so it spends about ASYNC_SPEND times that
  (on the toy at 40 steps, seeds 0-2: 13 trials trained 230 steps where 160 were meant, 10
  trials 130-180). It gets round(members x steps / asha_cost() / ASYNC_SPEND) trials, and
  the steps it really trained are counted from the store (`steps_trained`) and printed
  beside every row's.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from hpsearch.pruning.promotion import ladder
from hpsearch.store.reader import Reader
from hpsearch.store.runs import STORE_FILE

ROOT = Path(__file__).resolve().parent.parent
ETA = 2  # ASHA's reduction factor
ASYNC_SPEND = 1.3  # steps asynchronous ASHA spends per synchronous step (above)


@dataclass(frozen=True)
class Problem:
    name: str
    command: str            # the trial's command, {steps} the steps a member runs in all
    metric: str
    space: dict
    steps: int              # max_resource: steps (epochs) a member runs
    interval: int           # perturbation_interval
    executor: dict = field(default_factory=lambda: {"type": "local"})
    env: dict = field(default_factory=dict)

    def asha_rungs(self) -> list[int]:
        return ladder(max(1, self.steps // 8), self.steps, ETA, 0)

    def asha_cost(self) -> float:
        """Expected steps of one ASHA trial: the first rung, and each next rung's extra
        steps for the 1/ETA^k of the trials that get there."""
        rungs = self.asha_rungs()
        return rungs[0] + sum((high - low) / ETA ** (k + 1)
                              for k, (low, high) in enumerate(zip(rungs, rungs[1:])))

    def asha_trials(self, members: int) -> int:
        return max(1, round(members * self.steps / self.asha_cost() / ASYNC_SPEND))


def toy(steps: int, interval: int) -> Problem:
    return Problem("toy", f"{sys.executable} {ROOT / 'examples' / 'pbt_toy' / 'train.py'} "
                          "{steps}", "Q",
                   {"h0": {"type": "float", "low": 0.0, "high": 1.0},
                    "h1": {"type": "float", "low": 0.0, "high": 1.0}}, steps, interval)


def digits(epochs: int, interval: int) -> Problem:
    train = ROOT / "examples" / "digits_ddp" / "train.py"
    return Problem(
        "digits", f"{{python}} {train} --pbt --lr {{lr}} --width 64 --batch-size 32 "
                  "--optimizer sgd --epochs {steps} --seed 0", "val_acc",
        {"lr": {"low": 1e-4, "high": 1e-1, "log": True}}, epochs, interval,
        {"type": "local", "timeout": "5m",
         "warm": ["numpy", "torch", "torch.distributed", "torch.nn.parallel", "torch._dynamo",
                  "sklearn.datasets"]},
        {"OMP_NUM_THREADS": "1"})


def spec(problem: Problem, name: str, method: str, members: int, seed: int,
         enqueue: list | None = None) -> dict:
    """The spec of `method` (pbt, pb2, random, asha) with the budget of `members` members."""
    trials = problem.asha_trials(members) if method == "asha" else members
    search: dict = {"strategy": "random" if method == "asha" else method, "trials": trials,
                    "parallel": 2, "seed": seed, "space": problem.space}
    if method in ("pbt", "pb2"):
        search.update(population=members, perturbation_interval=problem.interval,
                      max_resource=problem.steps)
    if method == "asha":
        rungs = problem.asha_rungs()
        search["pruner"] = {"type": "asha", "mode": "promotion", "min_resource": rungs[0],
                            "reduction_factor": ETA, "max_resource": problem.steps}
    if enqueue:
        search["enqueue"] = enqueue
    found = {"name": name, "command": problem.command.replace("{steps}", str(problem.steps)),
             "search": search, "objective": {"metric": problem.metric, "direction": "maximize"},
             "executor": problem.executor}
    if problem.env:
        found["env"] = problem.env
    return found


def best(experiment_dir: Path) -> float:
    """The best objective of the search's completed trials (a member's last score)."""
    with Reader(experiment_dir / STORE_FILE) as reader:
        return max(t.objective_values[0] for t in reader.trials() if t.objective_values)


def steps_trained(experiment_dir: Path, steps: int) -> int:
    """Steps (epochs) the search trained, over every attempt: each runs from where its
    trial's checkpoint stood to its budget (`steps` without one). A PBT member that took a
    donor's checkpoint goes on from the donor's step (its lineage), not its own."""
    total = 0
    with Reader(experiment_dir / STORE_FILE) as reader:
        for trial in reader.trials():
            taken = {e["at_step"]: e["donor_step"]
                     for e in trial.pruner_attrs.get("pbt", {}).get("lineage", [])}
            start = 0
            for attempt in reader.attempts(trial.id):
                end = attempt.get("budget") or steps
                total += max(0, end - start)
                start = taken.get(end - 1, end - 1) + 1
    return total

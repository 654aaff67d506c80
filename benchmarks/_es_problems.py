"""Problems and methods of the early-stopping benchmark, as hpsearch specs.

A problem is a training whose objective is reported once per step (one step = one unit of
resource) up to `steps`; a method is a `search.pruner` value (none: every trial runs all its
steps). Each (problem, method, seed) is one spec: the same sampler and seed for every method,
so with `random` every method gets the same configurations in the same order.

- mfh3 / mfh6: MF-Hartmann (3-d / 6-d) from mf-prior-bench, a learning curve per point of
  [0, 1]^d (benchmarks/_es_trial.py). mf-prior-bench 1.10 pins numpy < 2 and needs
  ConfigSpace, pandas and pyarrow, which this project's environment (numpy 2) cannot take;
  its MF-Hartmann generator itself needs only numpy, so it is installed without its
  dependencies (`pip install --no-deps mf-prior-bench==1.10.0`) and that one file is loaded
  by path (`generators_file`).
- digits: examples/digits_ddp/train.py, one process on the CPU (no torchrun), small widths:
  the real training of the DDP example, resumed from its checkpoints in promotion mode.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TRIAL_SCRIPT = HERE / "_es_trial.py"
DIGITS_SCRIPT = ROOT / "examples" / "digits_ddp" / "train.py"

MF_FUNCTIONS = {"mfh3": 3, "mfh6": 6}
# mf-prior-bench's MFHartmannBenchmark default (bias, noise): its "mfh3" and "mfh6".
MF_BIAS, MF_NOISE = 0.5, 0.1
ETA = 3  # the reduction factor of every successive-halving method

METHODS = ("none", "median", "asha", "asha-promo", "hyperband", "hyperband-promo")
METHOD_TEXT = {
    "none": "no pruning",
    "median": "median (stop)",
    "asha": "ASHA (stop)",
    "asha-promo": "ASHA (promotion)",
    "hyperband": "Hyperband (stop)",
    "hyperband-promo": "Hyperband (promotion)",
}


@dataclass(frozen=True)
class Problem:
    """One problem: how long a full trial is and what its objective is."""

    name: str
    steps: int          # a full trial's resource (steps = epochs); max_resource
    trials: int         # trials per search (every method the same)
    metric: str
    direction: str      # minimize | maximize
    tolerance: float    # "the same best value": within this of no pruning's best
    step_seconds: float  # each step lasts at least this long (sleep), so the pruner sees it


@dataclass(frozen=True)
class Job:
    """One search: a problem, a method, a seed."""

    problem: Problem
    method: str
    seed: int
    sampler: str
    parallel: int
    runs_dir: Path
    warm: bool = False  # digits: segments forked from a warm server (executor.warm)


def pruner(method: str, steps: int) -> dict | None:
    """The search.pruner mapping of a method (None: no pruner)."""
    return {
        "none": None,
        "median": {"type": "median"},
        "asha": {"type": "asha", "min_resource": 1, "reduction_factor": ETA},
        "asha-promo": {"type": "asha", "mode": "promotion", "min_resource": 1,
                       "reduction_factor": ETA, "max_resource": steps},
        "hyperband": {"type": "hyperband", "min_resource": 1, "reduction_factor": ETA,
                      "max_resource": steps},
        "hyperband-promo": {"type": "hyperband", "mode": "promotion", "min_resource": 1,
                            "reduction_factor": ETA, "max_resource": steps},
    }[method]


def generators_file() -> Path | None:
    """mf-prior-bench's MF-Hartmann generator file, found without importing mfpbench (whose
    package __init__ needs ConfigSpace and pandas), or None when it is not installed."""
    spec = importlib.util.find_spec("mfpbench")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "synthetic" / "hartmann" / \
        "generators.py"
    return path if path.is_file() else None


def _mf_spec(job: Job, site_packages: str) -> tuple[str, dict, dict]:
    p = job.problem
    dims = MF_FUNCTIONS[p.name]
    space = {f"x{i}": {"type": "float", "low": 0.0, "high": 1.0} for i in range(dims)}
    command = (f"exec {{python}} -S {TRIAL_SCRIPT} {generators_file()} {p.name} {p.steps} "
               f"{MF_BIAS} {MF_NOISE} {p.step_seconds} "
               + " ".join(f"{{{name}}}" for name in space))
    return command, space, {"PYTHONPATH": f"{site_packages}:{ROOT}"}


# What train.py imports, imported once by the warm server (docs/early-stopping.md)
DIGITS_PRELOAD = ["numpy", "torch", "torch.distributed", "torch.nn.parallel", "torch._dynamo",
                  "sklearn.datasets"]


def _digits_spec(job: Job, site_packages: str) -> tuple[str, dict, dict]:
    p = job.problem
    space = {
        "lr": {"low": 1e-4, "high": 1e-1, "log": True},
        "width": {"low": 8, "high": 64, "step": 8},
        "batch_size": {"choices": [32, 64, 128]},
        "optimizer": {"choices": ["sgd", "adam"]},
    }
    command = (f"{{python}} {DIGITS_SCRIPT} --lr {{lr}} --width {{width}} "
               f"--batch-size {{batch_size}} --optimizer {{optimizer}} --epochs {p.steps} "
               f"--seed 0 --device cpu --epoch-sleep {p.step_seconds}")
    return command, space, {"OMP_NUM_THREADS": 1}


def spec_dict(job: Job, site_packages: str) -> dict:
    """The experiment spec of one search, as YAML would load it."""
    p = job.problem
    build = _digits_spec if p.name == "digits" else _mf_spec
    command, space, env = build(job, site_packages)
    search = {"strategy": job.sampler, "trials": p.trials, "parallel": job.parallel,
              "seed": job.seed, "space": space}
    if (chosen := pruner(job.method, p.steps)) is not None:
        search["pruner"] = chosen
    return {
        "name": f"{p.name}-{job.method}-s{job.seed}",
        "command": command,
        "env": env,
        "search": search,
        "objective": {"metric": p.metric, "direction": p.direction},
        "executor": {"type": "local", "timeout": "10m",
                     **({"warm": DIGITS_PRELOAD} if job.warm and p.name == "digits" else {})},
    }

"""What would stop a valid spec only when `submit` starts it here: a package the strategy
needs, GPUs the local executor lacks, a path that cannot go into a batch script, a launcher
the executor cannot run, a command too long to exec or submit (command_size.py)."""

from __future__ import annotations

import importlib.util
import re
from typing import TYPE_CHECKING

from hpsearch.executors.registry import facts
from hpsearch.launch import LaunchError
from hpsearch.launch.attempt import build_launch
from hpsearch.preflight.command_size import command_size_problem
from hpsearch.search.registry import STRATEGIES
from hpsearch.spec.checks import control_character

if TYPE_CHECKING:
    from hpsearch.spec.model import Spec


def missing_module(strategy: str) -> str | None:
    """A problem if a package the strategy needs is not installed here, or None."""
    for module, install in STRATEGIES.get(strategy).needs:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            return (f"strategy {strategy} needs the Python package {module}, which is not "
                    f"installed here ({install}), or choose another strategy such as tpe")
    return None


def run_problem(spec: Spec) -> tuple[tuple[str, ...], str] | None:
    """(key path, problem) for what would stop a valid spec only when `submit` starts it
    here: a missing package, too few GPU slots, a path that cannot go into a batch script,
    a launcher the executor cannot run, a command too long to exec or submit; or None."""
    missing = missing_module(spec.search.strategy)
    if missing:
        return ("search", "strategy"), missing
    gpus, per_trial = spec.executor.gpus, spec.resources.gpus_per_node or 1
    if not facts(spec.executor).on_slurm and isinstance(gpus, tuple) and len(gpus) < per_trial:
        who = "the largest trial" if any(k == "gpus_per_node" for k, _ in
                                         spec.resources.per_trial) else "each trial"
        return ("executor", "gpus"), (f"lists {len(gpus)} device(s) but {who} needs "
                                      f"{per_trial} (resources.gpus_per_node)")
    for key, where in (("workdir", spec.workdir), ("runs_dir", spec.runs_dir)):
        problem = control_character(str(where))
        if problem:  # it becomes --chdir= or --output= in a batch script
            return (key,), (f"{problem}: {str(where)!r} (from {key}, --runs-dir, "
                            "HPSEARCH_RUNS_DIR or the spec's folder)")
    return launch_problem(spec) or command_size_problem(spec)


def launch_problem(spec: Spec) -> tuple[tuple[str, ...], str] | None:
    """(key path, problem) if the launcher, container and executor cannot start a trial
    together, found by building the first trial's launch as the driver would; or None."""
    params = {p.name: p.value if p.kind == "fixed" else p.choices[0] if p.choices else p.low
              for p in spec.search.space}
    try:
        build_launch(spec.trial_recipe(facts(spec.executor).on_slurm), 1, 1, params)
    except LaunchError as exc:
        key, _, message = str(exc).partition(": ")
        if not message or not re.fullmatch(r"[a-z_]+(\.[a-z_]+)*", key):
            return ("launcher",), str(exc)
        return tuple(key.split(".")), message
    return None

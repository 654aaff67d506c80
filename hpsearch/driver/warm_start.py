"""search.warm_start: earlier experiments' finished trials, for the sampler to learn from.

Read (read-only) from each named experiment's store in the same runs dir each time a driver
starts, so a resumed search sees what those experiments have finished by then. A trial is
taken if it completed with as many objective values as this search has, and each of its
parameters is a searched parameter of this space with a value inside its range or choices
(a point this search could have asked); the others are left out and counted. Warm trials
teach the sampler only: they are never run, counted in `search.trials`, or shown as trials.
"""

from __future__ import annotations

from pathlib import Path

from hpsearch.errors import HpsearchError
from hpsearch.search.base import WarmTrial
from hpsearch.spec.known_points import point_problem
from hpsearch.spec.model import Spec
from hpsearch.store import rows, runs
from hpsearch.store.runs import STORE_FILE


def load(spec: Spec) -> tuple[list[WarmTrial], list[str]]:
    """(the warm trials, one line per experiment saying what was taken and left out)."""
    from hpsearch.store.reader import Reader

    warm, lines = [], []
    objectives = len(spec.objectives)
    for name in spec.search.warm_start:
        try:
            reader = Reader(runs.existing_experiment_dir(Path(spec.runs_dir), name) / STORE_FILE)
        except HpsearchError as exc:
            lines.append(f"warm start: {exc}; going on without it")
            continue
        with reader:
            done = reader.trials([rows.COMPLETED])
        taken: list[WarmTrial] = []
        why: dict[str, int] = {}
        for t in done:
            if not t.objective_values or len(t.objective_values) != objectives:
                reason = "another number of objectives"
                why[reason] = why.get(reason, 0) + 1
                continue
            tuned = {k: v for k, v in t.params.items()
                     if any(p.name == k and p.kind != "fixed" for p in spec.search.space)
                     or not any(p.name == k for p in spec.search.space)}
            key, problem = point_problem(spec.search.space, tuned)
            if problem:
                reason = f"'{key}' outside this space" if key else "no searched parameter"
                why[reason] = why.get(reason, 0) + 1
                continue
            taken.append(WarmTrial(tuned, list(t.objective_values)))
        warm += taken
        left = "; ".join(f"{n} with {reason}" for reason, n in sorted(why.items()))
        lines.append(f"warm start: {len(taken)} of {len(done)} completed trials of {name}"
                     + (f" (left out: {left})" if left else ""))
    return warm, lines

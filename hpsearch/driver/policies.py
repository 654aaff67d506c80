"""The policies the driver asks, each built from its own part of the spec.

This is where the spec is taken apart (the composition root, with session): the pruner
gets the `search.pruner` section, the retry rules `retries` and `resources`, the fail-fast
rule `search.max_failures`, the checkpoint keeper `checkpoints`; none of them sees the
whole spec, and the driver sees none of it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

from hpsearch.driver import requests
from hpsearch.driver.attempts import Attempts, Launches
from hpsearch.driver.checkpoint_keeper import CheckpointKeeper
from hpsearch.driver.cost import Costs, pilot_share_of
from hpsearch.driver.extent import Extent
from hpsearch.driver.failfast import FailFast
from hpsearch.driver.scouts import Scouts
from hpsearch.driver.warm_start import load as load_warm_start
from hpsearch.executors.base import Executor
from hpsearch.executors.registry import facts
from hpsearch.ingest.output_watch import OutputWatch, open_watch
from hpsearch.launch.attempt import build_launch
from hpsearch.pruning.promoter import Promoter, Segments
from hpsearch.pruning.stopper import VERDICT_WAIT, Stopper
from hpsearch.registry import load
from hpsearch.search.base import Search
from hpsearch.search.registry import strategy
from hpsearch.spec.model import Spec
from hpsearch.store.store import Store


@dataclass
class Policies:
    """What the driver asks, besides the search and the executor."""

    name: str                  # the experiment's, for messages (`hpsearch resume NAME`)
    metrics: list[str]         # the objectives' metrics, the first one judged by pruners
    launches: Launches         # (trial id, attempt, params) -> the attempt's Launch
    checkpoints: CheckpointKeeper
    attempts: Attempts         # failed, requeued, next
    stopper: Stopper | None    # early stopping
    promoter: Segments | None  # segments: pause at a rung or boundary, resume when told
    extent: Extent             # total, enqueued points, time budget
    failfast: FailFast
    costs: Costs               # objectives that are what a trial cost (gpu_hours, ...)
    watch: OutputWatch | None = None  # early stopping: which trials just reported
    reading: str = ""          # with a pruner: why reports are read as written, or not


def policies(spec: Spec, store: Store, executor: Executor, search: Search,
             on_event: Callable[[str], None]) -> Policies:
    """Build each policy from its own section of the spec."""
    objective, study = spec.objectives[0], f"hpsearch-{spec.name}"
    pruner = spec.search.pruner
    stopper = (Stopper(pruner, objective, study, store, executor, search, on_event)
               if pruner.enabled and not pruner.promotion else None)
    promoter = _segments(spec, store, search, on_event)
    # early stopping: a rejected trial runs on until the driver reads its report, so the
    # executor's wait ends when one is written (where inotify can tell), and the trial's
    # should_stop() waits a moment for the verdict (hpsearch.trial._await_verdict)
    watch, reading = open_watch(store.filesystem) if stopper else (None, "")
    recipe = spec.trial_recipe(facts(spec.executor).on_slurm)
    if watch:
        executor.wake_on(watch.fileno())
        recipe = dataclasses.replace(recipe, env=(*recipe.env,
                                                  ("HPSEARCH_VERDICT_WAIT", VERDICT_WAIT)))
    launches = partial(build_launch, recipe)
    return Policies(
        name=spec.name,
        metrics=[o.metric for o in spec.objectives],
        launches=launches,
        checkpoints=CheckpointKeeper(spec.checkpoints.in_force(),
                                     [o.direction for o in spec.objectives],
                                     spec.experiment_dir, store, on_event),
        attempts=Attempts(spec.retries, spec.resources, launches, store, search,
                          _scouts(spec, store)),
        stopper=stopper,
        promoter=promoter,
        extent=Extent(spec.search, spec.experiment_dir, store, search, on_event,
                      partial(load_warm_start, spec),
                      on_finish=partial(_finish, promoter) if promoter else None),
        failfast=FailFast(spec.search.max_failures, spec.name, store.state_counts()),
        watch=watch,
        reading=reading,
        costs=Costs([o.metric for o in spec.objectives], store, on_event,
                    _sacct(spec, executor), pilots=pilot_share_of(spec),
                    elsewhere=frozenset(s.name for s in spec.executor.sites if s.cluster)),
    )


def _segments(spec: Spec, store: Store, search: Search,
              on_event: Callable[[str], None]) -> Segments | None:
    """What runs trials in segments: the strategy's own (pbt), else the promoter where the
    pruner promotes, else nothing."""
    own = strategy(spec.search.strategy).segments
    if own is not None:
        kind: Any = load(own)  # a class with from_spec(spec, store, search, on_event)
        return cast("Segments", kind.from_spec(spec, store, search, on_event))
    return Promoter.from_spec(spec, store, search, on_event) \
        if spec.search.pruner.promotion else None


def _sacct(spec: Spec, executor: Executor):
    """Where each attempt is a Slurm job of its own: sacct's usage of jobs, as `hpsearch
    report` reads it (the executor's Slurm, so a test's stand-in answers); else None."""
    if not facts(spec.executor).job_per_attempt:
        return None
    slurm = getattr(executor, "slurm", None)
    return slurm.sacct_usage if slurm is not None else None


def _finish(promoter: Segments, request: requests.Request) -> None:
    """`hpsearch finish`: the promoter sends the trials on; the file goes once it has."""
    promoter.request_finish(request.id, request.data["trials"],
                            partial(requests.done, request))


def _scouts(spec: Spec, store: Store) -> Scouts | None:
    """Scouts (resources.time or mem `auto`) where trials run on Slurm: measured by sacct
    where each attempt is a job, from the store in pilots; None locally."""
    executor = facts(spec.executor)
    if not spec.resources.auto or not executor.on_slurm:
        return None
    return Scouts(spec.resources, store, in_pilots=not executor.job_per_attempt)

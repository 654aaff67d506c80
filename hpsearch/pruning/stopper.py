"""What the driver does for early stopping, kept out of the driver's loop.

For each trial's new reports the policy (EarlyStopping) answers go on or stop. A stop is
written ahead in the store (trials.stop_request, and a `prune` event), then the trial is told:
a STOP file in its trial dir (trial.should_stop() sees it) and the executor's stop (SIGTERM,
then SIGKILL after executor.grace; scancel for Slurm jobs; the pilot's cancel file). However
the attempt then ends, it is recorded `pruned` with the step and value it was judged at, and
is never retried; its slot is free for the next trial. A resumed driver finds the decision in
the store and tells the trial again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from hpsearch.faults import fault_point
from hpsearch.pruning.policy import EarlyStopping
from hpsearch.store import rows
from hpsearch.store.atomic import replace_file

if TYPE_CHECKING:
    from hpsearch.executors.base import Ended, Executor
    from hpsearch.search.base import Search
    from hpsearch.spec.model import Objective, Pruner
    from hpsearch.store.store import Store

STOP_FILE = "STOP"
# "ATTEMPT STEP QUIET": the attempt's reports were read through STEP and it goes on, and the
# pruner cannot stop it on a report below QUIET; written only where reports are read as
# written (trial.should_stop() waits for it then, except on a step below QUIET)
JUDGED_FILE = "JUDGED"
# in the trials' environment then: how long should_stop() may wait for it after a report
VERDICT_WAIT = "0.5"


class Stopper:
    def __init__(self, pruner: Pruner, objective: Objective, study_name: str, store: Store,
                 executor: Executor, search: Search, on_event: Callable[[str], None]) -> None:
        self.policy = EarlyStopping(pruner, objective, study_name)
        self.store, self.executor, self.search, self.on_event = store, executor, search, on_event
        self.requests: dict[int, dict] = {}  # trial id -> its stop request, until it ends
        self.untold: set[int] = set()  # stops committed, not yet told to the trial
        self.quiet: dict[int, tuple[int, int]] = {}  # trial id -> (attempt, QUIET) told

    def recover(self, trials: list[rows.TrialRow]) -> None:
        """Rebuild the policy from the store (before trials in flight are adopted); a stop
        decided before the driver died is told again by the next tell()."""
        self.policy.rebuild(trials, self.store.objective_curves(self.policy.metric))
        self.requests = {t.id: t.stop_request for t in trials
                         if t.stop_request is not None and t.state in rows.IN_FLIGHT}
        self.untold = set(self.requests)

    def added(self, trial_id: int) -> None:
        self.policy.add(trial_id)

    def observe(self, trial_id: int, records: list[dict]) -> None:
        """New reports of a trial, judged step by step as Optuna's `report(); should_prune()`
        would (final: the trial has ended; a step judged now still prunes it, as a last
        report does in Optuna, and a resumed driver decides as the uninterrupted one did).
        Store writes only, inside the caller's commit; a running trial to stop is told by
        tell(), after that commit."""
        if not records:
            return
        decision, attrs = self.policy.observe(trial_id, records)
        if attrs is not None:
            self.store.set_pruner_attrs(trial_id, attrs)
        if decision is not None:
            request = {**decision.to_json(), "time": time.time()}
            self.store.request_stop(trial_id, request, decision.why)
            self.requests[trial_id] = request
            self.untold.add(trial_id)
            self.on_event(f"trial {trial_id}: {decision.why}; stopping it")

    def tell(self, trial_dirs: dict[int, Path]) -> None:
        """Tell each running trial whose stop is committed and not told yet (of
        `trial_dirs`, the trials in flight): its STOP file, then the executor's stop."""
        for trial_id in sorted(self.untold & set(trial_dirs)):
            fault_point("after_stop_request")
            self.untold.discard(trial_id)
            try:
                (trial_dirs[trial_id] / STOP_FILE).write_text("pruned\n")
            except OSError:
                pass  # the executor's stop still reaches it
            self.executor.stop(trial_id)

    def go_on(self, trial_dir: Path, trial_id: int, attempt: int, step: int) -> None:
        """The verdict on a running trial's reports through `step`, once committed and any
        stop told (tell): go on, unless its stop is decided (its STOP file says it)."""
        if trial_id in self.requests:
            return
        told = self.quiet.get(trial_id)
        if told and told[0] == attempt and step < told[1]:
            return  # JUDGED already says the trial need not wait for this step
        quiet = self.policy.quiet_until(trial_id, step)
        try:
            replace_file(trial_dir / JUDGED_FILE, f"{attempt} {step} {quiet}\n")
        except OSError:
            return  # the trial waits its HPSEARCH_VERDICT_WAIT out, then goes on
        self.quiet[trial_id] = (attempt, quiet)

    def finished(self, ended: Ended, last: tuple[int, float] | None) -> bool:
        """Record the end of a trial told to stop, as `pruned` (whatever its exit), and say
        True; False for a trial that was not told (the driver records it)."""
        request = self.requests.pop(ended.trial_id, None)
        self.quiet.pop(ended.trial_id, None)
        if request is None:
            return False
        self.untold.discard(ended.trial_id)
        tid = ended.trial_id
        attrs = self.search.tell(tid, rows.PRUNED, None,
                                 intermediate={request["step"]: request["value"]})
        self.policy.ended(tid, rows.PRUNED, None)
        took = time.time() - request["time"]
        reached = f"; its last report: step {last[0]} (value {last[1]:.6g})" if last else ""
        message = (f"pruned by {request['pruner']} at step {request['step']} (value "
                   f"{request['value']:.6g}){reached}; it stopped {took:.2f} s after the "
                   "decision")
        self.store.finish_attempt(tid, ended.attempt, rows.PRUNED, ended.exit_code, message,
                                  sampler_attrs=attrs)
        self.on_event(f"trial {tid} pruned at step {request['step']}; stopped {took:.2f} s "
                      "after the decision")
        return True

    def ended(self, trial_id: int, state: str, value: float | None) -> None:
        self.policy.ended(trial_id, state, value)

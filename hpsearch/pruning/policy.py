"""The early-stopping policy: an Optuna pruner judging the objective's intermediate reports.

Optuna's pruners read a study: every trial's intermediate values, states and the system attrs
they keep (successive halving and hyperband record each rung a trial passed). The policy keeps
such a study in memory, one Optuna trial per hpsearch trial (same number, which hyperband's
brackets hash), fed step by step as the driver ingests reports, exactly as an in-process
`trial.report(); trial.should_prune()` would be. What a prune call changes in a trial's system
attrs is handed back for the driver to store, and `rebuild` puts it back, so decisions after a
resume are the ones an uninterrupted driver would make. The driver is the only store writer.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hpsearch.pruning.pruners import build, describe, first_stop_step
from hpsearch.search import optuna_compat as compat
from hpsearch.store import rows

if TYPE_CHECKING:
    from hpsearch.spec.model import Objective, Pruner


@dataclass(frozen=True)
class StopDecision:
    """Stop `trial_id` now: its objective reported `value` at `step` and the pruner said so."""

    trial_id: int
    step: int
    value: float
    pruner: str  # the pruner, described

    @property
    def why(self) -> str:
        return f"pruned by {self.pruner} at step {self.step} (value {self.value:.6g})"

    def to_json(self) -> dict:
        return {"step": self.step, "value": self.value, "pruner": self.pruner}


@functools.cache
def _optuna():
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


class EarlyStopping:
    def __init__(self, pruner: Pruner, objective: Objective, study_name: str) -> None:
        """pruner: the spec's search.pruner; objective: the one the pruner judges (the
        first); study_name: fixed per experiment (hyperband hashes it)."""
        optuna = _optuna()
        self.metric = objective.metric
        self.pruner_spec = pruner
        self.described = describe(self.pruner_spec)
        # A fixed study name: hyperband picks a trial's bracket by hashing it with the number.
        self.study = optuna.create_study(study_name=study_name,
                                         direction=objective.direction,
                                         pruner=build(self.pruner_spec))
        self.storage = compat.storage(self.study)
        self.ids: list[int] = []      # hpsearch trial id (the index) -> Optuna's _trial_id
        self.judged: dict[int, int] = {}  # trial id -> the highest step the pruner judged
        self.decided: set[int] = set()    # trials told to stop (never judged again)

    # -- building --------------------------------------------------------------------------
    def rebuild(self, trials: list[rows.TrialRow], curves: dict[int, dict[int, float]]) -> None:
        """Load the store's trials (dense ids, in order) with their objective's reported
        values by step (`curves`) and the pruner attrs stored with each."""
        optuna = _optuna()
        state_of = {rows.COMPLETED: optuna.trial.TrialState.COMPLETE,
                    rows.PRUNED: optuna.trial.TrialState.PRUNED,
                    rows.FAILED: optuna.trial.TrialState.FAIL}
        frozen = []
        for row in trials:
            state = state_of.get(row.state, optuna.trial.TrialState.RUNNING)
            values = (row.objective_values or [])[:1] if state.name == "COMPLETE" else None
            if state.name == "COMPLETE" and not values:
                state = optuna.trial.TrialState.FAIL
            curve = curves.get(row.id, {})
            frozen.append(optuna.trial.create_trial(
                state=state, values=values, intermediate_values=curve,
                system_attrs=dict(row.pruner_attrs)))
            if curve:
                self.judged[row.id] = max(curve)
            if row.stop_request is not None:
                self.decided.add(row.id)
        self.study.add_trials(frozen)
        self.ids = [compat.trial_id(t) for t in self.study.get_trials(deepcopy=False)]

    def add(self, trial_id: int) -> None:
        """A new trial (ids come dense, in order)."""
        if trial_id != len(self.ids):
            raise RuntimeError(f"trial {trial_id} added out of order (expected {len(self.ids)})")
        self.study.add_trial(_optuna().trial.create_trial(
            state=_optuna().trial.TrialState.RUNNING))
        self.ids.append(compat.trial_id(self.study.get_trials(deepcopy=False)[-1]))

    # -- deciding --------------------------------------------------------------------------
    def observe(self, trial_id: int, records: list[dict]) -> tuple[StopDecision | None,
                                                                    dict | None]:
        """Feed a trial's new report records (ingest order). Each step above the highest
        judged so far is judged once, as soon as it is recorded. Returns the decision to stop
        it (or None) and its pruner attrs if a judgement changed them (to store), else None."""
        if trial_id in self.decided:
            return None, None
        internal = self.ids[trial_id]
        before = self._attrs(internal)
        decision = None
        for rec in records:
            value = rec.get(self.metric)
            if value is None:
                continue
            step = rec["step"]
            self.storage.set_trial_intermediate_value(internal, step, value)
            if step <= self.judged.get(trial_id, -1):
                continue  # a resumed attempt reporting again a step already judged
            self.judged[trial_id] = step
            frozen = self.storage.get_trial(internal)
            if self.study.pruner.prune(self.study, frozen):
                decision = StopDecision(trial_id, step, float(value), self.described)
                self.decided.add(trial_id)
                break
        after = self._attrs(internal)
        return decision, (after if after != before else None)

    def quiet_until(self, trial_id: int, step: int) -> int:
        """The first step after `step` (judged: it goes on) at which the pruner may stop
        `trial_id` (its rung now, for successive halving)."""
        return first_stop_step(self.pruner_spec, step, self._attrs(self.ids[trial_id]))

    def ended(self, trial_id: int, state: str, value: float | None) -> None:
        """The trial finished (completed, pruned or failed): later judgements compare with it."""
        optuna = _optuna()
        internal = self.ids[trial_id]
        if self.storage.get_trial(internal).state.is_finished():
            return
        if state == rows.COMPLETED and value is not None and math.isfinite(value):
            self.storage.set_trial_state_values(internal, optuna.trial.TrialState.COMPLETE,
                                                [value])
        else:
            self.storage.set_trial_state_values(
                internal, optuna.trial.TrialState.PRUNED if state == rows.PRUNED
                else optuna.trial.TrialState.FAIL)

    def _attrs(self, internal: int) -> dict:
        return dict(self.storage.get_trial_system_attrs(internal))

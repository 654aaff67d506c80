"""Model-based and random searches through Optuna samplers, by ask/tell.

The study lives in memory and is rebuilt from the store on every start: finished trials are
added with their values and the sampler state Optuna keeps in system attrs (CMA-ES, NSGA-II,
QMC keep theirs there); trials in flight are added as RUNNING and told when they end.

Parameters are suggested define-by-run, one by one in spec order, and a conditional one only
where its condition holds, so a trial holds exactly its active parameters and the samplers see
the true structure (TPE groups the parameters that occur together; CMA-ES and GP sample the
ones outside their intersection space independently, as Optuna does).
"""

from __future__ import annotations

import functools
import hashlib
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from hpsearch.search import optuna_compat as compat
from hpsearch.search.base import Asked, Search, WarmTrial
from hpsearch.spec.model import Objective, Param
from hpsearch.spec.model import Search as SearchSpec
from hpsearch.store import rows

if TYPE_CHECKING:
    import optuna

    from hpsearch.search.registry import SamplerStrategy


@functools.cache
def _optuna():
    import optuna  # heavy: imported only when a search is built

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    return optuna


def distribution(param: Param):
    d = _optuna().distributions
    if param.kind == "categorical":
        return d.CategoricalDistribution(list(param.choices))
    if param.low is None or param.high is None:
        # validate() gives every int and float parameter both bounds.
        raise ValueError(f"{param.name}: a {param.kind} parameter needs low and high")
    if param.kind == "int":
        return d.IntDistribution(param.low, param.high, log=param.log, step=param.step or 1)
    return d.FloatDistribution(float(param.low), float(param.high), log=param.log,
                               step=float(param.step) if param.step is not None else None)


def suggest(trial, name: str, dist) -> Any:
    """`name`'s value in an Optuna trial, sampled from `dist` (a distribution())."""
    d = _optuna().distributions
    if isinstance(dist, d.CategoricalDistribution):
        return trial.suggest_categorical(name, dist.choices)
    if isinstance(dist, d.IntDistribution):
        return trial.suggest_int(name, dist.low, dist.high, step=dist.step, log=dist.log)
    return trial.suggest_float(name, dist.low, dist.high, step=dist.step, log=dist.log)


# a study of a strategy that forgets (SamplerStrategy.forgets) is compacted after this many
# trials told
COMPACT_EVERY = 1000


def resumed_seed(seed: int | None, trials_so_far: int) -> int | None:
    """A seed for a sampler rebuilt after `trials_so_far` trials: the same run restarted
    does not replay the random stream it already used (which would repeat params)."""
    if seed is None or trials_so_far == 0:
        return seed
    digest = hashlib.sha256(f"{seed}:{trials_so_far}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


class OptunaSearch(Search):
    def __init__(self, search: SearchSpec, objectives: tuple[Objective, ...],
                 strategy: SamplerStrategy) -> None:
        self.spec, self.strategy = search, strategy
        self.total = search.trials
        self.directions = [o.direction for o in objectives]
        self.distributions = {p.name: distribution(p) for p in search.tuned}
        self.study: optuna.Study | None = None  # built by rebuild (ask rebuilds if need be)
        self.n_asked = 0  # this experiment's trials in the study (added on rebuild, or asked)
        self.offset = 0  # warm-start trials, first in the study: trial id = number - offset
        # Once compacted (a strategy that forgets: _compact), trial id -> its number in the
        # study, for the trials in it; None: number = trial id + offset, for every trial.
        self.numbers: dict[int, int] | None = None
        self.told = 0  # trials told since the study was last compacted

    @property
    def asked(self) -> int:
        return self.n_asked

    def rebuild(self, trials: list[rows.TrialRow], study_attrs: dict,
                warm: Sequence[WarmTrial] = ()) -> None:
        optuna = _optuna()
        TrialState = optuna.trial.TrialState
        sampler = self.strategy.sampler(resumed_seed(self.spec.seed, len(trials)), self.spec)
        study = self.study = optuna.create_study(directions=self.directions, sampler=sampler)
        storage, study_id = compat.storage(study), compat.study_id(study)
        for key, value in study_attrs.items():
            storage.set_study_system_attr(study_id, key, value)
        frozen = [optuna.trial.create_trial(
            state=TrialState.COMPLETE, params=w.params, values=w.values,
            distributions={k: self.distributions[k] for k in w.params}) for w in warm]
        self.offset = len(frozen)
        for expected, t in enumerate(trials):
            curve = {}
            if t.id != expected:
                raise RuntimeError(f"store trial ids are not dense: found {t.id}, expected "
                                   f"{expected}")
            # A conditional trial holds only its active parameters, each with its distribution.
            params = {k: v for k, v in t.params.items() if k in self.distributions}
            if t.state == rows.COMPLETED and t.objective_values is not None:
                state, values = TrialState.COMPLETE, t.objective_values
            elif t.state == rows.FAILED:
                state, values = TrialState.FAIL, None
            elif t.state in (rows.PRUNED, rows.PAUSED):
                state, values = TrialState.PRUNED, None
                curve = _pruned_curve(t)  # TPE ranks pruned trials by how far they got
            else:
                state, values = TrialState.RUNNING, None
            frozen.append(optuna.trial.create_trial(
                state=state, params=params, values=values,
                distributions={k: self.distributions[k] for k in params},
                system_attrs=t.sampler_attrs, intermediate_values=curve))
        study.add_trials(frozen)
        self.n_asked = len(trials)
        self.numbers, self.told = None, 0
        if self.strategy.forgets:
            self._compact()

    def ask(self, fixed: dict[str, Any] | None = None, mark: dict | None = None) -> Asked | None:
        if self.study is None:
            self.rebuild([], {})
        study = self.built_study()
        if self.n_asked >= self.total:
            return None
        if fixed:
            study.enqueue_trial(fixed)  # the next ask takes these values
        trial = study.ask()
        self.n_asked += 1
        storage = compat.storage(study)
        for key, value in (mark or {}).items():  # kept with the trial, told or rebuilt
            storage.set_trial_system_attr(compat.trial_id(trial), key, value)
        params = self.spec.active(lambda p: suggest(trial, p.name, self.distributions[p.name]))
        trial_id = trial.number - self.offset
        if self.numbers is not None:  # ids stay dense: this is the experiment's next trial
            trial_id = self.n_asked - 1
            self.numbers[trial_id] = trial.number
        return Asked(trial_id, params,
                     dict(storage.get_trial_system_attrs(compat.trial_id(trial))),
                     dict(storage.get_study_system_attrs(compat.study_id(study))))

    def tell(self, trial_id: int, state: str, values: list[float] | None,
             intermediate: dict[int, float] | None = None) -> dict | None:
        TrialState = _optuna().trial.TrialState
        study = self.built_study()
        storage = compat.storage(study)
        number = trial_id + self.offset if self.numbers is None else self.numbers.get(trial_id)
        if number is None:
            return None  # told before (a compacted study keeps only the trials in flight)
        internal = storage.get_trial_id_from_study_id_trial_number(compat.study_id(study),
                                                                   number)
        if intermediate and not storage.get_trial(internal).state.is_finished():
            for step, value in intermediate.items():  # TPE ranks pruned trials by them
                storage.set_trial_intermediate_value(internal, step, value)
        if state == rows.COMPLETED:
            frozen = study.tell(number, values=values, skip_if_finished=True)
        else:
            frozen = study.tell(number, state=TrialState.PRUNED if state == rows.PRUNED
                                else TrialState.FAIL, skip_if_finished=True)
        attrs = dict(frozen.system_attrs)
        if self.numbers is not None:
            self.numbers.pop(trial_id, None)
        self.told += 1
        if self.strategy.forgets and self.told >= COMPACT_EVERY:
            self._compact()
        return attrs

    def _compact(self) -> None:
        """For a strategy whose sampler uses no past trial (random: its generator only): a
        new study with the same sampler, its attrs and only the trials not finished, so the
        driver's memory does not grow with every trial run (issue 42 item 5: Optuna's
        in-memory trials were about 1 KB a trial of the driver's growth)."""
        TrialState = _optuna().trial.TrialState
        old = self.built_study()
        by_number = ({number: tid for tid, number in self.numbers.items()}
                     if self.numbers is not None else None)
        new = _optuna().create_study(directions=self.directions, sampler=old.sampler)
        storage, study_id = compat.storage(new), compat.study_id(new)
        for key, value in compat.storage(old).get_study_system_attrs(
                compat.study_id(old)).items():
            storage.set_study_system_attr(study_id, key, value)
        numbers: dict[int, int] = {}
        for t in old.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            tid = by_number[t.number] if by_number is not None else t.number - self.offset
            numbers[tid] = len(numbers)  # add_trial numbers them in order
            new.add_trial(t)
        self.study, self.numbers, self.told = new, numbers, 0

    def built_study(self) -> optuna.Study:
        """The study rebuild made; none yet is the caller's error (a tell before any ask)."""
        if self.study is None:
            raise RuntimeError("the Optuna study is used before rebuild (or ask) built it")
        return self.study


def _pruned_curve(t: rows.TrialRow) -> dict[int, float]:
    """A pruned or paused trial's objective at the step it was judged or paused at."""
    if t.stop_request and "step" in t.stop_request:
        return {t.stop_request["step"]: t.stop_request["value"]}
    rungs, step = t.pruner_attrs.get("rungs"), t.pruner_attrs.get("step")
    if rungs and step is not None:
        return {step: rungs[max(rungs, key=int)]}
    return {}

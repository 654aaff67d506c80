"""Optuna's private API, in one place: what hpsearch needs that Optuna's public API lacks.

hpsearch rebuilds a study in memory from its own store on every start, and reads and writes
the sampler's and pruner's system attrs, intermediate values and trial states of trials the
study did not run itself. Optuna keeps those behind the study's storage, reached only through
`Study._storage`, `Study._study_id` and the `_trial_id` of a `Trial` or `FrozenTrial`
(optuna 4.0-5.0; the public `study.tell` and `study.add_trials` cover the rest). When
raising optuna's upper bound in pyproject.toml, check that these three attributes still
exist with these meanings and run tests/test_conditional_space.py, tests/test_pruning.py
and tests/test_optuna_mirror.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from optuna import Study
    from optuna.storages import BaseStorage
    from optuna.trial import FrozenTrial, Trial


def storage(study: Study) -> BaseStorage:
    """The storage an in-memory study keeps its trials in."""
    return study._storage


def study_id(study: Study) -> int:
    return study._study_id


def trial_id(trial: FrozenTrial | Trial) -> int:
    """A trial's id in its storage (not its number in the study)."""
    return trial._trial_id

"""The Search seam: ask for the next trial's params, tell how a trial ended.

Trial ids are dense (0, 1, 2, ...) and assigned by the search in ask order; the driver
stores each asked trial before launching it. On resume the search is rebuilt from the
store's trials (rebuild), which is the single source of truth.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hpsearch.store.rows import TrialRow


@dataclass
class Asked:
    trial_id: int
    params: dict[str, Any]           # searched and fixed values, as the trial sees them
    sampler_attrs: dict = field(default_factory=dict)  # sampler state kept with the trial
    study_attrs: dict | None = None  # sampler state kept with the experiment


@dataclass(frozen=True)
class WarmTrial:
    """A finished trial of another experiment the sampler learns from (search.warm_start)."""
    params: dict[str, Any]
    values: list[float]


class Search(ABC):
    total: int  # trials the search runs in all (the driver may raise it: resume --trials)

    @property
    @abstractmethod
    def asked(self) -> int:
        """Trials asked so far (those rebuilt from the store included); read-only: only the
        search's own ask and rebuild change it."""

    @abstractmethod
    def rebuild(self, trials: list[TrialRow], study_attrs: dict,
                warm: Sequence[WarmTrial] = ()) -> None:
        """Load the trials already in the store (any state), before any ask; `warm`:
        other experiments' finished trials, known to the sampler but never run or counted."""

    @abstractmethod
    def ask(self, fixed: dict[str, Any] | None = None, mark: dict | None = None) -> Asked | None:
        """The next trial, or None when every trial has been asked. `fixed`: parameters the
        trial takes as given (an enqueued point), the rest sampled; `mark`: attrs kept in
        the trial's sampler attrs from then on (which point it was); samplers only."""

    @abstractmethod
    def tell(self, trial_id: int, state: str, values: list[float] | None,
             intermediate: dict[int, float] | None = None) -> dict | None:
        """Record a finished trial (completed / failed / pruned; `intermediate`: a pruned
        trial's objective at the step it was judged). Returns updated sampler attrs of the
        trial to store, or None."""

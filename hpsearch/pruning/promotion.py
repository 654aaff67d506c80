"""Promotion (pause and resume) for successive halving and hyperband: the rung-level policy.

Each trial runs in segments. A segment runs the trial up to its rung's step budget; there the
trial saves a checkpoint and exits, and its value at the rung is recorded. A paused trial is
promoted (a new segment resumes it from its checkpoint up to the next rung) when it ranks in
the top 1/eta of every value recorded at its rung: asynchronous successive halving's rule
(Li et al., "A System for Massively Parallel Hyperparameter Tuning", 2020, Algorithm 2), as in
Syne Tune's promotion scheduler. Whenever a slot is free the best promotable trial of the
highest rung goes first; only when none is promotable is a new trial asked. Optuna's pruners
only stop trials (they cannot pause one), so this small policy is hpsearch's own.

Rungs: r_k = min_resource * eta^(k + s) steps while below max_resource, then max_resource.
Hyperband runs several such ladders (brackets, s = 0, 1, ...), a trial's bracket picked as
Optuna's HyperbandPruner picks it (crc32 of study name and trial number over the brackets'
trial budgets). Nothing here touches the store: the driver writes each decision ahead.
"""

from __future__ import annotations

import binascii
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hpsearch.spec.model import Pruner


@dataclass(frozen=True)
class Segment:
    """Run trial `trial_id` up to `budget` steps, as rung `rung` (0: a new trial)."""

    trial_id: int
    rung: int
    budget: int
    why: str = ""


@dataclass
class _Trial:
    bracket: int
    rung: int = 0                 # the rung its current (or last) segment runs to
    values: dict[int, float] = field(default_factory=dict)  # rung -> value recorded there
    paused: bool = False          # waiting at `rung` for a promotion
    step: int | None = None       # the last step its last recorded rung value came from
    done: bool = False            # completed: ran every step it has (its command's own end)


def ladder(min_resource: int, max_resource: int, eta: int, rate: int) -> list[int]:
    """The step budgets of one bracket's rungs, ending with max_resource."""
    budgets, k = [], 0
    while (r := min_resource * eta ** (k + rate)) < max_resource:
        budgets.append(r)
        k += 1
    return budgets + [max_resource]


class Promotion:
    def __init__(self, spec: Pruner, direction: str, study_name: str) -> None:
        self.eta = spec.option("reduction_factor", 3 if spec.type == "hyperband" else 4)
        low = spec.option("min_resource", 1)
        high = spec.max_resource
        if high is None:  # the validator requires it with mode: promotion
            raise ValueError("promotion needs search.pruner.max_resource")
        self.maximize = direction == "maximize"
        self.study_name = study_name
        if spec.type == "hyperband":
            n = math.floor(math.log(high / low, self.eta)) + 1
            self.ladders = [ladder(low, high, self.eta, s) for s in range(n)]
            self.weights = [math.ceil(n * self.eta ** (n - 1 - s) / (n - s)) for s in range(n)]
        else:
            rate = spec.option("min_early_stopping_rate", 0)
            self.ladders, self.weights = [ladder(low, high, self.eta, rate)], [1]
        self.trials: dict[int, _Trial] = {}

    # -- state -----------------------------------------------------------------------------
    def bracket_of(self, trial_id: int) -> int:
        if len(self.ladders) == 1:
            return 0
        n = binascii.crc32(f"{self.study_name}_{trial_id}".encode()) % sum(self.weights)
        for bracket, weight in enumerate(self.weights):
            n -= weight
            if n < 0:
                return bracket
        return len(self.weights) - 1

    def load(self, trial_id: int, rung: int, values: dict[int, float], paused: bool,
             step: int | None = None) -> None:
        """A trial as the store has it (on resume): the rung of its last segment, the values
        it recorded at each rung, whether it waits for a promotion, and the step of its last
        recorded value."""
        self.trials[trial_id] = _Trial(self.bracket_of(trial_id), rung, dict(values), paused,
                                       step)

    def first(self, trial_id: int) -> Segment:
        """The first segment of a new trial."""
        self.load(trial_id, 0, {}, False)
        return self.segment(trial_id)

    def segment(self, trial_id: int) -> Segment:
        """The segment a trial runs now (its current rung's budget; a retry runs it again)."""
        t = self.trials[trial_id]
        return Segment(trial_id, t.rung, self.ladders[t.bracket][t.rung])

    def is_top(self, trial_id: int, rung: int) -> bool:
        return rung >= len(self.ladders[self.trials[trial_id].bracket]) - 1

    def rung_reached(self, trial_id: int, steps: int) -> int:
        """The highest rung whose budget `steps` reported steps reach (-1: none)."""
        budgets = self.ladders[self.trials[trial_id].bracket]
        return max((k for k, b in enumerate(budgets) if steps >= b), default=-1)

    # -- events ----------------------------------------------------------------------------
    def record(self, trial_id: int, rung: int, value: float, paused: bool,
               step: int | None = None) -> None:
        """A segment ended at `rung` with `value`, reported at `step` (paused: it waits for
        a promotion)."""
        t = self.trials[trial_id]
        t.rung, t.values[rung], t.paused = rung, value, paused
        if step is not None:
            t.step = step

    def finished(self, trial_id: int) -> None:
        """The trial will run no more (completed at the top, failed, cancelled)."""
        if trial_id in self.trials:
            self.trials[trial_id].paused = False

    def completed(self, trial_id: int) -> None:
        """The trial completed: at the last rung, or below it where its command ran fewer
        steps than the rung asks; either way its bracket has a fully trained trial."""
        if trial_id in self.trials:
            self.trials[trial_id].paused, self.trials[trial_id].done = False, True

    def promote(self, end_game: bool = False) -> Segment | None:
        """The next promotion, or None: the best promotable paused trial of the highest
        rung. With end_game (no new trial will come, nothing runs): in each bracket where no
        trial has reached the last rung, the best paused trial of the highest rung goes on
        anyway, so that every bracket (hyperband's too, as synchronous Hyperband finishes
        each) ends with at least one fully trained trial."""
        paused = [(tid, t) for tid, t in self.trials.items() if t.paused]
        ranked = sorted(paused, key=lambda p: (-p[1].rung, self._rank_value(
            p[1].values[p[1].rung]), p[0]))
        chosen = next(((tid, t) for tid, t in ranked if self._promotable(t)), None)
        why = "in the top 1/{eta} of the {n} values recorded there"
        unfinished = [(tid, t) for tid, t in ranked if t.bracket not in self._finished()]
        if chosen is None and end_game and unfinished:
            chosen = unfinished[0]
            why = "the best paused trial of its bracket, promoted at the end of the search: " \
                  "none of the bracket has reached the last rung"
        if chosen is None:
            return None
        tid, t = chosen
        value, rung = t.values[t.rung], t.rung
        n = sum(1 for o in self.trials.values() if o.bracket == t.bracket and rung in o.values)
        t.rung, t.paused = rung + 1, False
        return Segment(tid, t.rung, self.ladders[t.bracket][t.rung],
                       f"promoted from rung {rung} (value {value:.6g}), "
                       + why.format(eta=self.eta, n=n))

    def finish(self, trial_id: int, why: str) -> Segment:
        """Send a paused trial straight to its bracket's last rung (max_resource), whatever
        its rank: `hpsearch finish`."""
        t = self.trials[trial_id]
        t.rung, t.paused = len(self.ladders[t.bracket]) - 1, False
        return Segment(trial_id, t.rung, self.ladders[t.bracket][t.rung], why)

    # -- helpers ---------------------------------------------------------------------------
    def _rank_value(self, value: float) -> float:
        """Smaller is better."""
        return -value if self.maximize else value

    def _promotable(self, t: _Trial) -> bool:
        values = sorted(self._rank_value(o.values[t.rung]) for o in self.trials.values()
                        if o.bracket == t.bracket and t.rung in o.values)
        top = len(values) // self.eta
        return top > 0 and self._rank_value(t.values[t.rung]) <= values[top - 1]

    def _finished(self) -> set[int]:
        """The brackets in which some trial has reached the last rung, or completed below
        it (its command has no more steps)."""
        return {t.bracket for tid, t in self.trials.items()
                if t.done or (t.values and self.is_top(tid, max(t.values)))}

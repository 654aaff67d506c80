"""Population-based training's decisions (Jaderberg et al. 2017, "Population Based Training of
Neural Networks"; the knobs and their defaults are Ray Tune's PopulationBasedTraining's).

Pure: what the population has reported goes in, a Decision comes out, and nothing here reads
a clock, a file or the store. The driver's side (hpsearch.pruning.pbt) writes each Decision
ahead in the store before it acts on it (copying the donor's checkpoint, launching the next
segment), so a resumed driver acts on a stored decision and never makes one twice.

Asynchronous, as Ray's default: each member runs a segment of `interval` reported steps;
when one reaches its boundary it is ranked against the latest boundary score of every member
that has one and is not done. In the bottom `quantile` it takes (exploits) the checkpoint a
random member of the top `quantile` saved at that member's last boundary, and continues with
that member's parameters explored: each mutable parameter resampled from its range with
`resample_probability`, else a number scaled by a random one of `factors` (clipped to its
range and step) and a choice moved to a neighbouring one. Otherwise it continues as it is.
No member waits for the others. The random draws of a decision are seeded by (seed, member,
boundary), so the same history gives the same decisions.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from hpsearch.spec.model import Param


@dataclass(frozen=True)
class PbtSettings:
    interval: int                     # perturbation_interval: reported steps per segment
    max_resource: int                 # steps a member runs in all
    mutations: tuple[str, ...]        # parameters that change (the searched ones by default)
    maximize: bool = False
    burn_in: int = 0                  # no member is exploited before this step
    quantile: float = 0.25            # bottom and top fraction (Ray: at most half each)
    resample_probability: float = 0.25
    factors: tuple[float, ...] = (0.8, 1.2)
    seed: int | None = None
    # A replay (`hpsearch replay`): one member, (from_step, params) pieces; a segment ends
    # where a piece begins, and each boundary takes the next piece's params, no exploit.
    replay: tuple[tuple[int, dict[str, Any]], ...] = ()


@dataclass(frozen=True)
class Decision:
    """What a member does after its boundary `at_step`: its next segment's `params`, from
    its own checkpoint (donor None) or from `donor`'s saved at `donor_step`."""

    member: int
    at_step: int
    params: dict[str, Any]
    donor: int | None = None
    donor_step: int | None = None
    resampled: tuple[str, ...] = ()   # parameters drawn anew (the others were perturbed)
    checkpoint: str | None = None     # the donor's checkpoint, as named in the member's
                                      # folder once taken (the driver's side sets it)

    @property
    def exploits(self) -> bool:
        return self.donor is not None


@dataclass
class Member:
    params: dict[str, Any]
    step: int | None = None           # the last boundary it reached
    score: float | None = None        # its objective there
    done: bool = False


@dataclass(frozen=True)
class Boundary:
    """A member reached a boundary: its score there, the score its segment started from (its
    previous boundary's, or the donor's after an exploit; None at the first) and the
    parameters it trained with since: what PB2's model learns from (pb2_explore)."""

    member: int
    step: int
    score: float
    before: float | None
    params: dict[str, Any]


# How an exploit's parameters are explored: (population, member, the donor's parameters, the
# decision's generator) -> (parameters, those drawn anew). Population.explore is PBT's own.
Explorer = Callable[["Population", int, dict[str, Any], random.Random],
                    tuple[dict[str, Any], tuple[str, ...]]]


@dataclass
class Population:
    settings: PbtSettings
    space: tuple[Param, ...]
    members: dict[int, Member] = field(default_factory=dict)
    history: list[Boundary] = field(default_factory=list)  # every boundary, in order
    explorer: Explorer | None = None  # None: perturb or resample (explore)

    def add(self, member: int, params: dict[str, Any]) -> None:
        self.members[member] = Member(dict(params))

    def budget(self, member: int) -> int:
        """The step the member's next segment runs to: one interval past its boundary (or
        from the start), at most max_resource."""
        start = self.members[member].step
        reached = 0 if start is None else start + 1
        stops = [step for step, _ in self.settings.replay if step > reached]
        return min(reached + self.settings.interval, self.settings.max_resource, *stops)

    def reached(self, member: int, step: int, score: float) -> bool:
        """Record the member's boundary; True if it has run max_resource steps (done)."""
        m = self.members[member]
        self.history.append(Boundary(member, step, score, m.score, dict(m.params)))
        m.step, m.score = step, score
        m.done = step + 1 >= self.settings.max_resource
        return m.done

    def decide(self, member: int) -> Decision:
        """The member's decision at its last boundary."""
        m = self.members[member]
        assert m.step is not None, "decide() after reached()"
        if self.settings.replay:  # the piece the next step falls in
            params = [p for step, p in self.settings.replay if step <= m.step + 1][-1]
            return Decision(member, m.step, {**m.params, **params})
        bottom, top = self.quantiles()
        if m.step + 1 < self.settings.burn_in or member not in bottom or not top:
            return Decision(member, m.step, dict(m.params))
        rng = random.Random(f"{self.settings.seed}:{member}:{m.step}")
        donor = rng.choice(top)
        source = self.members[donor]
        params, resampled = self.explorer(self, member, source.params, rng) if self.explorer \
            else self.explore(source.params, rng)
        return Decision(member, m.step, params, donor, source.step, resampled)

    def apply(self, decision: Decision) -> None:
        """The member after its decision: its parameters, and its progress the donor's."""
        m = self.members[decision.member]
        m.params = dict(decision.params)
        if decision.donor is not None:
            donor = self.members[decision.donor]
            m.step, m.score = decision.donor_step, donor.score

    def quantiles(self) -> tuple[list[int], list[int]]:
        """(bottom, top): members by their last score, worst first; none while fewer than
        two have one. Each holds ceil(n * quantile) members, at most half of them."""
        ranked = sorted((i for i, m in self.members.items() if m.score is not None
                         and not m.done and math.isfinite(m.score)),
                        key=lambda i: (self._goodness(i), i))
        if len(ranked) <= 1:
            return [], []
        k = min(math.ceil(len(ranked) * self.settings.quantile), len(ranked) // 2)
        return (ranked[:k], ranked[-k:]) if k else ([], [])

    def explore(self, params: dict[str, Any], rng: random.Random
                ) -> tuple[dict[str, Any], tuple[str, ...]]:
        """`params` with each mutable parameter perturbed or resampled; a conditional one
        that the change deactivates is dropped, one it activates is drawn."""
        out, resampled = dict(params), []
        for p in self.space:
            if p.name not in self.settings.mutations or p.name not in params or \
                    p.kind == "fixed":
                continue
            if rng.random() < self.settings.resample_probability or \
                    (p.kind == "categorical" and params[p.name] not in p.choices):
                out[p.name] = draw(p, rng)
                resampled.append(p.name)
            else:
                out[p.name] = perturb(p, params[p.name], rng, self.settings.factors)
        active: dict[str, Any] = {}
        for p in self.space:  # spec order: a parent before its children
            if p.active_in(active):
                active[p.name] = out[p.name] if p.name in out else \
                    p.value if p.kind == "fixed" else draw(p, rng)
        return active, tuple(resampled)

    def _goodness(self, member: int) -> float:
        score = self.members[member].score
        assert score is not None
        return score if self.settings.maximize else -score


def draw(p: Param, rng: random.Random) -> Any:
    """A value of `p` drawn from its whole range: uniform, or log-uniform with `log`."""
    if p.kind == "categorical":
        return rng.choice(p.choices)
    low, high = float(p.low), float(p.high)  # type: ignore[arg-type]
    x = math.exp(rng.uniform(math.log(low), math.log(high))) if p.log else \
        rng.uniform(low, high)
    return _fit(p, x)


def perturb(p: Param, value: Any, rng: random.Random, factors: tuple[float, ...]) -> Any:
    """A choice moved one place either way (staying at an end); a number times one of
    `factors`, kept in its range and on its step."""
    if p.kind == "categorical":
        i = p.choices.index(value) + rng.choice((-1, 1))
        return p.choices[min(max(i, 0), len(p.choices) - 1)]
    return _fit(p, float(value) * rng.choice(factors))


def _fit(p: Param, x: float) -> int | float:
    """`x` clipped to p's range, on its step (from low) and of its kind."""
    low, high = float(p.low), float(p.high)  # type: ignore[arg-type]
    x = min(max(x, low), high)
    if p.step:
        x = low + round((x - low) / p.step) * p.step
        x = min(x, high)
    if p.kind == "int":
        return int(min(max(round(x), low), high))
    return x


def next_to_run(waiting: Sequence[int], steps: dict[int, int | None],
                paused: dict[int, int]) -> int:
    """Which paused member's segment runs next: the least progress first, of equal progress
    the one paused first (`paused`: each one's place in the order of pauses). By id
    instead, a member could wait for ever: in the digits benchmark (seed 1) members 0-2
    each took member 3's checkpoint of step 9 again and again, so came back to step 9,
    and member 3, paused at step 9 with the highest id, never ran."""
    return min(waiting, key=lambda t: (steps.get(t) or 0, paused.get(t, 0), t))

"""A pbt population's first parameters: member k's drawn from the space with a generator
seeded by (seed, k), as pbt's explore draws (hpsearch.search.pbt_policy.draw), so a search
resumed after a crash asks the members it had not asked yet with the parameters an
uninterrupted run gives them. Without a seed each draw is fresh. An enqueued point's
parameters are taken as given, the rest drawn; so are a replay's first (search.replay).
The results go to the population (the driver's hpsearch.pruning.pbt), not here: tell
records nothing.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from hpsearch.search.base import Asked, Search, WarmTrial
from hpsearch.search.pbt_policy import draw
from hpsearch.spec.model import Search as SearchSpec
from hpsearch.store.rows import TrialRow


class PopulationSearch(Search):
    def __init__(self, section: SearchSpec) -> None:
        self.space, self.seed = section.space, section.seed
        replay = section.option("replay")  # one member, its first parameters given
        self.first: dict[str, Any] = dict(replay[0]["params"]) if replay else {}
        self.total = section.trials
        self.next_id = 0

    @property
    def asked(self) -> int:
        return self.next_id

    def rebuild(self, trials: list[TrialRow], study_attrs: dict,
                warm: Sequence[WarmTrial] = ()) -> None:
        self.next_id = max((t.id + 1 for t in trials), default=0)

    def ask(self, fixed: dict[str, Any] | None = None, mark: dict | None = None
            ) -> Asked | None:
        if self.next_id >= self.total:
            return None
        rng = random.Random(f"hpsearch-pbt:{self.seed}:{self.next_id}") \
            if self.seed is not None else random.Random()
        given = {**self.first, **(fixed or {})}
        params: dict[str, Any] = {}
        for p in self.space:  # spec order: a parent before its children
            if p.active_in(params):
                params[p.name] = given[p.name] if p.name in given else \
                    p.value if p.kind == "fixed" else draw(p, rng)
        asked = Asked(self.next_id, params, dict(mark or {}))
        self.next_id += 1
        return asked

    def tell(self, trial_id: int, state: str, values: list[float] | None,
             intermediate: dict[int, float] | None = None) -> dict | None:
        return None

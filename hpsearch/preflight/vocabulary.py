"""The Vocabulary the spec checks names against, from the seams' registries."""

from __future__ import annotations

import functools

from hpsearch.executors.registry import EXECUTORS
from hpsearch.launch.registry import LAUNCHERS, RUNTIMES
from hpsearch.search.registry import STRATEGIES
from hpsearch.spec.vocabulary import Vocabulary


@functools.cache
def vocabulary() -> Vocabulary:
    return Vocabulary(strategies=tuple(s.facts for s in STRATEGIES),
                      executors=tuple(e.facts for e in EXECUTORS),
                      launchers=LAUNCHERS.names(), runtimes=RUNTIMES.names())

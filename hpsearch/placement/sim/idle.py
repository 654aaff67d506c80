"""Where a pilot's idle node-seconds go: a ledger the `pilot` policy advances before every
change of its state, charging each running pilot's free nodes over the interval since the
last change to one cause, judged by the state during that interval:

- `opening`: the pilot has run no trial yet (it started before a trial was bound to it);
- `draining`: the pilot is empty after running trials (waiting out its idle timeout);
- `fragments`: some of its nodes are busy and a ready trial waits that needs more nodes
  than it has free;
- `time_left`: a ready trial would fit its free nodes but not its remaining time;
- `surplus`: some nodes are busy and no trial is ready at all (more nodes than the search's
  trials in flight need);
- `tail`: the search has no trial left to hand out (every trial bound), whatever the pilot.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

CAUSES = ("opening", "draining", "fragments", "time_left", "surplus", "tail")


class PilotState(Protocol):
    """What the ledger reads of a running pilot."""

    @property
    def idle_nodes(self) -> int: ...
    @property
    def trials(self) -> int: ...
    @property
    def running(self) -> int: ...
    @property
    def limit(self) -> float: ...


def cause_of(pilot: PilotState, t: float, ready: list[tuple[int, float]],
             all_bound: bool) -> str:
    """The cause of `pilot`'s free nodes at t; `ready` holds (nodes, run time) of the ready
    trials, `all_bound` says that no trial is left to hand out."""
    if all_bound:
        return "tail"
    if pilot.running == 0:
        return "opening" if pilot.trials == 0 else "draining"
    if not ready:
        return "surplus"
    if any(k <= pilot.idle_nodes and t + d > pilot.limit for k, d in ready):
        return "time_left"
    return "fragments"


class IdleLedger:
    """Idle node-seconds of the running pilots, by cause (see the module docstring)."""

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(CAUSES, 0.0)
        self.last: float | None = None

    def advance(self, t: float, pilots: Iterable[PilotState],
                ready: list[tuple[int, float]], all_bound: bool) -> None:
        """Charge the interval since the last call to the causes of the state then (the
        state the caller holds before it changes anything at t)."""
        if self.last is not None and t > self.last:
            for pilot in pilots:
                if pilot.idle_nodes:
                    cause = cause_of(pilot, self.last, ready, all_bound)
                    self.seconds[cause] += pilot.idle_nodes * (t - self.last)
        self.last = t if self.last is None else max(self.last, t)

    def node_hours(self) -> tuple[tuple[str, float], ...]:
        return tuple((cause, seconds / 3600) for cause, seconds in self.seconds.items())

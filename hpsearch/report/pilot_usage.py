"""Pilot node-hours for `hpsearch report`: how long each pilot held how many nodes, and how
much of that its nodes ran attempts (busy) or not (idle). Pure: the caller reads the store,
sacct and the heartbeat files.

Held: sacct's ElapsedRaw x NNodes of the pilot's job where sacct knows it, else the store's
start and end of the pilot (its end: the recorded one, its last heartbeat if it left while no
driver recorded it, or now). Busy: per node of the pilot, the time during which at least one
attempt ran on it (a pilot with several slots per node runs trials side by side on one node:
that node is busy once, not once per trial), from the store's start and end of each attempt.
Idle = held - busy (starting, waiting for work, winding down before its end).
"""

from __future__ import annotations

from dataclasses import dataclass

from hpsearch.store import rows
from hpsearch.views.pilots import pilot_line

Span = tuple[tuple[str, ...], float, float]  # (nodes, start, end) of one attempt


@dataclass
class PilotUsage:
    """One pilot job: how long it held how many nodes, and how much of that ran attempts."""

    pilot: int
    job_id: str | None
    state: str             # the store's, or "exited"/"draining" from its heartbeat
    nodes: int             # 0 while it never ran
    seconds: float         # how long it held them
    busy_node_seconds: float
    attempts: int          # attempts that ran in it
    source: str            # of `seconds` and `nodes`: "sacct" or "store"
    reason: str | None = None

    @property
    def held_node_hours(self) -> float:
        return self.nodes * self.seconds / 3600

    @property
    def busy_node_hours(self) -> float:
        return self.busy_node_seconds / 3600

    @property
    def idle_node_hours(self) -> float:
        """Held less busy; never below 0 (the store's times may be a moment off sacct's)."""
        return max(0.0, self.held_node_hours - self.busy_node_hours)


def busy_node_seconds(spans: list[Span]) -> float:
    """Sum over nodes of the time at least one span covered that node (the union of the
    spans' intervals, node by node)."""
    by_node: dict[str, list[tuple[float, float]]] = {}
    for nodes, start, end in spans:
        for node in nodes:
            by_node.setdefault(node, []).append((start, max(start, end)))
    total = 0.0
    for intervals in by_node.values():
        reach = None
        for start, end in sorted(intervals):
            if reach is None or start > reach:
                total += end - start
                reach = end
            elif end > reach:
                total += end - reach
                reach = end
    return total


def pilot_usage(row: rows.PilotRow, node_count: int, record, spans: list[Span],
                beat: dict | None, now: float) -> PilotUsage:
    """One pilot's usage. node_count: of row.nodes; record: sacct's JobUsage of its job
    (None: not known there); spans: the attempts that ran in it; beat: its heartbeat file
    where the store has not recorded its end (None otherwise)."""
    line = pilot_line(row, [], beat, now)
    if record is not None and record.elapsed is not None:
        nodes, seconds, source = record.nodes or node_count, record.elapsed, "sacct"
    elif row.started is None or not row.nodes:
        nodes, seconds, source = 0, 0.0, "store"
    else:
        nodes, seconds, source = node_count, line.age, "store"
    # never busier than held: sacct's elapsed is whole seconds and the store's times of its
    # attempts are the driver's sightings (a walkthrough's report showed a pilot 103% busy)
    busy = min(busy_node_seconds(spans), nodes * seconds) if nodes else busy_node_seconds(spans)
    return PilotUsage(row.id, row.job_id, line.state, nodes, seconds, busy, len(spans), source,
                      line.reason)

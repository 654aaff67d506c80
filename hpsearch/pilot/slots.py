"""A pilot's slots: which of its nodes (and GPUs) each running trial holds.

Every node of a pilot has `per_node` slots; one slot is the smallest trial's share of a
node (its tasks' CPUs and its GPUs). A trial of n nodes takes the same slot indices on n
nodes, so its GPUs have the same ids on each of them (one CUDA_VISIBLE_DEVICES for all its
ranks): `width` adjacent ones on each (a larger trial's share: hpsearch.spec.model.slot_width).
Slot index k of a node owns GPUs k*g .. k*g+g-1 of that node's list; a trial holds the first
of its slots' GPUs that it asked for, and no more: a 3-GPU trial on two 2-GPU slots holds 3
(the fourth stays idle), a CPU-only trial beside GPU trials holds none. Where the leaf switch
of each node is known, a multi-node trial gets nodes under one leaf (the fullest leaf that
holds it, so emptier leaves stay whole for later trials), else the fewest leaves. A node set aside
(`set_aside`: a trial was lost there) gets no new trial until its time is up. Pure
bookkeeping.

Trials of several sizes share the slots as Slurm's backfill scheduler shares a cluster: a
trial that does not fit now (`reservation`) is promised the slots that free up first, and a
later, smaller trial may use those only if it will be done before they are all free
(`take(..., avoid=reservation)`, its `seconds` known); else it waits, so a stream of small
trials never starves a large one. Where running trials' durations are unknown, the promised
slots are simply kept from everyone else.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

Pair = tuple[str, int]  # (node, slot index)


@dataclass(frozen=True)
class Grant:
    """What one trial holds: its nodes (the first runs its command), its first slot index
    and how many from there (`width`) on each, their GPU ids."""

    nodes: tuple[str, ...]
    slot: int
    gpus: tuple[str, ...] = ()
    width: int = 1

    @property
    def indices(self) -> range:
        return range(self.slot, self.slot + self.width)

    def pairs(self) -> list[Pair]:
        return [(node, k) for node in self.nodes for k in self.indices]


@dataclass(frozen=True)
class Reservation:
    """Slots promised to a trial that does not fit yet, and when they will all be free
    (monotonic seconds; inf where a running trial's end is not known)."""

    pairs: frozenset[Pair]
    start: float


class Slots:
    def __init__(self, nodes: list[str], per_node: int, gpus_per_slot: int = 0,
                 gpu_ids: list[str] | None = None,
                 leaf_of: dict[str, str] | None = None) -> None:
        """gpu_ids: the GPU ids each node shows (the same on every node); needed when
        gpus_per_slot > 0, and it must hold per_node * gpus_per_slot of them. leaf_of:
        node -> its leaf switch, where known."""
        if gpus_per_slot and len(gpu_ids or ()) < per_node * gpus_per_slot:
            raise ValueError(f"{per_node} slot(s) of {gpus_per_slot} GPU(s) need "
                             f"{per_node * gpus_per_slot} GPUs per node; the node shows "
                             f"{len(gpu_ids or ())} ({','.join(gpu_ids or ()) or 'none'})")
        self.nodes, self.per_node = list(nodes), per_node
        self.gpus_per_slot, self.gpu_ids = gpus_per_slot, list(gpu_ids or ())
        self.busy: dict[Pair, float] = {}  # (node, slot index) held -> its expected end
        self.leaf_of = leaf_of or {}
        self.aside: dict[str, float] = {}  # node -> monotonic time it may take trials again

    def set_aside(self, node: str, seconds: float) -> None:
        """No new trial on `node` for `seconds` (its running trials keep their slots)."""
        self.aside[node] = time.monotonic() + seconds

    def _usable(self) -> list[str]:
        now = time.monotonic()
        return [node for node in self.nodes if self.aside.get(node, 0.0) <= now]

    def take(self, nodes_needed: int, seconds: float | None = None,
             avoid: Reservation | None = None, width: int = 1,
             gpus: int | None = None) -> Grant | None:
        """Slots for one trial of `nodes_needed` nodes, `width` slots on each, or None if
        they are not free now. Slot 0 on every node before slot 1 on any: trials spread
        over the nodes. `seconds`: how long it will run, if known. `avoid`: slots promised
        to a larger trial, which this one may use only if it ends before they are all free.
        `gpus`: the GPUs per node it asked for (None: its slots' all)."""
        now = time.monotonic()
        end = now + seconds if seconds else math.inf
        backfills = avoid is None or (end < math.inf and end <= avoid.start)
        promised = frozenset() if backfills or avoid is None else avoid.pairs
        usable = self._usable()
        for slot in range(self.per_node - width + 1):
            block = range(slot, slot + width)
            free = [node for node in usable
                    if not any((node, k) in self.busy or (node, k) in promised
                               for k in block)]
            if len(free) >= nodes_needed:
                return self._grant(self._by_leaf(free, nodes_needed), slot, end, width, gpus)
        return None

    def _grant(self, nodes: tuple[str, ...], slot: int, end: float, width: int,
               gpus: int | None) -> Grant:
        g = self.gpus_per_slot
        held = self.gpu_ids[slot * g:(slot + width) * g]
        grant = Grant(nodes, slot, tuple(held if gpus is None else held[:gpus]), width)
        self.busy.update((pair, end) for pair in grant.pairs())
        return grant

    def reservation(self, nodes_needed: int, width: int = 1) -> Reservation | None:
        """The slots a trial of `nodes_needed` nodes, `width` on each, that does not fit now
        is promised: the same slot indices on that many nodes (under one leaf where one
        holds them), those whose trials end first (free ones first, then known ends;
        unknown ends last), so that the promise only gains free slots as trials end. None
        if the pilot never holds it."""
        now, usable = time.monotonic(), self._usable()
        groups: dict[str, list[str]] = {}
        for node in usable:
            groups.setdefault(self.leaf_of.get(node, ""), []).append(node)
        candidates = [nodes for nodes in groups.values() if len(nodes) >= nodes_needed] \
            or ([usable] if len(usable) >= nodes_needed else [])
        best: tuple[tuple[float, int], Reservation] | None = None
        for slot in range(self.per_node - width + 1):
            block = range(slot, slot + width)
            for nodes in candidates:
                ends = sorted((max(now, *(self.busy.get((node, k), now) for k in block)),
                               i, node) for i, node in enumerate(nodes))[:nodes_needed]
                start = max(end for end, _, _ in ends)
                free = sum(1 for _, _, node in ends
                           if not any((node, k) in self.busy for k in block))
                rank = (start, -free)
                if best is None or rank < best[0]:
                    best = (rank, Reservation(frozenset((node, k) for _, _, node in ends
                                                        for k in block), start))
        return None if best is None else best[1]

    def _by_leaf(self, free: list[str], n: int) -> tuple[str, ...]:
        """n of the free nodes: under one leaf if one holds them (best fit), else from the
        leaves with the most free nodes first; in the allocation's order (the first node
        runs the command and is the ranks' MASTER_ADDR)."""
        groups: dict[str, list[str]] = {}
        for node in free:
            groups.setdefault(self.leaf_of.get(node, ""), []).append(node)
        fitting = [nodes for nodes in groups.values() if len(nodes) >= n]
        if fitting:
            chosen = min(fitting, key=len)[:n]
        else:
            chosen = []
            for nodes in sorted(groups.values(), key=len, reverse=True):
                chosen += nodes[:n - len(chosen)]
        order = {node: i for i, node in enumerate(self.nodes)}
        return tuple(sorted(chosen, key=order.__getitem__))

    def give_back(self, grant: Grant) -> None:
        for pair in grant.pairs():
            self.busy.pop(pair, None)

    def hold(self, grant: Grant) -> None:
        """Mark a grant held (a pilot that found its trial still running after a restart)."""
        self.busy.update((pair, math.inf) for pair in grant.pairs())

    def free_for(self, nodes_needed: int) -> int:
        """How many more trials of `nodes_needed` nodes could start now."""
        usable = self._usable()
        return sum(sum(1 for node in usable if (node, slot) not in self.busy)
                   // nodes_needed for slot in range(self.per_node))

    @property
    def total(self) -> int:
        return len(self.nodes) * self.per_node

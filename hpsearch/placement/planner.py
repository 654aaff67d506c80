"""Placement of one experiment's Slurm jobs, as the Slurm executor submits them.

The planner learns the topology once (the spec's `placement.topology` file, else
$HPSEARCH_TOPOLOGY, else the tree plugin through `scontrol show topology`), reads live node
state from sinfo at most once per executor.poll_interval (2 s at least) for all its jobs
together, and remembers the nodes it has named for
its own jobs that have not started yet, so two trials submitted in one burst never get the
same free nodes. The rule itself is hpsearch.placement.policy.place().

Modes (placement.mode): `switches` asks Slurm for `--switches=1@max_wait` (the tree plugin
does the rest); `nodelist` names the nodes (`--nodelist`) and re-chooses them with
`scontrol update ReqNodeList=` when a job pends longer than replan_after; `auto` is
`switches` where the tree plugin is on and `nodelist` elsewhere.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace

from hpsearch.placement.policy import Placement, place
from hpsearch.placement.topology import (
    LeafState,
    Topology,
    cluster_topology,
    leaf_states,
    load_topology,
)
from hpsearch.slurm.hostlist import expand
from hpsearch.spec.model import SlurmJob

REFRESH = 2.0  # seconds a sinfo reading is reused, at least (executor.poll_interval if longer)


@dataclass
class _Ask:
    first: float  # monotonic time of the first request for this attempt
    nodes: tuple[str, ...] = ()  # nodes named for it while its job waits to start
    replanned: float = 0.0
    excluded: set = field(default_factory=set)  # nodes its job must not run on
    k: int = 1  # the nodes its trial needs (per-trial resources: each its own)


class Planner:
    def __init__(self, job: SlurmJob, slurm) -> None:
        self.cfg, self.slurm = job.placement, slurm
        self.k = job.resources.nodes  # a trial's nodes, unless choose() is told its own
        self.partition = job.resources.partition
        self.array = job.executor.array  # single-node trials go in arrays: never placed
        self.asks: dict[tuple[int, int], _Ask] = {}
        self._topology: Topology | None = None
        self._mode: str | None = None
        self._source = self.cfg.topology or os.environ.get("HPSEARCH_TOPOLOGY")
        if self._source and self.cfg.policy != "any":
            self._topology = load_topology(self._source)  # a bad file stops submit (exit 2)
        self._states: dict[str, LeafState] | None = None
        self._states_at = 0.0
        self.refresh = max(REFRESH, job.executor.poll_interval)

    # -- what the topology is -------------------------------------------------------------
    @property
    def topology(self) -> Topology | None:
        self._setup()
        return self._topology

    @property
    def mode(self) -> str:
        """switches | nodelist | off (policy any, or no topology known), for trials of more
        than one node; a single-node trial is never placed under switches or in an array
        (_mode_for)."""
        return self._setup()

    def _mode_for(self, k: int) -> str:
        if k == 1 and (self.array or self.mode == "switches"):
            return "off"  # one node is always under one switch
        return self.mode

    def _setup(self) -> str:
        """Learn the topology and the mode, once; returns the mode."""
        if self._mode is not None:
            return self._mode
        tree = self.slurm.config_value("TopologyPlugin") in ("topology/tree", "tree")
        if self._topology is None and (self._source or tree):
            self._topology = cluster_topology(self.slurm, [self._source])
        mode = self.cfg.mode
        if mode == "auto":
            mode = "switches" if tree else "nodelist"
        if self.cfg.policy == "any" or (mode == "nodelist" and not self._topology):
            mode = "off"
        self._mode = mode
        return mode

    def leaves(self, hostlist: str | None) -> str | None:
        """The leaf switches of a hostlist, comma-separated, or None if unknown."""
        if not hostlist or self.topology is None:
            return None
        found = sorted(self.topology.leaves_spanned(expand(hostlist)))
        return ",".join(found) or None

    # -- choosing -------------------------------------------------------------------------
    def choose(self, trial_id: int, attempt: int, options: tuple[str, ...] = (),
               nodes: int | None = None) -> Placement:
        """Options for a new job, or Placement(wait=True): ask again later. `options`: the
        job's other sbatch options; nodes it `--exclude`s (a retry rule's) are never named.
        `nodes`: the trial's own node count (per-trial resources), else the spec's."""
        key = (trial_id, attempt)
        ask = self.asks.setdefault(key, _Ask(first=time.monotonic()))
        ask.k = k = nodes or self.k
        ask.excluded = {n for o in options if o.startswith("--exclude=")
                        for n in expand(o.split("=", 1)[1])}
        mode = self._mode_for(k)
        if mode == "off":
            return Placement()
        if mode == "switches":
            return place(k, {}, "leaf-switch", max_wait=self.cfg.max_wait, tree_plugin=True)
        states = self._live(asking=key)
        if k == 1 and not any(s.free for s in states.values()):
            return Placement()  # no idle node: a busy one with room will do
        chosen = place(k, states, "leaf-switch", waited=time.monotonic() - ask.first,
                       max_wait=self.cfg.max_wait)
        if chosen.options:
            ask.nodes = tuple(expand(chosen.options[0].split("=", 1)[1]))
        return chosen

    def replan(self, trial_id: int, attempt: int) -> Placement | None:
        """New nodes for a job that has pended past replan_after with the nodes we named, if
        others fit now (or, past max_wait, the fewest leaves); None to leave it as it is."""
        ask = self.asks.get((trial_id, attempt))
        now = time.monotonic()
        if ask is None or self._mode_for(ask.k) != "nodelist" or not ask.nodes \
                or now - max(ask.first, ask.replanned) < self.cfg.replan_after:
            return None
        ask.replanned = now
        states = self._live(asking=(trial_id, attempt))
        chosen = place(ask.k, states, "leaf-switch", waited=now - ask.first,
                       max_wait=self.cfg.max_wait)
        if not chosen.options:
            return None
        nodes = tuple(expand(chosen.options[0].split("=", 1)[1]))
        if set(nodes) == set(ask.nodes):
            return None
        ask.nodes = nodes
        return chosen

    def started(self, trial_id: int, attempt: int) -> None:
        """Its job runs (or ended): its nodes are no longer only promised."""
        self.asks.pop((trial_id, attempt), None)

    def _live(self, asking: tuple[int, int]) -> dict[str, LeafState]:
        """Per-leaf state, less nodes promised to our other jobs and those `asking` excludes.
        One sinfo reading serves every launch and re-plan for `refresh` seconds: the calls
        per minute do not grow with the jobs in flight."""
        now = time.monotonic()
        if self._states is None or now - self._states_at > self.refresh:
            nodes = self.slurm.sinfo_nodes()
            if self.partition:
                nodes = [n for n in nodes if self.partition in n.partitions]
            topology = self.topology
            if topology is None:  # never: mode nodelist is off without a topology
                raise RuntimeError("placement: live node states asked for without a topology")
            self._states, self._states_at = leaf_states(topology, nodes), now
        taken = {n for key, ask in self.asks.items() if key != asking for n in ask.nodes}
        own = self.asks.get(asking)
        taken |= own.excluded if own else set()
        if not taken:
            return self._states
        return {leaf: _without(state, taken) for leaf, state in self._states.items()}


def _without(state, promised: set[str]):
    return replace(state, free=tuple(n for n in state.free if n not in promised),
                   allocated=state.allocated + tuple(n for n in state.free if n in promised))


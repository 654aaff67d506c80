"""The cluster model of the placement simulator: a two-level fat tree (`Cluster`: free nodes
per leaf, cross-leaf flows on each uplink, and Slurm's and hpsearch's selection rules), the
workload's size tables, and the ring all-reduce cost model that turns where a trial runs into
its step time and run time. `hpsearch.placement.sim.simulate` states the model as a whole."""

from __future__ import annotations

from dataclasses import dataclass, replace

# (nodes, weight): other users' jobs, mostly small, a few large ones that span leaves.
BACKGROUND_SIZES = ((1, 30), (2, 15), (4, 20), (8, 15), (16, 10), (32, 6), (64, 4))
# (nodes, weight): trials of a search over model and data-parallel width.
TRIAL_SIZES = ((1, 25), (2, 20), (4, 20), (8, 20), (16, 15))


@dataclass(frozen=True)
class SimConfig:
    """One workload and cluster. Times in seconds, sizes in bytes, bandwidth in bits/s."""

    nodes: int = 1024
    leaves: int = 32
    oversubscription: float = 4.0       # leaf downlink capacity : uplink capacity
    trials: int = 500
    parallel: int = 16                  # trials the search keeps submitted at once
    seed: int = 1
    max_wait: float = 300.0             # hpsearch's and tree's wait for one leaf (T)
    background_load: float = 0.72       # offered node-seconds / capacity of other users' jobs
    background_mean_duration: float = 3600.0
    trial_mean_duration: float = 1800.0
    warmup: float = 6 * 3600.0          # background-only time before the first trial
    gradient_bytes: float = 100e6       # S: ~25 M fp32 parameters (ResNet-50-sized)
    link_bandwidth: float = 100e9       # B: NIC and leaf downlink, bits/s
    alpha: float = 5e-6                 # per-message latency of one ring step, s
    compute_time: float = 0.2           # c: compute of one step, s (ResNet-50, batch 64, V100)
    # `pilot` (docs/placement.md says why these defaults; pilots.py states each rule):
    pilot_nodes: int = 16               # nodes of a pilot at most (of every one when fixed)
    pilot_time: float = 12 * 3600.0     # a pilot's time limit
    max_pilots: int = 20                # pilots queued and running at once, at most
    idle_timeout: float = 60.0          # a pilot gives back a node idle this long (or exits)
    pilot_fit: str = "best"             # the pilot a trial goes to: "best" or "first"
    pilot_sizing: str = "ready"         # pilots sized to the ready trials, or "fixed"
    pilot_shrink: bool = True           # give back idle nodes one by one, not only all at once
    pilot_hold: str = "queue"           # hold idle nodes as long as pilots queued, or "fixed"
    pilot_make_room: bool = True        # give back idle nodes where a queued pilot would fit

    def __post_init__(self) -> None:
        if self.leaves <= 0 or self.nodes % self.leaves:
            raise ValueError(f"nodes ({self.nodes}) must be a multiple of leaves ({self.leaves})")
        if self.oversubscription < 1:
            raise ValueError("oversubscription must be >= 1")
        if self.pilot_nodes < 1 or self.max_pilots < 1 or self.pilot_time <= 0:
            raise ValueError("pilot_nodes, max_pilots and pilot_time must be positive")
        if self.idle_timeout < 0 or self.compute_time < 0:
            raise ValueError("idle_timeout and compute_time must be >= 0")
        if self.pilot_fit not in ("best", "first") or self.pilot_sizing not in ("ready", "fixed"):
            raise ValueError("pilot_fit must be best or first, pilot_sizing ready or fixed")
        if self.pilot_hold not in ("queue", "fixed"):
            raise ValueError("pilot_hold must be queue or fixed")

    def fixed_pilots(self) -> SimConfig:
        """This configuration with the pilot rules measured before issue 42: pilots of
        pilot_nodes, oldest first, that exit whole after 300 s idle, 10 at most."""
        return replace(self, max_pilots=10, idle_timeout=300.0, pilot_fit="first",
                       pilot_sizing="fixed", pilot_shrink=False, pilot_hold="fixed",
                       pilot_make_room=False)

    @property
    def nodes_per_leaf(self) -> int:
        return self.nodes // self.leaves

    @property
    def uplink_bandwidth(self) -> float:
        """One leaf's total uplink capacity, bits/s."""
        return self.nodes_per_leaf * self.link_bandwidth / self.oversubscription


@dataclass(frozen=True)
class TrialRecord:
    index: int
    nodes: int
    submit: float               # when the search had it ready (submitted it, or queued it
                                # for pilots)
    start: float
    end: float                  # start + duration: how long it holds its nodes in the model
    leaves: tuple[int, ...]     # leaf indices its nodes are under
    bandwidth: float            # B_eff at start, bits/s
    step_time: float            # modeled all-reduce time per step at start, s
    run_time: float             # modeled: the duration stretched by the all-reduce lost to B_eff
    pilot: int = -1             # the pilot it ran in; -1 for a job of its own

    @property
    def wait(self) -> float:
        return self.start - self.submit

    @property
    def turnaround(self) -> float:
        return self.wait + self.run_time

    @property
    def spans(self) -> bool:
        return len(self.leaves) > 1


def ring_allreduce_time(n: int, gradient_bytes: float, bandwidth: float, alpha: float) -> float:
    """2(n-1)/n * S/B + 2(n-1) * alpha; 0 for one node. S in bytes, B in bits/s."""
    if n <= 1:
        return 0.0
    return 2 * (n - 1) / n * gradient_bytes * 8 / bandwidth + 2 * (n - 1) * alpha


def effective_bandwidth(config: SimConfig, job_leaves: dict[int, int],
                        uplink_flows: list[int]) -> float:
    """B_eff of a job with `job_leaves` {leaf: its nodes there}, given the flows through each
    leaf's uplink (its own included). One leaf: the NIC's full bandwidth."""
    if len(job_leaves) <= 1:
        return config.link_bandwidth
    share = min(config.uplink_bandwidth / uplink_flows[leaf] for leaf in job_leaves)
    return min(config.link_bandwidth, share)


def trial_record(config: SimConfig, index: int, nodes: list[int], per_leaf: dict[int, int],
                 ready: float, start: float, duration: float, bandwidth: float,
                 pilot: int = -1) -> TrialRecord:
    """The record of a trial started at `start` on `nodes` with B_eff `bandwidth`: its step
    time, and its run time stretched from `duration` (the run time at the NIC's bandwidth) by
    (c + step time) / (c + step time at the NIC's bandwidth)."""
    k = len(nodes)
    step = ring_allreduce_time(k, config.gradient_bytes, bandwidth, config.alpha)
    at_nic = ring_allreduce_time(k, config.gradient_bytes, config.link_bandwidth, config.alpha)
    stretch = (config.compute_time + step) / (config.compute_time + at_nic) if step else 1.0
    return TrialRecord(index, k, ready, start, start + duration, tuple(sorted(per_leaf)),
                       bandwidth, step, duration * stretch, pilot)


class Cluster:
    """Free nodes, per-leaf free counts, and the cross-leaf flows on each uplink."""

    def __init__(self, config: SimConfig):
        self.config = config
        self.per_leaf = config.nodes_per_leaf
        self.free = [True] * config.nodes
        self.free_in_leaf = [self.per_leaf] * config.leaves
        self.total_free = config.nodes
        self.uplink_flows = [0] * config.leaves

    def leaf_of(self, node: int) -> int:
        return node // self.per_leaf

    def free_nodes_of_leaf(self, leaf: int, k: int) -> list[int]:
        base = leaf * self.per_leaf
        taken = [n for n in range(base, base + self.per_leaf) if self.free[n]]
        return taken[:k]

    def allocate(self, nodes: list[int]) -> dict[int, int]:
        per_leaf: dict[int, int] = {}
        for n in nodes:
            self.free[n] = False
            leaf = self.leaf_of(n)
            per_leaf[leaf] = per_leaf.get(leaf, 0) + 1
        for leaf, count in per_leaf.items():
            self.free_in_leaf[leaf] -= count
        self.total_free -= len(nodes)
        if len(per_leaf) > 1:
            # Every node of a spanning job is one flow through its leaf's uplink: rank order
            # is not leaf-aware in general, and other users' codes exchange all-to-all.
            for leaf, count in per_leaf.items():
                self.uplink_flows[leaf] += count
        return per_leaf

    def release(self, nodes: list[int], per_leaf: dict[int, int]) -> None:
        for n in nodes:
            self.free[n] = True
        for leaf, count in per_leaf.items():
            self.free_in_leaf[leaf] += count
            if len(per_leaf) > 1:
                self.uplink_flows[leaf] -= count
        self.total_free += len(nodes)

    # --- selection rules: each returns a node list, or None to keep waiting ---

    def first_fit(self, k: int) -> list[int] | None:
        if self.total_free < k:
            return None
        chosen = []
        for n, is_free in enumerate(self.free):
            if is_free:
                chosen.append(n)
                if len(chosen) == k:
                    return chosen
        return None

    def best_fit_leaf(self, k: int) -> int | None:
        """Leaf with the fewest free nodes that still holds k (ties: lowest index)."""
        best = None
        for leaf, free in enumerate(self.free_in_leaf):
            if free >= k and (best is None or free < self.free_in_leaf[best]):
                best = leaf
        return best

    def fewest_leaves(self, k: int) -> list[int] | None:
        """hpsearch: fill the leaves with the most free nodes first."""
        if self.total_free < k:
            return None
        chosen: list[int] = []
        for leaf in sorted(range(len(self.free_in_leaf)), key=lambda i: -self.free_in_leaf[i]):
            chosen += self.free_nodes_of_leaf(leaf, k - len(chosen))
            if len(chosen) == k:
                return chosen
        return None

    def tree_span(self, k: int) -> list[int] | None:
        """Slurm tree across leaves under the spine: largest leaves until the remainder fits
        one leaf, which is then picked best fit."""
        if self.total_free < k:
            return None
        chosen: list[int] = []
        used: set[int] = set()
        while len(chosen) < k:
            need = k - len(chosen)
            fits = [i for i in range(len(self.free_in_leaf))
                    if i not in used and self.free_in_leaf[i] >= need]
            if fits:
                leaf = min(fits, key=lambda i: self.free_in_leaf[i])
            else:
                leaf = max((i for i in range(len(self.free_in_leaf)) if i not in used),
                           key=lambda i: self.free_in_leaf[i])
            used.add(leaf)
            chosen += self.free_nodes_of_leaf(leaf, need)
        return chosen

    def select(self, policy: str, k: int, waited: float, max_wait: float) -> list[int] | None:
        if policy == "first-fit":
            return self.first_fit(k)
        leaf = self.best_fit_leaf(k)
        if leaf is not None:
            return self.free_nodes_of_leaf(leaf, k)
        if waited + 1e-9 < max_wait:   # tolerance: the timeout event's float arithmetic
            return None
        return self.tree_span(k) if policy == "tree" else self.fewest_leaves(k)

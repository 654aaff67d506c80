"""A discrete-event model of a two-level fat tree, to compare placement policies.

`simulate(policy, config)` runs one seeded workload: a Poisson stream of other users' jobs
(placed first-fit, as a plain Slurm does) and a search that keeps `parallel` trials of 1-16
nodes in flight. Policies for the trials:

- `first-fit`: Slurm's linear selection: the lowest-numbered free nodes, no topology.
- `tree`: Slurm's tree best-fit with `--switches=1@max_wait`: the best-fit leaf if one holds
  the trial; after waiting `max_wait` it spans, as Slurm's tree code does (the lowest switch
  that holds the trial, here the spine, then the leaves with the most free nodes until the
  remainder fits one leaf, which is chosen best fit).
- `hpsearch`: the rule of `hpsearch.placement.policy`: the best-fit leaf (single nodes too,
  so whole leaves stay free); after waiting `max_wait`, the fewest leaves, the leaves with the
  most free nodes first.

`tree` and `hpsearch` wait the same `max_wait` (hpsearch passes it as `--switches=1@max_wait`
where the tree plugin is on), so they differ only in how they span once the wait is over.

Each trial's modeled all-reduce time per step (`step_time`) uses the ring cost
2(n-1)/n * S / B_eff + 2(n-1) * alpha, where B_eff is the NIC bandwidth, or for a trial that
spans leaves, the share of its leaves' uplinks left to it by every spanning job (background
and trials) running at its start. docs/placement.md states the model and its assumptions.
Pure Python; deterministic for a seed.
"""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass, field

POLICIES = ("first-fit", "tree", "hpsearch")

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

    def __post_init__(self) -> None:
        if self.leaves <= 0 or self.nodes % self.leaves:
            raise ValueError(f"nodes ({self.nodes}) must be a multiple of leaves ({self.leaves})")
        if self.oversubscription < 1:
            raise ValueError("oversubscription must be >= 1")

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
    submit: float
    start: float
    end: float
    leaves: tuple[int, ...]     # leaf indices its nodes are under
    bandwidth: float            # B_eff at start, bits/s
    step_time: float            # modeled all-reduce time per step at start, s

    @property
    def wait(self) -> float:
        return self.start - self.submit

    @property
    def spans(self) -> bool:
        return len(self.leaves) > 1


@dataclass(frozen=True)
class SimResult:
    policy: str
    spanning_fraction: float    # of multi-node trials
    mean_wait: float
    p95_wait: float
    utilization: float          # busy node-seconds / capacity, first trial submit to last end
    mean_step_time: float       # of multi-node trials
    trials: tuple[TrialRecord, ...] = field(repr=False)


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
        for leaf in sorted(range(len(self.free_in_leaf)), key=lambda l: -self.free_in_leaf[l]):
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
            fits = [l for l in range(len(self.free_in_leaf))
                    if l not in used and self.free_in_leaf[l] >= need]
            if fits:
                leaf = min(fits, key=lambda l: self.free_in_leaf[l])
            else:
                leaf = max((l for l in range(len(self.free_in_leaf)) if l not in used),
                           key=lambda l: self.free_in_leaf[l])
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


def _pick(rng: random.Random, table: tuple[tuple[int, int], ...]) -> int:
    sizes, weights = zip(*table)
    return rng.choices(sizes, weights)[0]


def _workload(config: SimConfig):
    """The seeded workload, identical for every policy: background (arrival, size, duration)
    and trials (size, duration) in submission order."""
    rng = random.Random(config.seed)
    mean_size = sum(s * w for s, w in BACKGROUND_SIZES) / sum(w for _, w in BACKGROUND_SIZES)
    rate = config.background_load * config.nodes / (mean_size * config.background_mean_duration)
    trial_sizes = [_pick(rng, TRIAL_SIZES) for _ in range(config.trials)]
    trial_durations = [rng.expovariate(1 / config.trial_mean_duration) + 60
                       for _ in range(config.trials)]
    # Background arrivals come from their own stream, generated lazily as the run needs them.
    bg_rng = random.Random(config.seed * 7919 + 1)

    def background():
        t = 0.0
        while True:
            t += bg_rng.expovariate(rate)
            size = min(_pick(bg_rng, BACKGROUND_SIZES), config.nodes)
            yield t, size, bg_rng.expovariate(1 / config.background_mean_duration) + 60

    return trial_sizes, trial_durations, background()


_ARRIVE, _END, _TIMEOUT = 0, 1, 2


def simulate(policy: str, config: SimConfig = SimConfig()) -> SimResult:
    """Run the workload of `config` with trials placed by `policy` (one of POLICIES).

    Pending jobs (background and trials) are tried in submission order at every event, and
    any that can start does (backfill without reservations). Background jobs are placed
    first-fit under every policy."""
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}, not {policy!r}")
    cluster = Cluster(config)
    trial_sizes, trial_durations, background = _workload(config)
    events: list[tuple[float, int, int, object]] = []
    seq = 0

    def push(t: float, kind: int, payload: object) -> None:
        nonlocal seq
        heapq.heappush(events, (t, seq, kind, payload))
        seq += 1

    next_bg = next(background)
    push(next_bg[0], _ARRIVE, ("bg", next_bg[1], next_bg[2]))
    pending: list[tuple[float, int, str, int, float, int]] = []  # submit, seq, kind, k, dur, idx
    records: list[TrialRecord] = []
    submitted = finished = 0
    busy = 0.0               # node-seconds busy since the first trial submit
    last_t = start_t = config.warmup
    busy_nodes = 0

    def submit_trial(t: float) -> None:
        nonlocal submitted, seq
        i = submitted
        submitted += 1
        pending.append((t, seq, "trial", trial_sizes[i], trial_durations[i], i))
        seq += 1
        if policy != "first-fit":
            push(t + config.max_wait, _TIMEOUT, None)

    push(config.warmup, _TIMEOUT, "start")
    while events:
        t, _, kind, payload = heapq.heappop(events)
        if t > last_t and last_t >= start_t:
            busy += busy_nodes * (t - last_t)
        last_t = max(last_t, t)
        if kind == _ARRIVE:
            _, k, dur = payload
            pending.append((t, seq, "bg", k, dur, -1))
            seq += 1
            if finished < config.trials:
                next_bg = next(background)
                push(next_bg[0], _ARRIVE, ("bg", next_bg[1], next_bg[2]))
        elif kind == _END:
            job_kind, nodes, per_leaf = payload
            cluster.release(nodes, per_leaf)
            busy_nodes -= len(nodes)
            if job_kind == "trial":
                finished += 1
                if submitted < config.trials:
                    submit_trial(t)
        elif payload == "start":
            for _ in range(min(config.parallel, config.trials)):
                submit_trial(t)
        # Try every pending job in submission order.
        still: list = []
        for job in pending:
            submit, _, job_kind, k, dur, idx = job
            if job_kind == "bg":
                nodes = cluster.first_fit(k)
            else:
                nodes = cluster.select(policy, k, t - submit, config.max_wait)
            if nodes is None:
                still.append(job)
                continue
            per_leaf = cluster.allocate(nodes)
            busy_nodes += k
            push(t + dur, _END, (job_kind, nodes, per_leaf))
            if job_kind == "trial":
                bw = effective_bandwidth(config, per_leaf, cluster.uplink_flows)
                records.append(TrialRecord(
                    idx, k, submit, t, t + dur, tuple(sorted(per_leaf)), bw,
                    ring_allreduce_time(k, config.gradient_bytes, bw, config.alpha)))
        pending[:] = still
        if finished >= config.trials and not any(j[2] == "trial" for j in pending):
            break
    records.sort(key=lambda r: r.index)
    return _summarize(policy, config, records, busy, start_t, last_t)


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(0, math.ceil(q * len(ordered)) - 1)
    return ordered[rank]


def _summarize(policy: str, config: SimConfig, records: list[TrialRecord], busy: float,
               start: float, end: float) -> SimResult:
    multi = [r for r in records if r.nodes > 1]
    waits = [r.wait for r in records]
    span = end - start
    return SimResult(
        policy=policy,
        spanning_fraction=sum(r.spans for r in multi) / len(multi) if multi else 0.0,
        mean_wait=sum(waits) / len(waits) if waits else 0.0,
        p95_wait=_percentile(waits, 0.95),
        utilization=busy / (config.nodes * span) if span > 0 else 0.0,
        mean_step_time=sum(r.step_time for r in multi) / len(multi) if multi else 0.0,
        trials=tuple(records),
    )

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
- `pilot`: the search holds pilot jobs of up to `pilot_nodes` nodes under one leaf and runs its
  trials inside them, back to back (`hpsearch.placement.sim.pilots`).

`tree` and `hpsearch` wait the same `max_wait` (hpsearch passes it as `--switches=1@max_wait`
where the tree plugin is on), so they differ only in how they span once the wait is over.

Each trial's modeled all-reduce time per step (`step_time`) uses the ring cost
2(n-1)/n * S / B_eff + 2(n-1) * alpha, where B_eff is the NIC bandwidth, or for a trial that
spans leaves, the share of its leaves' uplinks left to it by every spanning job (background
and trials) running at its start. Its modeled run time stretches its duration (the run time at
the NIC's bandwidth) by the all-reduce time lost: duration * (c + step) / (c + step at B),
c being the compute time of a step. docs/placement.md states the model and its assumptions.
Pure Python; deterministic for a seed.

The pieces: `cluster` (the fat tree, the selection rules, the cost model),
`engine` (the workload and the event loop with its Slurm queue), `pilots`
(the `pilot` policy); this module runs one policy and sums up its trials.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from hpsearch.placement.sim.cluster import (
    SimConfig,
    TrialRecord,
    effective_bandwidth,
    trial_record,
)
from hpsearch.placement.sim.engine import Engine, Job, wake, workload
from hpsearch.placement.sim.pilots import PilotRecord, PilotSearch

POLICIES = ("first-fit", "tree", "hpsearch", "pilot")
DEFAULT_CONFIG = SimConfig()  # frozen: one instance serves every call that passes none


@dataclass(frozen=True)
class SimResult:
    policy: str
    spanning_fraction: float    # of multi-node trials
    mean_wait: float
    p95_wait: float
    mean_turnaround: float      # wait + modeled run time
    p95_turnaround: float
    utilization: float          # busy node-seconds / capacity, first trial submit to last end
    mean_step_time: float       # of multi-node trials
    node_hours: float           # held for the search: trials' jobs, or its pilots
    busy_fraction: float        # of node_hours that ran trials (1 without pilots)
    trials: tuple[TrialRecord, ...] = field(repr=False)
    pilots: tuple[PilotRecord, ...] = field(default=(), repr=False)
    # pilots only: their idle node-hours by cause (`hpsearch.placement.sim.idle`)
    idle_node_hours: tuple[tuple[str, float], ...] = ()


class JobPerTrial:
    """The search as Slurm sees it without pilots: one job per trial, placed by `policy`,
    `parallel` submitted at once; a new one is submitted the moment one ends."""

    def __init__(self, engine: Engine, policy: str, sizes: list[int], durations: list[float]):
        self.engine, self.policy = engine, policy
        self.sizes, self.durations = sizes, durations
        self.records: list[TrialRecord] = []
        self.submitted = self.finished = 0

    def _submit(self, t: float) -> None:
        i = self.submitted
        self.submitted += 1
        self.engine.pending.append(Job("trial", self.sizes[i], t, self.durations[i], i))
        if self.policy != "first-fit":
            self.engine.at(t + self.engine.config.max_wait, wake, None)

    def begin(self, t: float) -> None:
        for _ in range(min(self.engine.config.parallel, len(self.sizes))):
            self._submit(t)

    def place(self, t: float, job: Job) -> list[int] | None:
        config = self.engine.config
        return self.engine.cluster.select(self.policy, job.size, t - job.submit, config.max_wait)

    def started(self, t: float, job: Job) -> None:
        config, cluster = self.engine.config, self.engine.cluster
        bandwidth = effective_bandwidth(config, job.per_leaf, cluster.uplink_flows)
        self.records.append(trial_record(config, job.index, job.nodes, job.per_leaf,
                                         job.submit, t, job.duration, bandwidth))

    def ended(self, t: float, job: Job) -> None:
        self.finished += 1
        if self.submitted < len(self.sizes):
            self._submit(t)

    def before_queue(self, t: float) -> None:
        pass

    def after_queue(self, t: float) -> None:
        pass

    def done(self) -> bool:
        return self.finished >= len(self.sizes)


def simulate(policy: str, config: SimConfig = DEFAULT_CONFIG) -> SimResult:
    """Run the workload of `config` with trials placed by `policy` (one of POLICIES).

    Raises ValueError for an unknown policy, or (`pilot`) a pilot that cannot hold a trial."""
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}, not {policy!r}")
    engine = Engine(config)
    sizes, durations, background = workload(config)
    search: JobPerTrial | PilotSearch
    if policy == "pilot":
        search = PilotSearch(engine, sizes, durations)
    else:
        search = JobPerTrial(engine, policy, sizes, durations)
    engine.run(search, background)
    records = sorted(search.records, key=lambda r: r.index)
    pilots = search.pilot_records if isinstance(search, PilotSearch) else []
    pilots.sort(key=lambda p: p.index)
    result = _summarize(policy, config, records, pilots, engine)
    if isinstance(search, PilotSearch):
        result = replace(result, idle_node_hours=search.idle.node_hours())
    return result


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(0, math.ceil(q * len(ordered)) - 1)
    return ordered[rank]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _summarize(policy: str, config: SimConfig, records: list[TrialRecord],
               pilots: list[PilotRecord], engine: Engine) -> SimResult:
    multi = [r for r in records if r.nodes > 1]
    waits = [r.wait for r in records]
    turnarounds = [r.turnaround for r in records]
    span = engine.last - engine.first
    trial_seconds = sum(r.nodes * (r.end - r.start) for r in records)
    held = sum(p.node_seconds for p in pilots) if pilots else trial_seconds
    return SimResult(
        policy=policy,
        spanning_fraction=sum(r.spans for r in multi) / len(multi) if multi else 0.0,
        mean_wait=_mean(waits),
        p95_wait=_percentile(waits, 0.95),
        mean_turnaround=_mean(turnarounds),
        p95_turnaround=_percentile(turnarounds, 0.95),
        utilization=engine.busy / (config.nodes * span) if span > 0 else 0.0,
        mean_step_time=_mean([r.step_time for r in multi]),
        node_hours=held / 3600,
        busy_fraction=trial_seconds / held if held else 0.0,
        trials=tuple(records),
        pilots=tuple(pilots),
    )

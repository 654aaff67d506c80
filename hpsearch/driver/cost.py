"""Cost as an objective: a trial's node_hours, gpu_hours and wall_s, measured when it ends.

An objective may name what a trial cost (spec's COST_METRICS) beside the metrics it
reports, e.g. maximize val_acc against minimize gpu_hours. When an attempt exits cleanly,
the driver sums every attempt of the trial so far (retries, requeues and promotion
segments included, this one up to its recorded end) with the report's definition
(hpsearch.accounting.usage), and those values go to the sampler and the store as the trial's
objective values. On Slurm, jobs of their own are read from sacct, as `hpsearch report`
does (one sacct call per trial that completes); attempts in pilots, and any sacct cannot
tell, are timed from the store. A pilot attempt is charged the share of each node it held
(pilot_share: its slots of the node's), and the GPUs it held on each of its nodes.

Start-up is left out: each attempt is charged from its code's first call of hpsearch.trial
on (hpsearch.ingest.first_call), not for its launch, imports or a wait for a warm server,
which make the first trials of a fresh pilot look many times dearer than the same trial
later. An attempt whose code never called hpsearch.trial is charged all it ran. `hpsearch
report` still counts what was held, start-up included.

The names are reserved: where the objective names one, a trial's own report of that name
is kept as a reported metric, never used for the objective, and the driver warns.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING

from hpsearch.accounting.usage import attempt_usage, gpu_count, trial_cost
from hpsearch.errors import HpsearchError
from hpsearch.executors.registry import facts
from hpsearch.spec.model import COST_METRICS, Resources, Spec, slot_width

if TYPE_CHECKING:
    from hpsearch.slurm.sacct import JobUsage
    from hpsearch.store.store import Store

Sacct = Callable[[list[str]], "list[JobUsage] | None"]
# a trial's parameters and its attempt's site -> the share of each node it held
PilotShare = Callable[[dict, "str | None"], float]


def pilot_share(resources: Resources, slot: Resources, slots_per_node: int,
                params: dict, site: str | None = None,
                at_site: Mapping[str, int] | None = None) -> float:
    """The share of each of its nodes a pilot attempt of the trial with `params` held: the
    slots it took there (slot_width: enough for its CPUs, GPUs and memory) of the node's
    slots per node (`slots_per_node`, or its site's own: `at_site`). A quarter-node trial
    is charged a quarter of a node-hour an hour."""
    per_node = (at_site or {}).get(site or "", slots_per_node)
    return min(1.0, slot_width(resources.for_params(params), slot) / max(1, per_node))


def pilot_share_of(spec: Spec) -> PilotShare | None:
    """Where trials run in pilots, the share of each node a trial's attempt holds (the
    cost objectives' node_hours and the report's); else None."""
    pilots = spec.executor.pilots if facts(spec.executor).in_pilots else None
    if pilots is None:
        return None
    at_site = {site.name: site.pilots.over(pilots).slots_per_node
               for site in spec.executor.sites if site.pilots}
    return partial(pilot_share, spec.resources, spec.slot(), pilots.slots_per_node,
                   at_site=at_site)


class Costs:
    def __init__(self, metrics: list[str], store: Store, on_event: Callable[[str], None],
                 sacct: Sacct | None = None, pilots: PilotShare | None = None,
                 elsewhere: frozenset[str] = frozenset()) -> None:
        """metrics: the objectives'; sacct: what the jobs of these ids used (Slurm jobs of
        their own), or None; pilots: where attempts run in pilots (their host is their
        node), the share of each node a trial's attempt holds (pilot_share); elsewhere: the
        sites on another cluster (executor.sites with `cluster`), whose job ids this sacct
        would take for other jobs: their attempts are timed from the store."""
        self.names = [m for m in metrics if m in COST_METRICS]
        self.store, self.on_event, self.sacct, self.pilots = store, on_event, sacct, pilots
        self.elsewhere = elsewhere
        self.told: set[str] = set()  # warnings already printed (each is stored per trial)

    def measurer(self, trial_id: int) -> Callable[[set[str]], dict[str, float]] | None:
        """What LiveTrial.verdict calls with the metric names the trial reported, or None
        when no objective is a cost."""
        return partial(self.measure, trial_id) if self.names else None

    def measure(self, trial_id: int, reported: set[str]) -> dict[str, float]:
        """The objective's cost metrics of the trial, over all its attempts so far."""
        clash = [name for name in self.names if name in reported]
        if clash:
            self._warn(trial_id, "reserved", (
                f"it reports {', '.join(clash)} itself; the objective uses the cost hpsearch "
                "measured instead (node_hours, gpu_hours and wall_s are reserved, docs/spec.md"
                "#cost-as-an-objective): rename the trial's metric to optimize its own"))
        cost = trial_cost(self._usage(trial_id), startup=False)
        return {name: cost[name] for name in self.names}

    def _usage(self, trial_id: int) -> list:
        from hpsearch.slurm.hostlist import expand
        rows = self.store.attempts(trial_id)
        trial = self.store.trial(trial_id)
        gpus = gpu_count(trial.gpus)
        by_job = self._sacct(trial_id, [a["job_id"] for a in rows if a["job_id"]
                                        and a.get("site") not in self.elsewhere])
        end = self.store.end_time()  # this attempt's: the end finish_attempt records
        out = []
        for a in rows:
            hostlist = a["nodes"] or (a["host"] if self.pilots else None)
            try:
                nodes = len(expand(hostlist)) if hostlist else 0
            except ValueError:
                nodes = 0
            # a pilot records one node's GPU ids (the same on each of its nodes); sacct
            # counts a job's GPUs on all its nodes
            held = gpus * max(1, nodes) if self.pilots else gpus
            use = attempt_usage(trial_id, a["attempt"], a["state"] or "", a["started"],
                                a["finished"], end, nodes, held,
                                None if a.get("site") in self.elsewhere
                                else by_job.get(a["job_id"]),
                                share=self.pilots(trial.params, a.get("site"))
                                if self.pilots else 1.0, startup_s=a.get("startup_s"))
            if use is not None:
                out.append(use)
        return out

    def _sacct(self, trial_id: int, job_ids: list[str]) -> dict[str, JobUsage]:
        if self.sacct is None or self.pilots or not job_ids:
            return {}
        try:
            records = self.sacct(job_ids)
        except HpsearchError as exc:
            self._warn(trial_id, "sacct", f"sacct failed, its cost is timed from the store: "
                                          f"{str(exc).splitlines()[0]}")
            return {}
        if records is None:
            self._warn(trial_id, "sacct", "the cluster keeps no accounting: its cost is timed "
                                          "from the store")
            return {}
        return {rec.job_id: rec for rec in records}

    def _warn(self, trial_id: int, kind: str, message: str) -> None:
        """Stored for each trial; printed once per driver."""
        self.store.add_event("warning", message, trial_id)
        if kind not in self.told:
            self.told.add(kind)
            self.on_event(f"trial {trial_id}: {message}")

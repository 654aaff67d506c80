"""Parallel efficiency of multi-rank trials, POP's way, and scaling across trial sizes: the one
definition that `status`, `export` and `report` share (docs/scaling.md). Pure, over the
rank_timing rows the driver added up from the ranks' timing lines (hpsearch.ingest.timing_lines).

Per trial, over every step each rank timed (all its attempts; warm-up steps are left out by
the trial side), per rank r: c_r = its mean compute seconds per step, s_r = its mean step
seconds. Then, over the ranks that reported:

    load balance             LB = mean_r(c_r) / max_r(c_r)
    communication efficiency CE = max_r(c_r) / max_r(s_r)
    parallel efficiency      PE = LB x CE = mean_r(c_r) / max_r(s_r)

and the trial's time per step is max_r(s_r); its throughput is 1 / that in steps/s, or
items/s where the ranks said what a step processed. Means per step, not totals, because the
ranks of a running trial have not all timed the same number of steps when the driver reads.

Scaling: trials with the same configuration (their parameters, less those that only size
the trial, i.e. those the spec's resources take a value of: "{nodes}", "{gpus}") that ran
at two or more sizes (ranks that reported) are compared with the smallest (the lowest trial
number among equals): speedup S = throughput / the smallest's, scaling efficiency
E = S / (ranks / the smallest's ranks).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass

_PLACEHOLDER = re.compile(r"^\{(\w+)\}$")
COLUMNS = ("ranks", "step_s", "load_balance", "comm_efficiency", "parallel_efficiency",
           "throughput", "throughput_unit", "speedup", "scaling_efficiency")


@dataclass
class TrialEfficiency:
    trial: int
    ranks: int                 # ranks that reported timing
    steps: int                 # steps timed (the most of any rank)
    step_s: float              # seconds per step: the slowest rank's mean
    compute_mean: float        # mean over ranks of their mean compute seconds per step
    compute_max: float         # the largest of those
    items_per_step: float | None = None  # what one step processed (all ranks), if said
    speedup: float | None = None
    scaling_efficiency: float | None = None
    baseline: int | None = None  # the trial the speedup is against

    @property
    def load_balance(self) -> float | None:
        return self.compute_mean / self.compute_max if self.compute_max > 0 else None

    @property
    def comm_efficiency(self) -> float | None:
        return min(1.0, self.compute_max / self.step_s) if self.step_s > 0 else None

    @property
    def parallel_efficiency(self) -> float | None:
        lb, ce = self.load_balance, self.comm_efficiency
        return None if lb is None or ce is None else lb * ce

    @property
    def steps_per_s(self) -> float | None:
        return 1 / self.step_s if self.step_s > 0 else None

    @property
    def items_per_s(self) -> float | None:
        if self.items_per_step is None or self.step_s <= 0:
            return None
        return self.items_per_step / self.step_s

    def throughput(self, unit: str | None = None) -> tuple[float | None, str]:
        """(value, 'items/s' or 'steps/s'): items/s where the trial said, unless `unit`."""
        if unit != "steps/s" and self.items_per_s is not None:
            return self.items_per_s, "items/s"
        return self.steps_per_s, "steps/s"

    def columns(self) -> dict:
        """The export's columns (COLUMNS)."""
        value, unit = self.throughput()
        return {"ranks": self.ranks, "step_s": self.step_s, "load_balance": self.load_balance,
                "comm_efficiency": self.comm_efficiency,
                "parallel_efficiency": self.parallel_efficiency, "throughput": value,
                "throughput_unit": unit, "speedup": self.speedup,
                "scaling_efficiency": self.scaling_efficiency}


def trial_efficiency(rows: Iterable[dict]) -> dict[int, TrialEfficiency]:
    """{trial: TrialEfficiency} from rank_timing rows (trial, attempt, rank, steps, step_s,
    compute_s, items, item_steps), for the trials with at least one step timed."""
    sums: dict[int, dict[int, list[float]]] = {}
    for row in rows:
        if not row.get("steps"):
            continue
        rank = sums.setdefault(row["trial"], {}).setdefault(row["rank"], [0, 0.0, 0.0, 0.0, 0])
        rank[0] += row["steps"]
        rank[1] += row["step_s"] or 0.0
        rank[2] += row["compute_s"] or 0.0
        rank[3] += row.get("items") or 0.0
        rank[4] += row.get("item_steps") or 0
    found = {}
    for trial, ranks in sorted(sums.items()):
        step = [s / n for n, s, _, _, _ in ranks.values()]
        compute = [min(c / n, s / n) for n, s, c, _, _ in ranks.values()]
        items = [i / k for _, _, _, i, k in ranks.values() if k]
        found[trial] = TrialEfficiency(
            trial, len(ranks), int(max(n for n, *_ in ranks.values())), max(step),
            sum(compute) / len(compute), max(compute), max(items) if items else None)
    return found


def configuration(params: dict, size_params: Iterable[str]) -> str:
    """A trial's configuration: its parameters less those that only size it, as a key."""
    skip = set(size_params)
    return json.dumps({k: v for k, v in params.items() if k not in skip}, sort_keys=True,
                      default=str)


def add_scaling(found: dict[int, TrialEfficiency], params: dict[int, dict],
                size_params: Iterable[str]) -> None:
    """Set speedup, scaling_efficiency and baseline on the trials of `found` whose
    configuration (params: trial -> its parameters) ran at two sizes or more."""
    sizes = list(size_params)
    groups: dict[str, list[TrialEfficiency]] = {}
    for trial, eff in sorted(found.items()):
        if trial in params:
            groups.setdefault(configuration(params[trial], sizes), []).append(eff)
    for group in groups.values():
        if len({e.ranks for e in group}) < 2:
            continue
        unit = "items/s" if all(e.items_per_s is not None for e in group) else "steps/s"
        base = min(group, key=lambda e: (e.ranks, e.trial))
        base_rate = base.throughput(unit)[0]
        if not base_rate:
            continue
        for e in group:
            rate = e.throughput(unit)[0]
            if rate is None:
                continue
            e.speedup = rate / base_rate
            e.scaling_efficiency = e.speedup / (e.ranks / base.ranks)
            e.baseline = base.trial


def size_params(spec_yaml: str) -> list[str]:
    """The parameters the stored spec's resources take a value of ("{nodes}" in
    resources.nodes, ...): they size a trial, not configure it. [] where none or unreadable."""
    import yaml
    try:
        resources = (yaml.safe_load(spec_yaml) or {}).get("resources") or {}
    except (yaml.YAMLError, AttributeError):
        return []
    if not isinstance(resources, dict):
        return []
    return [m.group(1) for v in resources.values()
            if isinstance(v, str) and (m := _PLACEHOLDER.match(v.strip()))]


def efficiency(rows: Iterable[dict], params: dict[int, dict], spec_yaml: str
               ) -> dict[int, TrialEfficiency]:
    """Every timed trial's TrialEfficiency, with its scaling where it applies."""
    found = trial_efficiency(rows)
    if found:
        add_scaling(found, params, size_params(spec_yaml))
    return found


def percent(value: float | None) -> str:
    return "" if value is None else f"{100 * value:.0f}%"


def describe(eff: TrialEfficiency | None) -> str:
    """`status`'s cell: 'PE 60% (LB 75% CE 80%) 2 ranks, x1.8' ('' for none)."""
    if eff is None or eff.parallel_efficiency is None:
        return ""
    text = (f"PE {percent(eff.parallel_efficiency)} (LB {percent(eff.load_balance)} "
            f"CE {percent(eff.comm_efficiency)}) {eff.ranks} rank"
            + ("" if eff.ranks == 1 else "s"))
    if eff.speedup is not None and eff.baseline != eff.trial:
        text += f", x{eff.speedup:.2g} ({percent(eff.scaling_efficiency)} of ideal)"
    return text

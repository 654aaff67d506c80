"""GPU busy fractions for `status`, `export` and `report` (docs/gpu.md): pure, over what the
store holds (the gpu_use rows the driver added up from the samplers' lines, and each
attempt's start and end).

A trial's held GPU-seconds: per attempt, the GPUs its samplers saw (summed over its nodes)
x the attempt's wall time (start to end, or to now while it runs). Its busy GPU-seconds:
the sum over samples and GPUs of utilization.gpu/100 x the seconds the sample stands for.
Busy fraction = busy / held: GPU-hours doing work against GPU-hours held. A pilot's: the
busy GPU-seconds of the attempts that ran in it against its GPUs (nodes x
resources.gpus_per_node x executor.pilots.slots_per_node) x the time it held them.
A trial or pilot without samples (a CPU trial, no nvidia-ml-py) has none.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

Attempt = tuple[int, int, float | None, float | None, str | None]  # trial, attempt, start, end, job


@dataclass
class GpuUse:
    gpus: int                   # GPUs held (the most in one attempt)
    samples: int                # sample lines
    util_mean: float | None     # mean utilization.gpu, percent, over samples and GPUs
    mem_max_mib: float          # the most memory.used one GPU showed
    busy_gpu_seconds: float
    held_gpu_seconds: float

    @property
    def busy_fraction(self) -> float | None:
        if self.held_gpu_seconds <= 0:
            return None
        return min(1.0, self.busy_gpu_seconds / self.held_gpu_seconds)

    @property
    def busy_gpu_hours(self) -> float:
        return self.busy_gpu_seconds / 3600

    @property
    def held_gpu_hours(self) -> float:
        return self.held_gpu_seconds / 3600


def trial_gpu_use(rows: Iterable[dict], attempts: Iterable[Attempt], now: float
                  ) -> tuple[dict[int, GpuUse], dict[str, float]]:
    """({trial: GpuUse} for trials with samples, {job id: busy GPU-seconds of its
    attempts}: a pilot's job id gets those of every attempt that ran in it)."""
    times = {(t, a): (start, end, job) for t, a, start, end, job in attempts}
    per_attempt: dict[tuple[int, int], list[dict]] = {}
    for row in rows:
        per_attempt.setdefault((row["trial"], row["attempt"]), []).append(row)
    sums: dict[int, dict[str, float]] = {}
    busy_by_job: dict[str, float] = {}
    for (trial, attempt), nodes in sorted(per_attempt.items()):
        start, end, job = times.get((trial, attempt), (None, None, None))
        gpus = sum(n["gpus"] or 0 for n in nodes)
        busy = sum(n["busy_gpu_seconds"] or 0.0 for n in nodes)
        held = gpus * _wall(start, end, nodes, now)
        s = sums.setdefault(trial, dict.fromkeys(
            ("gpus", "samples", "pairs", "util", "mem", "busy", "held"), 0.0))
        s["gpus"] = max(s["gpus"], gpus)
        s["samples"] += sum(n["samples"] or 0 for n in nodes)
        s["pairs"] += sum(n["gpu_samples"] or 0 for n in nodes)
        s["util"] += sum(n["util_sum"] or 0.0 for n in nodes)
        s["mem"] = max(s["mem"], *(n["mem_max_mib"] or 0.0 for n in nodes))
        s["busy"] += busy
        s["held"] += max(held, busy)  # never below what was measured (clocks a moment apart)
        if job:
            busy_by_job[job] = busy_by_job.get(job, 0.0) + busy
    found = {trial: GpuUse(int(s["gpus"]), int(s["samples"]),
                           s["util"] / s["pairs"] if s["pairs"] else None, s["mem"],
                           s["busy"], s["held"]) for trial, s in sums.items()}
    return found, busy_by_job


def _wall(start: float | None, end: float | None, nodes: list[dict], now: float) -> float:
    """An attempt's wall time: the store's start to end (now while it runs); without a
    recorded start, the span its samples cover."""
    if start is not None:
        return max(0.0, (end if end is not None else now) - start)
    firsts = [n["first"] for n in nodes if n["first"] is not None]
    lasts = [n["last"] for n in nodes if n["last"] is not None]
    samples = max((n["samples"] or 0) for n in nodes)
    if not firsts or samples < 2:
        return 0.0
    return (max(lasts) - min(firsts)) * samples / (samples - 1)


def pilot_gpu_use(busy_gpu_seconds: float, nodes: int, gpus_per_node: int,
                  seconds: float) -> GpuUse | None:
    """A pilot's GpuUse; None for a pilot without GPUs or without samples."""
    if gpus_per_node <= 0 or busy_gpu_seconds <= 0:
        return None
    held = nodes * gpus_per_node * seconds
    return GpuUse(nodes * gpus_per_node, 0, None, 0.0, busy_gpu_seconds,
                  max(held, busy_gpu_seconds))


def pilot_gpus_per_node(spec_yaml: str, site: str | None = None) -> int:
    """GPUs per node of the experiment's pilots (resources.gpus_per_node x
    executor.pilots.slots_per_node, or the slots of `site`'s own pilots), from the stored
    spec; 0 without pilots or GPUs."""
    import yaml
    try:
        raw = yaml.safe_load(spec_yaml) or {}
        res, executor = raw.get("resources") or {}, raw.get("executor") or {}
        pilots = executor.get("pilots") if isinstance(executor, dict) else None
        if not isinstance(pilots, dict):
            return 0
        slots = pilots.get("slots_per_node") or 1
        for entry in executor.get("sites") or [] if site is not None else []:
            own = entry.get("pilots") or {}
            if _site_name(entry) == site and own.get("slots_per_node"):
                slots = own["slots_per_node"]
        return int(res.get("gpus_per_node") or 0) * int(slots)
    except (yaml.YAMLError, AttributeError, TypeError, ValueError):
        return 0


def _site_name(entry: dict) -> str:
    """A site's name as the spec gives it (hpsearch.spec.executor: its `name`, else
    cluster:partition)."""
    default = ":".join(str(entry[k]) for k in ("cluster", "partition") if entry.get(k))
    return str(entry.get("name") or default or "default")


def describe(use: GpuUse | None) -> str:
    """'93% busy, util 95%, 20.0 GiB' (a pilot: '93% busy'); '' for none."""
    if use is None or use.busy_fraction is None:
        return ""
    parts = [f"{100 * use.busy_fraction:.0f}% busy"]
    if use.util_mean is not None:
        parts.append(f"util {use.util_mean:.0f}%")
    if use.mem_max_mib:
        parts.append(f"{use.mem_max_mib / 1024:.1f} GiB")
    return ", ".join(parts)


def read_gpu_use(reader, spec_yaml: str, pilots: Iterable, now: float
                 ) -> tuple[dict[int, GpuUse], dict[int, GpuUse]]:
    """({trial: GpuUse}, {pilot id: GpuUse}) for `status`, from an open store Reader and
    its pilots (hpsearch.views.pilots.PilotLine: id, job_id, nodes, age); ({}, {}) when no
    GPU was sampled. Reads the attempts only then."""
    rows = reader.gpu_use()
    if not rows:
        return {}, {}
    attempts = [(a["trial"], a["attempt"], a["started"], a["finished"], a["job_id"])
                for a in reader.all_attempts()]
    trials, busy_by_job = trial_gpu_use(rows, attempts, now)
    found, per_node = {}, {}  # per_node: by site, the spec read once for each
    for p in pilots:
        if p.site not in per_node:
            per_node[p.site] = pilot_gpus_per_node(spec_yaml, p.site)
        use = pilot_gpu_use(busy_by_job.get(p.job_id or "", 0.0), _node_count(p.nodes),
                            per_node[p.site], p.age)
        if use is not None:
            found[p.id] = use
    return trials, found


def _node_count(hostlist: str | None) -> int:
    from hpsearch.slurm.hostlist import expand
    try:
        return max(1, len(expand(hostlist))) if hostlist else 1
    except ValueError:
        return 1

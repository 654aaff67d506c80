"""`hpsearch scale`'s table: one configuration's scaling curve, per size, from the timing its
ranks reported (hpsearch.accounting.efficiency), beside the ring all-reduce model's prediction of
the communication (docs/scaling.md#scaling-a-configuration).

Measured communication per step = time per step - the busiest rank's compute: what even
that rank waited for (transfers not hidden behind compute, and waits for slower ranks).
Modeled: 2(n-1)/n * S/B for n ranks, S gradient bytes, B bandwidth (the placement
simulator's ring_allreduce_time without its latency term): a model of a bandwidth-bound
ring over one link per rank, not a measurement.
"""

from __future__ import annotations

from dataclasses import dataclass

from hpsearch.accounting.efficiency import TrialEfficiency, percent
from hpsearch.placement.sim.cluster import SimConfig, ring_allreduce_time

DEFAULT_BANDWIDTH_GBIT = SimConfig().link_bandwidth / 1e9  # the simulator's NIC: 100 Gbit/s
GRAD_BYTES_METRIC = "grad_bytes"  # a metric a trial may report: its gradient's size in bytes


@dataclass(frozen=True)
class Point:
    """One size of the curve: a trial of the child experiment."""

    size: int
    trial: int
    state: str
    eff: TrialEfficiency | None  # None: it reported no timing


def modeled_comm_s(ranks: int, grad_bytes: float | None, bandwidth_gbit: float) -> float | None:
    """The ring all-reduce model's seconds per step (no latency term); None without S."""
    if grad_bytes is None:
        return None
    return ring_allreduce_time(ranks, grad_bytes, bandwidth_gbit * 1e9, 0.0)


def _num(value: float | None, fmt: str = ".4g") -> str:
    return "-" if value is None else format(value, fmt)


def table(points: list[Point], size_name: str, grad_bytes: float | None,
          bandwidth_gbit: float) -> str:
    """The curve as aligned text, one line per size, and the notes that say what is what."""
    heads = [size_name, "trial", "state", "ranks", "s/step", "throughput", "speedup",
             "scaling eff.", "parallel eff.", "comm s/step", "ring model s/step"]
    lines = [heads]
    for p in points:
        e = p.eff
        if e is None:
            lines.append([str(p.size), str(p.trial), p.state] + ["-"] * 8)
            continue
        rate, unit = e.throughput()
        comm = max(0.0, e.step_s - e.compute_max)
        model = modeled_comm_s(e.ranks, grad_bytes, bandwidth_gbit)
        lines.append([str(p.size), str(p.trial), p.state, str(e.ranks), _num(e.step_s),
                      "-" if rate is None else f"{rate:.4g} {unit}", _num(e.speedup, ".3g"),
                      percent(e.scaling_efficiency) or "-",
                      percent(e.parallel_efficiency) or "-", _num(comm), _num(model)])
    widths = [max(len(row[i]) for row in lines) for i in range(len(heads))]
    text = "\n".join("  ".join(c.rjust(w) for c, w in zip(row, widths)).rstrip()
                     for row in lines)
    source = (f"S = {grad_bytes:.6g} bytes" if grad_bytes is not None else
              f"no S: pass --grad-bytes, or report the metric '{GRAD_BYTES_METRIC}' from "
              "the trial")
    return (text + "\n\nspeedup and scaling efficiency against the smallest size; parallel "
            "efficiency = load balance x communication efficiency (docs/scaling.md).\n"
            "comm s/step: measured, time per step - the busiest rank's compute.\n"
            f"ring model s/step: a MODEL, not a measurement: 2(n-1)/n * S/B for n ranks, "
            f"{source}, B = {bandwidth_gbit:g} Gbit/s (--bandwidth).")

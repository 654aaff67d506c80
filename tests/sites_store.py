"""A store of a search over three sites (executor.sites), written through hpsearch's own
Store API in the order the driver writes it (trial, attempt run at a site, the scheduler's
placement, reports, end), for the views, the live view and the report without a cluster;
and check_sites_figure, which checks the report's sites.png against a store, this one or a
real run's (tests/slurm/test_sites.py).

left:  trial 0 (steps 0-4, 0.5 s apart), trial 1 (attempt 1: steps 0-2, ended by a node
       failure; attempt 2: steps 3-5 from a checkpoint, 60 s later), trial 4 running
       (steps 0-1); 0.5 s a step throughout, 9 pairs of consecutive reports.
right: trial 2 (steps 0, 2, 4, 6, 4 s apart: 2 s a step, 3 pairs), trial 3 (attempt 1
       killed at the scouts' time limit; attempt 2 at the ceiling reports once), trial 5
       pending; one scouts event sized the trials from 2 on.
idle:  nothing sent there.
"""

from __future__ import annotations

import time
from pathlib import Path

from hpsearch.report import data as report_data
from hpsearch.report import figures
from hpsearch.store.reader import Reader
from hpsearch.store.runs import STORE_FILE
from hpsearch.store.store import Store

SPEC = """\
name: {name}
command: "sh trial.sh {{x}}"
search:
  strategy: random
  trials: 6
  parallel: 4
  space:
    x: {{type: float, low: 0.0, high: 1.0}}
objective: {{metric: loss, direction: minimize}}
resources: {{nodes: 1, time: "auto 00:30:00"}}
executor:
  type: slurm
  sites:
    - {{partition: left}}
    - {{partition: right}}
    - {{partition: idle}}
"""
SITES = ("left", "right", "idle")
SCOUTS = "trials from 2 on ask for scouts: time 0-00:01:00 (p95 1 s of 2 runs x 1.5, ceiling " \
    "00:30:00)"
CEILING = "at the ceiling after timeout at the scouts' limit (not counted)"


def _run(store: Store, tid: int, attempt: int, site: str, submitted: float,
         steps: list[int], every: float, state: str | None = "completed",
         failure: str | None = None, later: float = 0.0) -> None:
    """One attempt at `site`: submitted at `submitted`, seen running (its queue wait: now -
    submitted, as update_placement measures it), reporting `steps` `every` s apart from
    `later` s after now."""
    store.mark_running(tid, attempt, "node1", None, None, None, f"{100 * tid + attempt}",
                       at=submitted, site=site)
    store.update_placement(tid, attempt, "RUNNING", None, "node1")
    start = time.time() + later
    store.add_metrics(tid, attempt, [{"step": s, "time": start + i * every,
                                      "loss": 1.0 / (s + 1)} for i, s in enumerate(steps)])
    if state == "completed":
        store.finish_attempt(tid, attempt, state, 0, None, [0.1 * tid])
    elif state is not None:
        store.finish_attempt(tid, attempt, state, None, failure, requeue=True, failure=failure)


def build_sites_store(exp_dir: Path, name: str = "sites") -> Path:
    exp_dir.mkdir(parents=True, exist_ok=True)
    store = Store.create(exp_dir / STORE_FILE, name=name, spec_yaml=SPEC.format(name=name),
                         spec_file=str(exp_dir / "spec.yaml"), base_dir=str(exp_dir),
                         strategy="random", directions=["minimize"], trials_requested=6)
    now = time.time()
    for tid in range(6):
        store.insert_trial(tid, {"x": tid / 10}, str(exp_dir / "trials" / f"{tid:05d}"), {})
    _run(store, 0, 1, "left", now - 30, [0, 1, 2, 3, 4], 0.5)
    _run(store, 1, 1, "left", now - 20, [0, 1, 2], 0.5, "failed", "node_fail")
    store.begin_attempt(1, 2, "retry after node_fail")
    _run(store, 1, 2, "left", now - 5, [3, 4, 5], 0.5, later=60)
    _run(store, 2, 1, "right", now - 40, [0, 2, 4, 6], 4.0)
    store.add_event("scouts", SCOUTS)
    _run(store, 3, 1, "right", now - 25, [0], 1.0, "failed", "timeout")
    store.begin_attempt(3, 2, CEILING)
    _run(store, 3, 2, "right", now - 10, [1], 1.0)
    _run(store, 4, 1, "left", now - 15, [0, 1], 0.5, state=None)
    store.mark_running(5, 1, "", None, None, None, "501", at=now - 12, site="right")
    store.update_placement(5, 1, "PENDING", "Priority", None)
    store.close()
    return exp_dir


def check_sites_figure(exp_dir: Path) -> str:
    """sites.png draws what the store holds: each attempt sent to a site that started is a
    solid bar (running) to its end, after a pale one (its queue wait) from its submit, in
    its site's band (the site's tick labels the band's middle), none elsewhere; and each
    site's queue waits as dots in its band below. Returns the caption."""
    data = report_data.collect(exp_dir, use_sacct=False)
    drawn = figures.sites(data)
    assert isinstance(drawn, figures.Drawn), drawn
    figures.png(drawn.figure)
    timeline, waits = drawn.figure.axes
    band_of = {label.get_text(): tick - 0.5 for tick, label in
               zip(timeline.get_yticks(), timeline.get_yticklabels())}
    assert list(band_of) == [line.site.name for line in data.brokerage.sites]
    bars = {p.get_gid(): p for p in timeline.patches if p.get_gid()}
    with Reader(exp_dir / STORE_FILE) as reader:
        attempts = [a for a in reader.all_attempts() if a["site"] and a["started"]]
    first = min(a["started"] for a in attempts)
    scale = {"s": 1.0, "min": 60.0, "h": 3600.0}[timeline.get_xlabel().split()[0]]
    for a in attempts:
        band, key = band_of[a["site"]], f"{a['trial']}.{a['attempt']}"
        pale = bars.pop(f"wait {key}", None)  # from its submit: its wait, or to its end
        run = bars.pop(f"run {key}", None)  # where a poll saw it run: from then to its end
        assert (run is None) == (a["queue_wait"] is None), a
        assert (pale is None) == (a["queue_wait"] == 0), a
        if pale is not None:
            assert abs(pale.get_x() - (a["started"] - first) / scale) < 1e-6
        if run is not None:
            assert abs(run.get_x() - (a["started"] + a["queue_wait"] - first) / scale) < 1e-6
        shown = [bar for bar in (pale, run) if bar is not None]
        for bar in shown:
            assert band < bar.get_y() < bar.get_y() + bar.get_height() < band + 1, a
        if a["finished"] is not None:
            end = shown[-1]
            assert abs(end.get_x() + end.get_width() - (a["finished"] - first) / scale) < 1e-6
    assert not bars
    scale = {"s": 1.0, "min": 60.0, "h": 3600.0}[waits.get_xlabel().split("(")[1][:-1]]
    for site, band in band_of.items():
        dots = next(ln for ln in waits.get_lines() if ln.get_gid() == f"waits {site}")
        assert sorted(dots.get_xdata()) == sorted(a["queue_wait"] / scale for a in attempts
                                                  if a["site"] == site and a["queue_wait"])
        assert all(band < y < band + 1 for y in dots.get_ydata())
    return drawn.caption

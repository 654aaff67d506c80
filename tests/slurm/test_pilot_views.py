"""Pilots as users see them, on the real emulated cluster: one small pilot search, watched
while it runs (the live view's snapshot and `hpsearch status`: the pilot, its nodes under one
leaf, the trials running in it, the time it has left) and reported once it is done
(`hpsearch report`: node-hours the pilot held from sacct, busy and idle; each trial's own
time from the store, never the pilot job's sacct usage, which all its trials share)."""

from __future__ import annotations

import time
import uuid

import pytest

from hpsearch.report import data as report_data
from hpsearch.slurm.commands import Slurm
from hpsearch.store.reader import Reader
from hpsearch.store.runs import STORE_FILE
from hpsearch.tui.model import SnapshotSource

RUN = uuid.uuid4().hex[:6]
SLEEP = 6  # seconds each trial runs

SPEC = """
name: {name}
command: 'sleep {sleep}; echo "@hpsearch step=0 loss={{x}}"'
search: {{strategy: grid, parallel: 4, space: {{x: {{low: 1, high: 6, step: 1}}}}}}
objective: {{metric: loss}}
resources: {{nodes: 1, time: "00:02:00"}}
executor:
  type: slurm
  poll_interval: 1s
  pilots: {{nodes: 2, time: "00:05:00", max: 1, slots_per_node: 2, idle_timeout: 20,
            heartbeat: 1}}
"""


def _running_pilot(source: SnapshotSource, deadline: float):
    """The first snapshot whose pilot runs two trials or more; fails at the deadline."""
    while True:
        snap = source.snapshot(rows=20)
        busy = [p for p in snap.pilots if p.state == "running" and len(p.trials) >= 2]
        if busy:
            return snap, busy[0]
        assert time.monotonic() < deadline, snap
        time.sleep(0.5)


@pytest.mark.timeout(400)
def test_a_pilot_search_in_status_watch_and_report(cli, slurm_cluster):
    env = slurm_cluster.env
    name = f"pilotview-{RUN}"
    spec = cli.write_spec(SPEC.format(name=name, sleep=SLEEP), f"{name}.yaml")
    driver = cli.popen("submit", spec, "-q", env=env)
    exp_dir = cli.runs / name
    try:
        deadline = time.monotonic() + 180
        while not (exp_dir / STORE_FILE).exists():
            assert time.monotonic() < deadline and driver.poll() is None
            time.sleep(0.3)
        source = SnapshotSource(exp_dir)
        try:
            snap, pilot = _running_pilot(source, deadline)
        finally:
            source.close()
        # the live view: its nodes (2, under one leaf), its trials, its time left
        nodes = slurm_cluster.run("scontrol", "show", "hostnames", pilot.nodes).stdout.split()
        assert len(nodes) == 2 and len(pilot.leaves) == 1, pilot
        assert pilot.remaining is not None and 200 < pilot.remaining <= 300, pilot
        shown = {line.id: line for line in snap.trials}
        for trial in pilot.trials:
            assert shown[trial].job_id == pilot.job_id and shown[trial].state == "running"
            assert shown[trial].nodes in nodes and shown[trial].leaves == pilot.leaves
        # `hpsearch status` while it runs: the pilot table
        out = cli("status", name, env=env, check=0).stdout
        assert "\npilots: 1 live, 0 ended\n" in out, out
        row = next(line for line in out.split("\npilots: ")[1].splitlines()[2:]
                   if line.startswith(f"{pilot.id} "))
        assert f" {pilot.job_id} " in row and " running " in row and " left" in row, out
        assert f"[{pilot.leaves[0]}]" in row and " up " in row, out
        # `hpsearch watch --once`: the pilot panel
        screen = cli("watch", name, "--once", env={**env, "COLUMNS": "110", "LINES": "40"},
                     check=0).stdout
        assert "pilots (1 live" in screen and f"job {pilot.job_id}" in screen, screen
        driver.communicate(timeout=240)
    finally:
        if driver.poll() is None:
            cli("cancel", name, env=env, check=None)
            driver.communicate(timeout=120)
    assert driver.returncode == 0
    reader = Reader(exp_dir / STORE_FILE)
    try:
        pilots = reader.pilots()
        attempts = [a for t in reader.trials() for a in reader.attempts(t.id)]
    finally:
        reader.close()
    assert len(pilots) == 1 and len(attempts) == 6
    job = pilots[0].job_id
    assert all(a["job_id"] == job for a in attempts)  # every attempt ran in the one pilot
    slurm_cluster.wait_for_accounting(job, "State", timeout=120)
    sacct = {u.job_id: u for u in Slurm(env=env).sacct_usage([job])}[job]

    # the report: attempts from the store, the pilot from sacct, busy <= held
    got = report_data.collect(exp_dir, slurm=Slurm(env=env))
    assert not got.notes, got.notes
    for usage in got.usage:
        assert usage.source == "pilot" and usage.nodes == 1
        assert SLEEP - 1 < usage.seconds < SLEEP + 5, usage  # not the pilot job's elapsed
    (usage,) = got.pilots
    assert (usage.source, usage.nodes, usage.seconds) == ("sacct", 2, sacct.elapsed)
    assert usage.attempts == 6
    # 6 trials of SLEEP s on 2 slots per node: two trials side by side on one node count
    # it once, so busy is less than the trials' own node-seconds, and within held
    assert SLEEP * 2 <= usage.busy_node_seconds <= 2 * sacct.elapsed
    assert usage.busy_node_seconds < sum(u.nodes * u.seconds for u in got.usage)
    assert usage.idle_node_hours == pytest.approx(usage.held_node_hours -
                                                  usage.busy_node_hours)
    out_dir = cli.cwd / "rep"
    cli("report", name, "--out", out_dir, env=env, check=0)
    page = (out_dir / "report.html").read_text()
    assert "<h2 id='pilot-usage'>Pilots</h2>" in page and "1 pilot job(s) held" in page, page
    assert "sacct (ElapsedRaw x NNodes of the pilot's job)" in page
    assert (out_dir / "pilots.png").exists()
    status = cli("status", name, env=env, check=0).stdout
    assert any(line.startswith(f"{pilots[0].id} ") for line in
               status.split("\npilots: ")[1].splitlines()[2:]), status

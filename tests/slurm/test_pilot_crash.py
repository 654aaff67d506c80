"""A pilot search whose driver is SIGKILLed at 20 random moments (issue 13, item 8): the
pilots outlive each driver, every new driver re-attaches to them and binds the rest; every
trial runs exactly once, in a pilot, and no more pilots are submitted than the search needs."""

from __future__ import annotations

import sqlite3
import uuid
from collections import Counter

from hpsearch.pilot import protocol
from hpsearch.store.reader import Reader
from hpsearch.store.runs import STORE_FILE
from tests.helpers import kill_driver_repeatedly, read_store

RUN = uuid.uuid4().hex[:6]
TRIALS, KILLS = 32, 20

SPEC = f"""
name: pcrash-{RUN}
command: 'sleep 3; echo "@hpsearch step=0 loss={{x}}"'
search:
  strategy: tpe
  trials: {TRIALS}
  parallel: 4
  seed: 5
  space:
    x: {{low: 0.0, high: 1.0}}
objective: {{metric: loss}}
resources: {{time: "00:02:00"}}
executor:
  type: slurm
  poll_interval: 0.5
  pilots: {{nodes: 2, time: "00:10:00", max: 1, slots_per_node: 2, idle_timeout: 60,
            grace: 120, heartbeat: 1}}
"""


def test_driver_sigkilled_at_20_moments_of_a_pilot_search_runs_every_trial_once(
        cli, slurm_cluster):
    name = f"pcrash-{RUN}"
    spec = cli.write_spec(SPEC, f"{name}.yaml")
    kills = kill_driver_repeatedly(cli, spec, name, slurm_cluster.env, KILLS, (0.5, 2.5))
    assert sum("killed" in k for k in kills) >= KILLS - 2, kills
    cli("resume", name, env=slurm_cluster.env, check=0, timeout=600)

    _, trials = read_store(cli.runs, name)
    assert [t.id for t in trials] == list(range(TRIALS))
    assert [t.state for t in trials] == ["completed"] * TRIALS
    assert all(t.objective_values == [t.params["x"]] for t in trials)
    assert all(t.attempt == 1 for t in trials), [(t.id, t.attempt) for t in trials]
    # Each attempt started in exactly one pilot, once: the pilots' own record (started/,
    # or done/started/ once the driver stored the end).
    started = Counter(name for d in protocol.pilots_dir(cli.runs / name).glob("[0-9]*")
                      for name in (protocol.names(d / "started")
                                   + protocol.names(d / "done" / "started")))
    assert started == Counter({protocol.name_of(t, 1): 1 for t in range(TRIALS)}), started
    reader = Reader(cli.runs / name / STORE_FILE)
    try:
        pilots = reader.pilots()
    finally:
        reader.close()
    print("pilots:", [(row.id, row.job_id, row.state, row.reason) for row in pilots])
    assert all(row.state == "ended" for row in pilots)
    assert len(pilots) <= 3, pilots  # the one pilot outlived the drivers (re-attached)
    con = sqlite3.connect(cli.runs / name / STORE_FILE)
    try:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        con.close()

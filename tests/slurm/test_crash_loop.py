"""Driver crash safety on Slurm (issue 5, item 5): the driver is SIGKILLed at 20+ random
moments of a real Slurm search and resumed each time. Nothing may be submitted twice, no
trial lost, and the final store must hold exactly the requested trials, intact."""

from __future__ import annotations

import sqlite3
import time
import uuid
from collections import Counter

from hpsearch.store.runs import STORE_FILE
from tests.helpers import job_prefix, kill_driver_repeatedly, read_store

RUN = uuid.uuid4().hex[:6]
TRIALS, KILLS = 24, 20

SPEC = f"""
name: crashloop-{RUN}
command: 'sleep 4; echo "@hpsearch step=0 loss={{x}}"'
search:
  strategy: tpe
  trials: {TRIALS}
  parallel: 3
  seed: 11
  space:
    x: {{low: 0.0, high: 1.0}}
objective: {{metric: loss}}
resources: {{time: "00:05:00"}}
executor: {{type: slurm, poll_interval: 0.5, array: false}}
"""


def _job_names(cluster, prefix: str) -> Counter:
    out = cluster.run("sacct", "--parsable2", "--noheader", "-X", "-S", "now-2hours",
                      "-o", "JobName").stdout
    return Counter(n for n in out.split() if n.startswith(prefix))


def test_sigkill_at_20_random_moments_loses_and_duplicates_nothing(cli, slurm_cluster):
    name = f"crashloop-{RUN}"
    spec = cli.write_spec(SPEC, f"{name}.yaml")
    kills = kill_driver_repeatedly(cli, spec, name, slurm_cluster.env, KILLS, (0.3, 2.5))
    assert sum("killed" in k for k in kills) >= KILLS - 2, "the search ended too soon"
    cli("resume", name, env=slurm_cluster.env, check=0, timeout=600)

    _, trials = read_store(cli.runs, name)
    assert [t.id for t in trials] == list(range(TRIALS))
    assert [t.state for t in trials] == ["completed"] * TRIALS
    assert all(t.objective_values == [t.params["x"]] for t in trials)
    # Every job hpsearch submitted has a unique name per (trial, attempt): one sbatch each.
    deadline = time.monotonic() + 30
    while True:
        prefix = job_prefix(cli.runs, name)
        names = _job_names(slurm_cluster, f"{prefix}.")
        expected = {f"{prefix}.{t.id}.{a}" for t in trials for a in range(1, t.attempt + 1)}
        if set(names) >= expected or time.monotonic() > deadline:
            break
        time.sleep(1)
    twice = {n: c for n, c in names.items() if c > 1}
    assert twice == {}, f"submitted more than once: {twice}"
    assert set(names) == expected, set(names) ^ expected
    con = sqlite3.connect(cli.runs / name / STORE_FILE)
    try:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        con.close()

"""The live view's cluster panel on a real cluster: each leaf switch's free and used nodes
and the trials on it, from sinfo and the topology (here the cluster without the tree plugin,
so the topology comes from the spec's placement.topology, as it would on such a site)."""

from __future__ import annotations

import time
import uuid

RUN = uuid.uuid4().hex[:6]


def test_watch_shows_each_leaf_and_the_trial_running_on_it(cli, slurm_flat_cluster):
    cluster = slurm_flat_cluster
    topo = cluster.state_dir / "etc" / "topology.conf"
    name = f"watch-{RUN}"
    spec = cli.write_spec(f"""
name: {name}
command: 'sleep 30; echo "@hpsearch step=0 loss={{x}}"'
search: {{strategy: random, trials: 1, seed: 2, space: {{x: {{low: 0.0, high: 1.0}}}}}}
objective: {{metric: loss}}
resources: {{nodes: 2, time: "00:05:00"}}
executor: {{type: slurm, poll_interval: 0.5}}
placement: {{topology: {topo}}}
""", f"{name}.yaml")
    driver = cli.popen("submit", spec, env=cluster.env)
    try:
        deadline = time.monotonic() + 60
        while True:
            shown = cli("watch", name, "--once", env={**cluster.env, "COLUMNS": "100",
                                                       "LINES": "30"})
            screen = shown.stdout + shown.stderr  # (exit 2 until the driver made the store)
            rows = {line.split()[0]: line for line in screen.splitlines()
                    if line.strip().startswith("leaf")}
            if any("#0" in row for row in rows.values()):
                break
            assert time.monotonic() < deadline, screen
            time.sleep(1)
        assert sorted(rows) == ["leaf1", "leaf2", "leaf3", "leaf4"], screen
        on = [leaf for leaf, row in rows.items() if "#0" in row]
        assert len(on) == 1 and "used   2" in rows[on[0]], screen  # both its nodes, one leaf
        assert all("free   2" in row for leaf, row in rows.items() if leaf not in on), screen
    finally:
        cli("cancel", name, env=cluster.env, check=None)
        driver.communicate(timeout=120)

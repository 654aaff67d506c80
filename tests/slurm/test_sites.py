"""One search over several sites (`executor.sites`, issue 40) on the emulated cluster: two
partitions of disjoint nodes. Every trial's job runs in the partition of the site the store
says it went to, both sites take trials, and a site whose jobs do not start stops getting
them (hpsearch.executors.sites; the sites table of status and `sites`:
hpsearch.views.sites; the report's sites.png: hpsearch.report.figures.sites)."""

from __future__ import annotations

import re
import time
import uuid

import pytest

from hpsearch.report.figures.common import plural
from hpsearch.store.reader import Reader
from hpsearch.store.runs import STORE_FILE
from tests.helpers import read_store
from tests.sites_store import check_sites_figure

RUN = uuid.uuid4().hex[:6]
LEFT, RIGHT = "left", "right"  # scripts/slurm-cluster.sh: node1-4 and node5-8

SPEC = """
name: {name}
command: 'sleep 1; echo "@hpsearch step=0 loss={{x}}"'
search:
  strategy: random
  trials: {trials}
  parallel: 4
  seed: 4
  space:
    x: {{low: 0.0, high: 1.0}}
objective: {{metric: loss}}
resources: {{nodes: 1, time: "00:02:00"}}
executor:
  type: slurm
  poll_interval: 0.5
  array: false
  sites:
    - {{partition: {left}}}
    - {{partition: {right}}}
"""


def _attempts(runs, name):
    with Reader(runs / name / STORE_FILE) as reader:
        return list(reader.db.query(
            "select trial, attempt, site, job_id, nodes, state from attempts order by trial, "
            "attempt"))


def _partitions(cluster, job_ids):
    """Each job's partition as sacct says it (asked again for a few seconds while a record
    lacks it: slurmdbd writes a short job's record after its end)."""
    for _ in range(20):
        out = cluster.run("sacct", "-n", "-P", "-X", "-j", ",".join(job_ids),
                          "-o", "JobID,Partition").stdout
        found = dict(line.split("|") for line in out.split())
        if all(found.get(j) for j in job_ids):
            break
        time.sleep(0.5)
    return found


# Two reports a trial, a second apart, each with its time (the speed column's measure).
TWO_STEPS = ("""command: 'for s in 0 1; do sleep 1; echo "@hpsearch step=$s time=$(date +%s.%N) """
             """loss={x}"; done'""")


def test_a_search_over_two_partitions_sends_each_job_where_the_store_says(cli, slurm_cluster,
                                                                          tmp_path):
    """... and status, sites and the report show each site's queue wait and speed (about a
    second a step) and each attempt in its site's band of sites.png."""
    name = f"sites-{RUN}"
    text = SPEC.format(name=name, trials=8, left=LEFT, right=RIGHT)
    spec = cli.write_spec("\n".join(TWO_STEPS if line.startswith("command:") else line
                                    for line in text.splitlines()))
    proc = cli("submit", spec, "--no-tui", env=slurm_cluster.env, check=0, timeout=240)
    exp, trials = read_store(cli.runs, name)
    assert [t.state for t in trials] == ["completed"] * 8, proc.stdout
    attempts = _attempts(cli.runs, name)
    sites = {a["job_id"]: a["site"] for a in attempts}
    assert set(sites.values()) == {LEFT, RIGHT}, attempts
    assert _partitions(slurm_cluster, list(sites)) == sites
    for a in attempts:  # left is node1-4, right node5-8
        number = int(a["nodes"].removeprefix("node"))
        assert (number <= 4) == (a["site"] == LEFT), a
    assert {t.site for t in trials} == {LEFT, RIGHT}
    events = cli("events", name, check=0).stdout
    assert "to site left (weights: left 0.1, right 0.1)" in events, events
    # status and sites count each site's attempts and show the weight of the counts now
    sent = {s: sum(1 for a in attempts if a["site"] == s) for s in (LEFT, RIGHT)}
    status = cli("status", name, check=0).stdout
    assert "\nsites: 2\n" in status, status
    rows = {site: next(line.split() for line in status.splitlines()
                       if line.startswith(site + " ")) for site in (LEFT, RIGHT)}
    speed = {site: float(row[7].removesuffix("s/step")) for site, row in rows.items()}
    for site, row in rows.items():
        assert row[:7] == [site, site, "0", "0", str(sent[site]), "0", row[6]], row
        assert row[-2] == f"{sent[site] / 8:.0%}", row  # none skipped
        assert 0.9 < speed[site] < 2.0, row  # sleep 1 a step
        # 1 / 10, times the faster site's seconds per step over its own (about 1 here)
        expected = 0.1 * min(speed.values()) / speed[site]
        assert float(row[-1]) == pytest.approx(expected, abs=0.002), (row, speed)
    explained = cli("sites", name, check=0).stdout
    assert re.search(rf"  {LEFT}: weight 0\.\d+ \(0 running, 0 pending, {sent[LEFT]} ended, "
                     "median queue wait", explained), explained
    assert f"{LEFT} " in explained.split("speed = ")[1], explained
    cli("report", name, "--out", tmp_path / "report", env=slurm_cluster.env, check=0)
    assert (tmp_path / "report" / "sites.png").exists()
    caption = check_sites_figure(cli.runs / name)
    assert f"{LEFT}: {plural(sent[LEFT], 'attempt')}" in caption, caption


def test_jobs_pending_at_a_site_that_starts_nothing_move_to_one_that_does(cli, slurm_cluster):
    """`right` takes jobs of at most 1 minute (MaxTime=1; these ask 2): Slurm queues them
    and never starts them (PartitionTimeLimit), its nodes idle; `left` takes 2 at once
    (max 2), so the broker sends the others right, and what it sent
    there moves to `left` after move_after, as the same attempt, and every trial ends
    there; a job cancelled to move it is no failure."""
    name = f"sites-move-{RUN}"
    text = SPEC.format(name=name, trials=6, left=LEFT, right=RIGHT)
    # bind: early: each job at its site alone (late, Slurm would start them at left itself)
    text = text.replace("  array: false\n", "  array: false\n  move_after: 3\n  bind: early\n")
    spec = cli.write_spec(text.replace(f"    - {{partition: {LEFT}}}\n",
                                       f"    - {{partition: {LEFT}, max: 2}}\n"))
    slurm_cluster.run("scontrol", "update", f"PartitionName={RIGHT}", "MaxTime=1")
    try:
        proc = cli("submit", spec, "--no-tui", env=slurm_cluster.env, check=0, timeout=240)
    finally:
        slurm_cluster.run("scontrol", "update", f"PartitionName={RIGHT}", "MaxTime=INFINITE")
    exp, trials = read_store(cli.runs, name)
    assert [(t.state, t.attempt, t.site) for t in trials] == [("completed", 1, LEFT)] * 6, \
        proc.stdout
    events = cli("events", name, check=0).stdout
    moved = len(re.findall(f"while site {LEFT} (starts what it gets|has idle nodes for it): "
                           "moved there", events))
    assert moved >= 1 and "pending at site right" in events, events
    sent_right = events.count("to site right")
    assert moved == sent_right, events  # everything sent there moved
    jobs = [a["job_id"] for a in _attempts(cli.runs, name)]
    assert set(_partitions(slurm_cluster, jobs).values()) == {LEFT}


def test_a_site_whose_idle_nodes_take_the_first_jobs_takes_the_next_ones_too(cli,
                                                                            slurm_cluster):
    """benchmarks/brokerage.py's busy scenario (2026-11-30): left full of another user's
    jobs with more queued there, right idle. Right's first 4 jobs, not yet seen running,
    weighed as pending, so the next trials went to left, behind the queued jobs, while
    right's nodes idled at the end of its first wave. The jobs right's idle nodes take count
    as running (brokerage.SiteLoad.starting): all 6 first attempts go to right."""
    name = f"sites-starting-{RUN}"
    text = SPEC.format(name=name, trials=6, left=LEFT, right=RIGHT)
    spec = cli.write_spec(text.replace("parallel: 4", "parallel: 6"))
    common = [f"--partition={LEFT}", "--time=5", "--output=/dev/null", "--chdir=/tmp"]
    hold = slurm_cluster.sbatch(*common, "--nodes=4", "--exclusive", "--job-name=sites-hold",
                                "--wrap=sleep 300")
    queued = [slurm_cluster.sbatch(*common, "--nodes=1", "--job-name=sites-queued",
                                   "--wrap=sleep 1") for _ in range(2)]
    try:
        deadline = time.monotonic() + 30
        while slurm_cluster.run("squeue", "-h", "-j", hold, "-o", "%T").stdout.strip() \
                != "RUNNING":
            assert time.monotonic() < deadline, "the job holding left did not start"
            time.sleep(0.3)
        proc = cli("submit", spec, "--no-tui", env=slurm_cluster.env, check=0, timeout=240)
    finally:
        slurm_cluster.run("scancel", hold, *queued, check=False)
    exp, trials = read_store(cli.runs, name)
    assert [(t.state, t.attempt, t.site) for t in trials] == [("completed", 1, RIGHT)] * 6, \
        proc.stdout
    events = cli("events", name, check=0).stdout
    assert events.count("attempt 1 to site right") == 6 and "to site left" not in events, \
        events


def test_a_search_over_two_clusters_tracks_each_job_on_its_own(cli, slurm_cluster):
    """A site on the second cluster (`cluster:`, every Slurm command with -M): its jobs run
    on that cluster's nodes, whose job ids overlap the first's, and each is followed, ended
    and shown through its own site."""
    other = slurm_cluster.second_cluster
    assert other, "scripts/slurm-cluster.sh starts a second cluster (docs/testing.md)"
    name = f"sites-clusters-{RUN}"
    text = SPEC.format(name=name, trials=6, left=LEFT, right=RIGHT)
    spec = cli.write_spec(text.replace(f"    - {{partition: {RIGHT}}}\n",
                                       f"    - {{cluster: {other}}}\n"))
    proc = cli("submit", spec, "--no-tui", env=slurm_cluster.env, check=0, timeout=240)
    exp, trials = read_store(cli.runs, name)
    assert [t.state for t in trials] == ["completed"] * 6, proc.stdout
    attempts = _attempts(cli.runs, name)
    assert {a["site"] for a in attempts} == {LEFT, other}, attempts
    for a in attempts:
        assert (a["nodes"] in slurm_cluster.second_cluster_nodes) == (a["site"] == other), a
    there = [a["job_id"] for a in attempts if a["site"] == other]
    out = slurm_cluster.run("sacct", "-M", other, "-n", "-P", "-X", "-o", "JobID,State",
                            "-j", ",".join(there)).stdout
    assert sorted(line.split("|")[0] for line in out.split()) == sorted(there), out
    status = cli("status", name, check=0).stdout  # its partition column is empty
    row = next(line.split() for line in status.splitlines() if line.startswith(other + " "))
    assert row[:5] == [other, other, "0", "0", str(len(there))], status


def test_a_site_on_a_cluster_slurmdbd_does_not_know_is_bad_input(cli, slurm_cluster):
    name = f"sites-unknown-{RUN}"
    text = SPEC.format(name=name, trials=2, left=LEFT, right=RIGHT)
    spec = cli.write_spec(text.replace(f"    - {{partition: {RIGHT}}}\n",
                                       "    - {cluster: nosuchcluster}\n"))
    proc = cli("submit", spec, "--no-tui", env=slurm_cluster.env, check=2, timeout=60)
    assert "executor.sites[1]: site nosuchcluster: slurmdbd knows no cluster " \
        "'nosuchcluster'" in proc.stderr, proc.stderr
    assert not (cli.runs / name).exists()

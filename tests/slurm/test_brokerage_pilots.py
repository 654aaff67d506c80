"""Pilots over several sites (`executor.sites` with `executor.pilots`, issue 40) on the
emulated cluster: the broker places each pilot at a site (hpsearch.pilot.places), each
pilot's job runs in its site's partition or cluster and is followed there, trials bind to
whichever pilot runs and are stored at its site; a pilot pending at a site that starts
nothing moves to one that does, and a pending pilot no trial needs is cancelled."""

from __future__ import annotations

import time
import uuid

from hpsearch.store.reader import Reader
from hpsearch.store.runs import STORE_FILE
from tests.helpers import read_store

RUN = uuid.uuid4().hex[:6]
LEFT, RIGHT = "left", "right"  # scripts/slurm-cluster.sh: node1-4 and node5-8

SPEC = """
name: {name}
command: 'sleep {sleep}; echo "@hpsearch step=0 loss={{x}}"'
search:
  strategy: random
  trials: {trials}
  parallel: {parallel}
  seed: 4
  space:
    x: {{low: 0.0, high: 1.0}}
objective: {{metric: loss}}
resources: {{nodes: 1, time: "00:02:00"}}
executor:
  type: slurm
  poll_interval: 0.5
  move_after: {move_after}
  pilots: {{nodes: 1, time: "00:05:00", max: {max}, slots_per_node: {slots},
            idle_timeout: {idle}, heartbeat: 1}}
  sites:
{sites}
"""


def _spec(cli, name, sites, trials=6, parallel=4, sleep=1, max=2, slots=2, idle=3,
          move_after="false"):
    return cli.write_spec(SPEC.format(
        name=name, trials=trials, parallel=parallel, sleep=sleep, max=max, slots=slots,
        idle=idle, move_after=move_after, sites="".join(f"    - {s}\n" for s in sites)))


def _submit_while_right_is_down(cli, slurm_cluster, spec):
    """`hpsearch submit` while partition right takes jobs of at most a minute (MaxTime=1;
    a pilot asks 5): Slurm queues them and starts none (PartitionTimeLimit), its nodes
    idle, so the broker sees room there."""
    slurm_cluster.run("scontrol", "update", f"PartitionName={RIGHT}", "MaxTime=1")
    try:
        return cli("submit", spec, "--no-tui", env=slurm_cluster.env, check=0, timeout=240)
    finally:
        slurm_cluster.run("scontrol", "update", f"PartitionName={RIGHT}", "MaxTime=INFINITE")


def _rows(runs, name, query):
    with Reader(runs / name / STORE_FILE) as reader:
        return list(reader.db.query(query))


def _sacct(cluster, job_ids, cluster_name=None):
    """JobID -> (Partition, State, NodeList, Timelimit, AllocCPUS) of each job, asked again
    for up to a minute while a record lacks its partition (slurmdbd writes a short job's
    record late) or a job still runs (a pilot told to leave as the driver ended may take a while)."""
    where = ["-M", cluster_name] if cluster_name else []
    for _ in range(120):
        out = cluster.run("sacct", *where, "-n", "-P", "-X", "-j", ",".join(job_ids),
                          "-o", "JobID,Partition,State,NodeList,Timelimit,AllocCPUS").stdout
        found = {f[0]: tuple(f[1:]) for f in (line.split("|") for line in out.split())}
        if all(found.get(j, ("",))[0] and found[j][1] not in ("PENDING", "RUNNING",
                                                               "COMPLETING")
               for j in job_ids):
            return found
        time.sleep(0.5)
    return found


def test_pilots_over_a_partition_and_a_second_cluster_run_trials_at_their_own_site(
        cli, slurm_cluster):
    other = slurm_cluster.second_cluster
    assert other, "scripts/slurm-cluster.sh starts a second cluster (docs/testing.md)"
    name = f"sp-two-{RUN}"
    # left's pilots are of their own time and size: 1 slot a node (1 CPU), the others 2
    spec = _spec(cli, name, [f"{{partition: {LEFT}, pilots: {{time: \"00:04:00\", "
                             "slots_per_node: 1}}", f"{{cluster: {other}}}"], trials=8)
    proc = cli("submit", spec, "--no-tui", env=slurm_cluster.env, check=0, timeout=240)
    exp, trials = read_store(cli.runs, name)
    assert [t.state for t in trials] == ["completed"] * 8, proc.stdout
    pilots = _rows(cli.runs, name, "select id, job_id, site, nodes from pilots order by id")
    assert [p["site"] for p in pilots[:2]] == [LEFT, other], pilots
    # each pilot's job is where its site is: left's in partition left on node1-4, the
    # other's on the second cluster's nodes (job ids of the two clusters may be equal)
    for site, where in ((LEFT, None), (other, other)):
        jobs = [p["job_id"] for p in pilots if p["site"] == site]
        found = _sacct(slurm_cluster, jobs, where)
        for job in jobs:  # left's pilots with the site's own time limit and size
            partition, state, nodes, limit, cpus = found[job]
            assert state.startswith("COMPLETED") or state.startswith("CANCELLED"), found
            if site == LEFT:
                assert partition == LEFT and nodes in {f"node{i}" for i in range(1, 5)}, found
                assert (limit, cpus) == ("00:04:00", "1"), found
            else:
                assert nodes in slurm_cluster.second_cluster_nodes, found
                assert (limit, cpus) == ("00:05:00", "2"), found
    # submitit names its files by job id, and the two clusters' ids overlap (on a fresh
    # cluster both first pilots were job 3, and one ran the other's pickle): one folder each
    pilots_dir = cli.runs / name / "pilots"
    for site, folder in ((LEFT, "submitit"), (other, f"submitit-{other}")):
        jobs = {p["job_id"] for p in pilots if p["site"] == site}
        assert jobs <= {f.name.split("_")[0] for f in (pilots_dir / folder).glob(
            "*_submitted.pkl")}, (site, sorted(p.name for p in pilots_dir.rglob("*.pkl")))
    # every attempt ran in a pilot of its stored site, on that pilot's node
    attempts = _rows(cli.runs, name, "select trial, site, job_id, nodes from attempts")
    pilot_at = {(p["site"], p["job_id"]): p["nodes"] for p in pilots}
    assert {a["site"] for a in attempts} == {LEFT, other}, attempts
    for a in attempts:
        assert pilot_at[(a["site"], a["job_id"])] == a["nodes"], (a, pilots)
    # a pilot of left's ran one trial at a time (its one slot), the others up to two (the
    # stored times of 1-second trials: 0.3 s of slack between one's end and the next start)
    spans = _rows(cli.runs, name, "select site, job_id, started, finished from attempts")
    for s in spans:
        beside = [o for o in spans if (o["site"], o["job_id"]) == (s["site"], s["job_id"])
                  and o is not s and o["started"] < s["finished"] - 0.3
                  and s["started"] < o["finished"] - 0.3]
        assert len(beside) <= (0 if s["site"] == LEFT else 1), (s, beside)
    events = cli("events", name, check=0).stdout
    assert f"pilot 1 to site {LEFT} (weights: {LEFT} 0.1, {other} 0.1)" in events, events
    # left's pending pilot, which its idle nodes take, weighs as running (0.2); the other
    # site, with more idle nodes beyond what waits there, goes first
    assert f"pilot 2 to site {other} (weights: {LEFT} 0.2, {other} 0.1)" in events, events
    assert "ended before it ran a trial" not in events, events
    # `sites` weighs pilots, as the broker did: each site's pilots ended, none in flight
    explained = cli("sites", name, check=0).stdout
    for site in (LEFT, other):
        ended = sum(1 for p in pilots if p["site"] == site)
        assert f"  {site}: weight 0.1 (0 running, 0 pending, {ended} ended, median queue " \
            "wait " in explained, explained


def test_a_pilot_pending_at_a_site_that_starts_nothing_moves_to_one_that_does(
        cli, slurm_cluster):
    """`right` starts none of its pilots (MaxTime=1): the first pilot, sent there, is cancelled
    after move_after and one is sent to `left`, which runs every trial; the cancelled pilot
    is no start failure."""
    name = f"sp-move-{RUN}"
    spec = _spec(cli, name, [f"{{partition: {RIGHT}}}", f"{{partition: {LEFT}}}"],
                 max=1, move_after=3)
    proc = _submit_while_right_is_down(cli, slurm_cluster, spec)
    exp, trials = read_store(cli.runs, name)
    assert [(t.state, t.attempt, t.site) for t in trials] == [("completed", 1, LEFT)] * 6, \
        proc.stdout
    pilots = _rows(cli.runs, name, "select id, site, state, reason from pilots order by id")
    assert (pilots[0]["site"], pilots[1]["site"]) == (RIGHT, LEFT), pilots
    assert "CANCELLED" in pilots[0]["reason"], pilots
    events = cli("events", name, check=0).stdout
    assert "pilot 1 (job " in events and f"pending at site {RIGHT} for " in events, events
    assert f"while site {LEFT} takes pilots: cancelled, one sent there" in events, events
    assert "ended before it ran a trial" not in events, events


def test_a_pending_pilot_no_trial_needs_is_cancelled_after_idle_timeout(cli, slurm_cluster):
    """Two pilots for two trials, the second at a site that starts nothing (left takes one:
    max 1; move_after off): the running one takes
    every trial one after another; once no trial waits, the pending one is cancelled
    after idle_timeout, before the search ends."""
    name = f"sp-surplus-{RUN}"
    spec = _spec(cli, name, [f"{{partition: {LEFT}, max: 1}}", f"{{partition: {RIGHT}}}"],
                 trials=3, parallel=2, sleep=6, slots=1, idle=2)
    proc = _submit_while_right_is_down(cli, slurm_cluster, spec)
    exp, trials = read_store(cli.runs, name)
    assert [(t.state, t.site) for t in trials] == [("completed", LEFT)] * 3, proc.stdout
    pilots = _rows(cli.runs, name, "select id, site, reason, ended from pilots order by id")
    assert [p["site"] for p in pilots] == [LEFT, RIGHT], pilots
    cancelled = _rows(cli.runs, name, "select time, message from events where message like "
                      "'pilot 2 (job %) pending, and not needed for 2 s: cancelled'")
    assert len(cancelled) == 1, cli("events", name, check=0).stdout
    last_end = max(a["finished"] for a in _rows(cli.runs, name, "select finished from attempts"))
    assert cancelled[0]["time"] < last_end - 1, (cancelled, last_end)
    assert "CANCELLED" in pilots[1]["reason"], pilots


def test_a_driver_killed_again_and_again_reattaches_each_pilot_at_its_own_cluster(
        cli, slurm_cluster):
    """SIGKILL of the driver at 6 moments of a search over partition left and the second
    cluster: each resumed driver asks each pilot's own cluster about it (job ids of the two
    clusters overlap), re-attaches it, and every trial runs once, in one attempt."""
    from collections import Counter

    from hpsearch.pilot import protocol
    from tests.helpers import kill_driver_repeatedly
    other = slurm_cluster.second_cluster
    assert other, "scripts/slurm-cluster.sh starts a second cluster (docs/testing.md)"
    name = f"sp-crash-{RUN}"
    spec = _spec(cli, name, [f"{{partition: {LEFT}, max: 1}}", f"{{cluster: {other}}}"],
                 trials=12, sleep=2, idle=60)  # max 1: the second pilot goes to the other
    kills = kill_driver_repeatedly(cli, spec, name, slurm_cluster.env, 6, (0.5, 2.5),
                                   after_store=True)
    cli("resume", name, env=slurm_cluster.env, check=0, timeout=300)
    exp, trials = read_store(cli.runs, name)
    assert [(t.state, t.attempt) for t in trials] == [("completed", 1)] * 12, kills
    started = Counter(n for d in protocol.pilots_dir(cli.runs / name).glob("[0-9]*")
                      for n in protocol.names(d / "started") + protocol.names(d / "done"
                                                                               / "started"))
    assert started == Counter({protocol.name_of(t, 1): 1 for t in range(12)}), started
    pilots = _rows(cli.runs, name, "select id, site, state, reason from pilots order by id")
    assert {p["site"] for p in pilots} == {LEFT, other} and len(pilots) <= 4, pilots
    assert all(p["state"] == "ended" for p in pilots), pilots
    events = cli("events", name, check=0).stdout
    assert "re-attached" in events, events

"""`executor.bind: late` (hpsearch.executors.late_binding, issue 40) on the emulated cluster:
a single-node job sent to one site also waits in the partitions of the other sites of its
cluster, Slurm starts it where a node frees first, and the store says where it ran."""

from __future__ import annotations

import time
import uuid

from hpsearch.store.reader import Reader
from hpsearch.store.runs import STORE_FILE
from tests.helpers import read_store
from tests.slurm.test_sites import LEFT, RIGHT, SPEC

RUN = uuid.uuid4().hex[:6]


def _spec(name: str, bind: str) -> str:
    """test_sites' search over left (node1-4) and right (node5-8): 4 trials of a second,
    never moved, bound as `bind` says."""
    return SPEC.format(name=name, trials=4, left=LEFT, right=RIGHT).replace(
        "  array: false\n", f"  array: false\n  move_after: false\n  bind: {bind}\n")


def _hold(cluster, partition):
    """A job of the test's own that holds every node of `partition`, once it runs."""
    return cluster.sbatch(f"--partition={partition}", "--time=5", "--output=/dev/null",
                          "--chdir=/tmp", "--nodes=4", "--exclusive",
                          f"--job-name=late-hold-{partition}", "--wrap=sleep 300")


def _wait(cluster, predicate, what, timeout=30):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.3)


def _state(cluster, job):
    return cluster.run("squeue", "-h", "-j", job, "-o", "%T", check=False).stdout.strip()


def test_jobs_sent_to_a_full_partition_start_in_the_one_that_frees_first(cli, slurm_cluster):
    """Both partitions full of the test's own jobs: the broker sends the 4 trials to both
    sites by weight (left first), each job naming both partitions. Right is freed: every
    trial runs there at once, with no move (move_after: false), and the store, sacct and
    the events say right; left stays full until the search has ended. Early binding
    (the default) would leave the trials sent to left waiting behind left's job."""
    name = f"late-{RUN}"
    spec = cli.write_spec(_spec(name, "late"))
    holds = {p: _hold(slurm_cluster, p) for p in (LEFT, RIGHT)}
    try:
        _wait(slurm_cluster, lambda: all(_state(slurm_cluster, j) == "RUNNING"
                                         for j in holds.values()), "the holds did not start")
        driver = cli.popen("submit", spec, "--no-tui", env=slurm_cluster.env)
        store = cli.runs / name / STORE_FILE

        def all_pending():
            if not store.exists():
                return False
            with Reader(store) as reader:
                rows = list(reader.db.query("select job_id from attempts"))
            return len(rows) == 4 and all(r["job_id"] for r in rows)
        _wait(slurm_cluster, all_pending, "the 4 jobs were not submitted")
        with Reader(store) as reader:
            ids = [r["job_id"] for r in reader.db.query("select job_id from attempts")]
        pending = slurm_cluster.run("squeue", "-h", "-t", "PD", "-j", ",".join(ids), "-o",
                                    "%P", check=False).stdout.split()
        time.sleep(1.0)  # they wait a second at least
        slurm_cluster.run("scancel", holds[RIGHT])
        out, err = driver.communicate(timeout=120)
    finally:
        slurm_cluster.run("scancel", *holds.values(), check=False)
    assert driver.returncode == 0, (out, err)
    exp, trials = read_store(cli.runs, name)
    assert [(t.state, t.attempt, t.site) for t in trials] == [("completed", 1, RIGHT)] * 4, out
    with Reader(cli.runs / name / STORE_FILE) as reader:
        attempts = list(reader.db.query("select site, job_id, nodes, queue_wait from attempts"))
    assert {int(a["nodes"].removeprefix("node")) > 4 for a in attempts} == {True}, attempts
    # each waited from its submit until right was freed: its start was not moved to then
    assert all(a["queue_wait"] >= 1.0 for a in attempts), attempts
    jobs = ",".join(a["job_id"] for a in attempts)
    for _ in range(20):  # slurmdbd writes a short job's record after its end
        parts = slurm_cluster.run("sacct", "-n", "-P", "-X", "-j", jobs,
                                  "-o", "Partition").stdout.split()
        if len(parts) == 4:
            break
        time.sleep(0.5)
    assert parts == [RIGHT] * 4, parts
    events = cli("events", name, check=0).stdout
    sent_left = events.count("to site left (weights")
    assert sent_left >= 1, events  # the broker's pick; Slurm started them at right
    assert events.count("started at site right") == sent_left, events
    assert "moved there" not in events, events
    assert set(pending) <= {f"{LEFT},{RIGHT}", f"{RIGHT},{LEFT}"} and len(pending) == 4, \
        pending
    status = cli("status", name, check=0).stdout  # each site's attempts: where they ran
    rows = {site: next(line.split() for line in status.splitlines()
                       if line.startswith(site + " ")) for site in (LEFT, RIGHT)}
    assert rows[RIGHT][:5] == [RIGHT, RIGHT, "0", "0", "4"], status
    assert rows[LEFT][:5] == [LEFT, LEFT, "0", "0", "0"], status

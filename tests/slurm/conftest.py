"""The `slurm_cluster` fixture: a real Slurm cluster on this host, from scripts/slurm-cluster.sh.

The cluster starts once per test session (installing its packages first on a fresh machine)
and stops at the end if this session started it; one started by hand is left running.
Where it cannot start (not root, no apt-get, a daemon that fails) every test that uses it is
skipped, and the reason, with the tail of the script's output, shows in `pytest -rs`. With
CI set in the environment the same failure fails those tests instead: CI must run them.
See docs/testing.md.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from hpsearch.slurm.hostlist import expand
from hpsearch.slurm.parse import parse_scontrol_records, parse_sinfo_nodes

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "slurm-cluster.sh"
# Enough for apt-get install on a fresh machine (about 30 s here) plus a start (5 s here).
START_TIMEOUT_S = 600
CANNOT_RUN_HERE = 77  # the script's exit code for "not root" / "no apt-get"
OUTPUT_TAIL_LINES = 40


@dataclass(frozen=True)
class SlurmCluster:
    """A running cluster: pass `env` to every Slurm command (it holds SLURM_CONF).

    name: its ClusterName. partitions: each partition's nodes, the default partition first
    (debug: every node; left and right: two disjoint halves). second_cluster: the other
    cluster of the same slurmdbd, reached with -M (`Slurm(env, cluster=...)`), and its
    nodes and partitions; None where it runs none (HPSEARCH_SLURM_SECOND_CLUSTER=none)."""

    state_dir: Path
    env: dict[str, str]
    nodes: tuple[str, ...]
    name: str = "hpsearch"
    partitions: dict[str, tuple[str, ...]] = field(default_factory=dict)
    second_cluster: str | None = None
    second_cluster_nodes: tuple[str, ...] = ()
    second_cluster_partitions: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def conf(self) -> Path:
        return Path(self.env["SLURM_CONF"])

    def run(self, *args: str, check: bool = True, timeout: float = 60,
            cwd: Path | None = None) -> subprocess.CompletedProcess:
        """Runs a Slurm command; with check, a non-zero exit fails with its output."""
        proc = subprocess.run([str(a) for a in args], env=self.env, cwd=cwd,
                              capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            pytest.fail(f"{shlex.join(map(str, args))} exited {proc.returncode}\n"
                        f"stdout: {proc.stdout}\nstderr: {proc.stderr}", pytrace=False)
        return proc

    def sbatch(self, *args: str, cwd: Path | None = None) -> str:
        """Submits with `sbatch --parsable ARGS`; returns the job id."""
        out = self.run("sbatch", "--parsable", *args, cwd=cwd).stdout.strip()
        return out.split(";")[0]  # "<id>" or "<id>;<cluster>"

    def wait_until_gone_from_queue(self, job_id: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while self.run("squeue", "-h", "-j", job_id, "-o", "%i", check=False).stdout.strip():
            if time.monotonic() > deadline:
                pytest.fail(f"job {job_id} still in squeue after {timeout}s")
            time.sleep(0.3)

    def wait_for_accounting(self, job_id: str, fields: str, rows: int = 1,
                            timeout: float = 60) -> list[list[str]]:
        """`sacct --parsable2 --noheader -X -j JOB -o FIELDS` once it shows `rows` records
        (an array's task count), each in a final state. sacct lags the job: slurmctld reports
        to slurmdbd a moment after each change, and an array shows first as `ID_[0-3]`, then
        as some of its tasks, or even as the bare `ID`, for a few seconds. A job that has
        just ended may show for a few seconds under JobName `allocation`, in its final state
        but with only its first node (captured/sacct_transient_allocation_name.txt): such a
        record is waited out too. FIELDS must start with State; returns the records split
        on '|'."""
        deadline = time.monotonic() + timeout
        while True:
            out = self.run("sacct", "--parsable2", "--noheader", "-X", "-j", job_id,
                           "-o", f"JobName,{fields}").stdout
            named = [line.split("|") for line in out.splitlines() if line]
            records = [r[1:] for r in named]
            if len(records) == rows and all(
                    r[0] not in ("PENDING", "RUNNING", "REQUEUED", "COMPLETING") for r in records
            ) and all(r[0] != "allocation" for r in named):
                return records
            if time.monotonic() > deadline:
                pytest.fail(f"sacct did not show job {job_id} as {rows} finished records "
                            f"after {timeout}s: {out!r}")
            time.sleep(0.3)


def _run_script(*args: str, timeout: float,
                env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL, env=env)


def _exported_variables(stdout: str) -> dict[str, str]:
    """The `export NAME=VALUE` lines that `start` prints."""
    found = {}
    for line in stdout.splitlines():
        words = shlex.split(line)
        if len(words) == 2 and words[0] == "export" and "=" in words[1]:
            name, value = words[1].split("=", 1)
            found[name] = value
    return found


def _not_available(reason: str) -> None:
    """Skips, or fails where CI is set; never returns."""
    if os.environ.get("CI"):
        pytest.fail(f"CI is set, so the Slurm tests must run, but: {reason}", pytrace=False)
    pytest.skip(f"Slurm test cluster not available: {reason}")


def _start(env: dict[str, str], what: str):
    """Starts a cluster with scripts/slurm-cluster.sh under `env` (its HPSEARCH_SLURM_*
    settings); returns (SlurmCluster, whether it was running before)."""
    full_env = {**os.environ, **env}
    was_running = _run_script("status", timeout=60, env=full_env).returncode == 0
    began = time.monotonic()
    try:
        proc = _run_script("start", timeout=START_TIMEOUT_S, env=full_env)
    except subprocess.TimeoutExpired as exc:
        _not_available(f"`{SCRIPT.name} start` still running after {START_TIMEOUT_S}s\n"
                       f"{_tail(exc.stderr)}")
    if proc.returncode != 0:
        what_failed = ("cannot run here" if proc.returncode == CANNOT_RUN_HERE
                       else f"`{SCRIPT.name} start` exited {proc.returncode}")
        _not_available(f"{what_failed}\n{_tail(proc.stderr + proc.stdout)}")
    exported = _exported_variables(proc.stdout)
    if "SLURM_CONF" not in exported:
        _not_available(f"`{SCRIPT.name} start` printed no SLURM_CONF\n{_tail(proc.stdout)}")
    print(f"\n{what} up in {time.monotonic() - began:.1f}s "
          f"(SLURM_CONF={exported['SLURM_CONF']})")
    conf = Path(exported["SLURM_CONF"])
    env = {**os.environ, **exported}
    cluster = SlurmCluster(state_dir=conf.parent.parent, env=env,
                           nodes=tuple(f"node{i}" for i in range(1, 9)),
                           **_clusters_and_partitions(env))
    return cluster, was_running


def _clusters_and_partitions(env: dict[str, str]) -> dict:
    """SlurmCluster's name, partitions and second cluster, asked from the running cluster
    (scontrol, sacctmgr, sinfo -M), so that no test names them."""
    def run(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)

    def partitions(*cluster: str) -> dict[str, tuple[str, ...]]:
        records = parse_scontrol_records(
            run("scontrol", *cluster, "show", "partition", "-o").stdout)
        records.sort(key=lambda r: r.get("Default") != "YES")
        return {r["PartitionName"]: tuple(expand(r.get("Nodes", ""))) for r in records}

    config = run("scontrol", "show", "config").stdout
    name = next(line.split("=", 1)[1].strip() for line in config.splitlines()
                if line.split("=", 1)[0].strip() == "ClusterName")
    found: dict = {"name": name, "partitions": partitions()}
    known = run("sacctmgr", "-n", "-P", "list", "clusters", "format=cluster").stdout.split()
    for other in sorted(set(known) - {name}):
        sinfo = run("sinfo", f"--clusters={other}", "-h", "-N", "-o", "%N|%T|%P")
        if sinfo.returncode == 0:  # registered and its slurmctld answers
            found.update(second_cluster=other,
                         second_cluster_nodes=tuple(n.name for n in
                                                    parse_sinfo_nodes(sinfo.stdout)),
                         second_cluster_partitions=partitions(f"--clusters={other}"))
            break
    return found


def _stop(env: dict[str, str], was_running: bool) -> None:
    if not was_running and not os.environ.get("HPSEARCH_SLURM_KEEP"):
        _run_script("stop", timeout=120, env={**os.environ, **env})


@pytest.fixture(scope="session")
def slurm_cluster() -> SlurmCluster:
    """The test cluster, with the tree topology plugin on (leaf1..leaf4 of 2 nodes)."""
    cluster, was_running = _start({}, "Slurm test cluster")
    yield cluster
    _stop({}, was_running)


# A second cluster beside the first, without the tree plugin: Slurm knows no switches, so only
# hpsearch (given the topology file) can keep a trial under one leaf.
# (No second cluster: these tests need none, and it would cost start-up time.)
FLAT_ENV = {"HPSEARCH_SLURM_DIR": "/tmp/hpsearch-slurm-flat", "HPSEARCH_SLURM_PORT_BASE": "16900",
            "HPSEARCH_SLURM_TOPOLOGY": "none", "HPSEARCH_SLURM_SECOND_CLUSTER": "none"}


@pytest.fixture(scope="session")
def slurm_flat_cluster() -> SlurmCluster:
    """Like slurm_cluster, with TopologyPlugin=topology/none; its topology.conf (same four
    leaves) is in etc/ for hpsearch's placement.topology."""
    cluster, was_running = _start(FLAT_ENV, "Slurm cluster without the tree plugin")
    yield cluster
    _stop(FLAT_ENV, was_running)


# A third, that binds as production clusters do: task/cgroup confines each step to its cores
# (a cpuset cgroup; task/affinity alone where the host allows none: the script says so), and
# task/affinity sets each task's mask; 4 GPUs per node let several 1- and 2-GPU trials share
# a node. Binding is real only where a node declares no more CPUs than this host has
# (slurmd lays tasks out on the real cores: with 4 declared on 2 it failed "only 2 bits in
# avail_map for 4 tasks"), so each node declares this host's CPUs, at most 4.
BOUND_CPUS = min(4, len(os.sched_getaffinity(0)))
BOUND_ENV = {"HPSEARCH_SLURM_DIR": "/tmp/hpsearch-slurm-bound",
             "HPSEARCH_SLURM_PORT_BASE": "17100", "HPSEARCH_SLURM_BIND": "cores",
             "HPSEARCH_SLURM_NODE_GPUS": "4", "HPSEARCH_SLURM_NODE_CPUS": str(BOUND_CPUS),
             "HPSEARCH_SLURM_SECOND_CLUSTER": "none"}


@pytest.fixture(scope="session")
def slurm_bound_cluster() -> SlurmCluster:
    """Like slurm_cluster (same 8 nodes and leaves), with TaskPlugin=task/affinity, 4 GPUs
    and this host's CPUs (at most 4) per node."""
    if BOUND_CPUS < 2:
        _not_available(f"binding tests need 2 CPUs to give two trials one each; this host "
                       f"lets the tests use {BOUND_CPUS}")
    cluster, was_running = _start(BOUND_ENV, "Slurm cluster with task/affinity")
    yield cluster
    _stop(BOUND_ENV, was_running)


def _tail(text: str | bytes | None) -> str:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return "\n".join((text or "").rstrip().splitlines()[-OUTPUT_TAIL_LINES:])


# The light cluster tests: their trials are shell sleeps or a small Python script (no PyTorch,
# Lightning, Snakemake, MPI or container), and they make no other user of the machine (as
# tests/site.py does, which the tests without a cluster also do). scripts/test.sh runs them,
# one at a time on a cluster of their own, beside the tests without a cluster: they wait on
# Slurm and on their trials' sleeps, and take little CPU (docs/testing.md#tiers). Not
# test_pilot_fencing.py: its trial's sleep must outlast a give-up and 8 s more, which beside
# the CPU-bound run it did not (a fresh-clone run of 6cdb5f7).
BESIDE = frozenset({
    "test_brokerage_pilots.py", "test_brokerage_preempt.py", "test_cluster.py",
    "test_clusters.py", "test_commands.py", "test_crash_loop.py", "test_driver_job.py",
    "test_late_binding.py",
    "test_pilot_crash.py", "test_pilot_remote_stop.py",
    "test_pilot_views.py", "test_placement.py", "test_pruning_slurm.py", "test_report_usage.py",
    "test_scouts.py", "test_sites.py", "test_slurm_env.py", "test_slurm_faults.py",
    "test_trial_sizes.py", "test_watch_slurm.py"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The first test that uses a cluster also waits for it to start, which on a fresh
    machine includes apt-get install: give that one test START_TIMEOUT_S more than its
    pytest-timeout limit (every other test keeps its own). The tests of BESIDE's files are
    marked slurm_beside."""
    for item in items:
        if item.path.name in BESIDE and item.path.parent.name == "slurm":
            item.add_marker(pytest.mark.slurm_beside)
    pending = {"slurm_cluster", "slurm_flat_cluster", "slurm_bound_cluster"}
    for item in items:
        first_of = pending & set(getattr(item, "fixturenames", ()))
        if not first_of:
            continue
        pending -= first_of
        marker = item.get_closest_marker("timeout")
        try:
            limit = float(marker.args[0]) if marker and marker.args else float(
                config.getini("timeout") or 0)
        except (ValueError, TypeError):  # no pytest-timeout: nothing to extend
            return
        if limit > 0:
            item.add_marker(pytest.mark.timeout(limit + START_TIMEOUT_S))

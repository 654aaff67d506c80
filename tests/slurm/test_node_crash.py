"""A node that crashes under a trial's own job (a job per trial): Slurm ends the job
NODE_FAIL and, by its default JobRequeue=1, requeues it to wait out a BeginTime (cred_expire:
30 s on the test cluster, 120 s by default). hpsearch cancels that requeued job and its retry
submits a new one at once, away from the node (issue 42: the benchmark's job-per-trial row
reached its target 30 s late after a node crash). The crash is benchmarks/_peers_kill.py's:
the node's job processes frozen, the node set DOWN, then the processes killed."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from hpsearch.slurm.hostlist import expand
from hpsearch.store.reader import Reader
from hpsearch.store.runs import STORE_FILE

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import _peers_kill  # noqa: E402  (benchmarks/ is not a package)

SPEC = """
name: crash
command: >-
  [ -e "$HPSEARCH_TRIAL_DIR/ran" ] || {{ touch "$HPSEARCH_TRIAL_DIR/ran"; sleep 600; }};
  echo "@hpsearch result loss={{x}}"
search: {{strategy: grid, space: {{x: {{choices: [1]}}}}}}
objective: {{metric: loss}}
resources: {{time: "00:05:00", nodes: 1, cpus_per_task: 1, partition: {partition}}}
executor: {{type: slurm, poll_interval: 1}}
"""


def _attempts(cli) -> list[dict]:
    path = cli.runs / "crash" / STORE_FILE
    if not path.exists():
        return []
    with Reader(path) as reader:
        return reader.attempts(0)


def _crash(slurm_cluster, monkeypatch, node: str) -> None:
    """benchmarks/_peers_kill.py's crash of a node, on this cluster (its SLURM_CONF in the
    environment: the processes of this cluster's jobs only, and its scontrol)."""
    for key, value in slurm_cluster.env.items():
        monkeypatch.setenv(key, value)
    assert _peers_kill._kill_node(node) > 0, f"no process of a job on {node}"


def _resume(slurm_cluster, node: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        state = slurm_cluster.run("sinfo", "-h", "-n", node, "-o", "%T",
                                  check=False).stdout.split()
        if state and set(state) <= {"idle", "mixed", "allocated"}:
            return
        slurm_cluster.run("scontrol", "update", f"nodename={node}", "state=resume",
                          check=False)
        time.sleep(1)


def test_a_trial_whose_node_crashed_runs_again_in_a_new_job_at_once(cli, slurm_cluster,
                                                                     monkeypatch):
    partition = next(iter(slurm_cluster.partitions))
    spec = cli.write_spec(SPEC.format(partition=partition))
    proc = subprocess.Popen([sys.executable, "-m", "hpsearch", "submit", str(spec), "-q"],
                            cwd=cli.cwd, env={**cli.env, **slurm_cluster.env},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    node = None
    try:
        deadline = time.monotonic() + 120
        while node is None and time.monotonic() < deadline:
            got = _attempts(cli)
            ran = cli.runs / "crash" / "trials" / "00000" / "ran"
            if got and got[0]["nodes"] and ran.exists():
                node = expand(got[0]["nodes"])[0]
            time.sleep(0.3)
        assert node is not None, "the trial never ran"
        _crash(slurm_cluster, monkeypatch, node)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
        if node is not None:
            _resume(slurm_cluster, node)
    assert proc.returncode == 0, out
    got = _attempts(cli)
    assert [a["failure"] for a in got] == ["node_fail", None], got
    first, second = got[0]["job_id"], got[1]["job_id"]
    assert first != second, got  # a new job, not Slurm's requeue of the same one
    assert node not in expand(got[1]["nodes"]), got  # the retry avoided the node
    assert "cancelled, to run again now as a new job" in got[0]["reason"], got
    deadline, runs = time.monotonic() + 30, []
    while time.monotonic() < deadline:  # every run of the first job (-D: requeues too)
        runs = slurm_cluster.run("sacct", "-D", "-X", "-P", "-n", "-j", first, "-o",
                                 "State").stdout.splitlines()
        if runs and runs[-1] not in ("PENDING", "RUNNING", "REQUEUED"):
            break
        time.sleep(1)
    assert runs[0] == "NODE_FAIL" and runs[-1].startswith("CANCELLED"), runs  # never ran again

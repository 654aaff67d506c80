"""A preemptible site (issue 40): a search over `scavenger` (PreemptMode=CANCEL, its jobs
cancelled for any job of the higher-tier partition `urgent` on its nodes) and `left`. A
trial preempted at the scavenger site is retried without counting against its retries,
goes to `left` (urgent holds scavenger's nodes: the broker sends it where it starts now, or
it waits at scavenger and moves after move_after), and resumes there from the step its
first attempt reached (scripts/slurm-cluster.sh
configures both partitions over node5-8)."""

from __future__ import annotations

import time
import uuid

import pytest

from hpsearch.store.reader import Reader
from hpsearch.store.runs import STORE_FILE
from tests.helpers import read_store

RUN = uuid.uuid4().hex[:6]

# Counts to 12, a second a step, from the step its trial dir holds (its checkpoint).
SPEC = """
name: {name}
command: >-
  f="$HPSEARCH_TRIAL_DIR/step"; s=$(cat "$f" 2>/dev/null || echo 0);
  echo "$HPSEARCH_ATTEMPT $s" >> "$HPSEARCH_TRIAL_DIR/starts";
  while [ "$s" -lt 12 ]; do sleep 1; s=$((s + 1)); echo "$s" > "$f";
  echo "@hpsearch step=$s loss={{x}}"; done
search:
  strategy: grid
  space:
    x: {{choices: [0.5]}}
objective: {{metric: loss}}
resources: {{nodes: 1, time: "00:02:00"}}
executor:
  type: slurm
  poll_interval: 0.5
  array: false
  move_after: 3
{pilots}  sites:
    - {{partition: scavenger}}
    - {{partition: left}}
"""


def _step(cli, name) -> int:
    try:
        return int((cli.runs / name / "trials" / "00000" / "step").read_text() or 0)
    except (OSError, ValueError):
        return 0


PILOTS = ("  pilots: {nodes: 1, time: \"00:05:00\", max: 1, idle_timeout: 5, "
          "heartbeat: 1}\n")


@pytest.mark.parametrize("mode", ["jobs", "pilots"])
def test_a_trial_preempted_at_a_scavenger_site_resumes_elsewhere_not_counted(
        cli, slurm_cluster, mode):
    """Jobs: the trial's own job is preempted. Pilots: the pilot it runs in is, and the
    trial runs on in the next pilot, at `left`."""
    parts = slurm_cluster.partitions
    assert "scavenger" in parts and "urgent" in parts, \
        f"scripts/slurm-cluster.sh configures scavenger and urgent (has {sorted(parts)}): " \
        "stop the cluster, then start it"
    name = f"preempt-{mode}-{RUN}"
    # jobs: bind: early, each attempt at its site alone: the first at scavenger, as the
    # broker sends it (late, Slurm could start it at left: both are idle)
    spec = cli.write_spec(SPEC.format(name=name, pilots=PILOTS if mode == "pilots"
                                      else "  bind: early\n"))
    driver = cli.popen("submit", spec, "--no-tui", env=slurm_cluster.env)
    urgent = None
    try:
        deadline = time.monotonic() + 60
        while _step(cli, name) < 3 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _step(cli, name) >= 3, "the trial never ran at the scavenger site"
        urgent = slurm_cluster.run(
            "sbatch", "--parsable", "-p", "urgent", "-N", str(len(parts["urgent"])),
            "--exclusive", "-o", "/dev/null", "--wrap", "sleep 120").stdout.strip()
        out, _ = driver.communicate(timeout=180)
    finally:
        if urgent:
            slurm_cluster.run("scancel", urgent)
        if driver.poll() is None:
            driver.kill()
    exp, (trial,) = read_store(cli.runs, name)
    assert (trial.state, trial.site, trial.objective_values) == ("completed", "left", [0.5]), out
    with Reader(cli.runs / name / STORE_FILE) as reader:
        attempts = list(reader.db.query(
            "select attempt, site, failure, job_id from attempts order by attempt"))
    assert [(a["site"], a["failure"]) for a in attempts[:1]] == [("scavenger", "preempted")], \
        attempts
    assert attempts[-1]["site"] == "left", attempts
    starts = (cli.runs / name / "trials" / "00000" / "starts").read_text().split("\n")
    first, last = starts[0].split(), starts[-2].split()
    assert first == ["1", "0"] and int(last[1]) >= 3, starts  # resumed, not from 0
    events = cli("events", name, check=0).stdout
    # urgent holds scavenger's nodes: the next attempt (its pilot) goes to left, where it
    # starts now, or, sent to scavenger, waits there and moves
    moved = "moved there" if mode == "jobs" else "cancelled, one sent there"
    assert "to site left (weights: " in events or (
        "pending at site scavenger" in events and moved in events), events
    assert "retry 1 of" not in events, events  # a preemption that progressed: not counted

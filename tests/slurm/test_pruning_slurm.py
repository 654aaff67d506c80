"""Early stopping on the real emulated cluster, as a job per trial, as job arrays and in
pilots: a trial the median pruner rejects is stopped (STOP file, then scancel, or the pilot's
cancel), recorded `pruned` and never retried, and the next trial takes its place."""

from __future__ import annotations

import re
import sys
import uuid

import pytest

from tests.helpers import read_store
from tests.test_pruning import CURVE

RUN = uuid.uuid4().hex[:6]

SPEC = """
name: {name}
command: {python} {script} {{x}} {{steps}} {{pause}}
search:
  strategy: grid
  parallel: 1
  space:
    x: {{choices: [0, 1, 2, 3]}}
    steps: {{value: 12}}
    pause: {{value: 0.4}}
  pruner: {{type: median, n_startup_trials: 1, n_warmup_steps: 1}}
objective: {{metric: loss}}
retries: {{max: 2}}
resources: {{nodes: 1, time: "00:02:00"}}
executor:
  type: slurm
  poll_interval: 1s
  array: {array}
{pilots}
"""
PILOTS = "  pilots: {nodes: 1, time: '00:05:00', max: 1, idle_timeout: 10, heartbeat: 1}"


@pytest.mark.parametrize("mode", ["jobs", "array", "pilots"])
def test_pruned_trials_stop_early_on_slurm_and_free_their_place(cli, slurm_cluster, mode):
    name = f"prune-{mode}-{RUN}"
    script = cli.cwd / "curve.py"
    script.write_text(CURVE)
    spec = cli.write_spec(SPEC.format(name=name, python=sys.executable, script=script,
                                      array="true" if mode == "array" else "false",
                                      pilots=PILOTS if mode == "pilots" else ""))
    proc = cli("submit", spec, env=slurm_cluster.env, check=0, timeout=300)
    _, trials = read_store(cli.runs, name)
    assert [t.state for t in trials] == ["completed", "pruned", "pruned", "pruned"], \
        proc.stdout
    took = []
    for t in trials[1:]:
        assert t.attempt == 1 and t.stop_request["step"] == 1, t
        took.append(float(re.search(r"stopped ([\d.]+) s after", t.error).group(1)))
        reported = (cli.runs / name / "trials" / f"{t.id:05d}" / "metrics.jsonl").read_text()
        assert len(reported.splitlines()) < 8, reported  # not its 12 steps
    print(f"\n{mode}: seconds from decision to the driver seeing the end: {took}")
    # the next poll (1 s) plus Slurm's KillWait (2 s) and slurmctld's answer, with margin
    # for this 2-core machine
    assert max(took) < 10, took
    jobs = {t.job_id for t in trials}
    if mode == "pilots":  # one pilot ran them all: each pruned trial's slot went to the next
        assert len(jobs) == 1, jobs
    else:
        assert len(jobs) == 4, jobs

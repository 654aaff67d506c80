"""Early stopping on the real emulated cluster, as a job per trial, as job arrays and in
pilots: a trial the median pruner rejects is stopped (STOP file, then scancel, or the pilot's
cancel), recorded `pruned` and never retried, and the next trial takes its place. Promotion
mode: segments of one trial run as separate jobs (or pilot slots) and resume from the
checkpoint on shared storage."""

from __future__ import annotations

import json
import re
import sys
import uuid

import pytest

from tests.helpers import read_store
from tests.test_promotion import SEGMENTED, _segments
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


PROMOTION = """
name: {name}
command: {python} {script} {{x}} {{steps}} {{pause}}
search:
  strategy: grid
  parallel: 2
  space:
    x: {{choices: [5, 3, 4, 1, 2, 0]}}
    steps: {{value: 4}}
    pause: {{value: 0.1}}
  pruner: {{type: asha, mode: promotion, min_resource: 1, reduction_factor: 2,
           max_resource: 4}}
objective: {{metric: loss}}
resources: {{nodes: 1, time: "00:02:00"}}
executor:
  type: slurm
  poll_interval: 1s
{pilots}
"""


@pytest.mark.parametrize("mode", ["jobs", "pilots"])
def test_promotion_segments_run_as_jobs_or_pilot_slots_and_resume_from_checkpoints(
        cli, slurm_cluster, mode):
    name = f"promo-{mode}-{RUN}"
    script = cli.cwd / "segmented.py"
    script.write_text(SEGMENTED)
    pilots = PILOTS.replace("max: 1", "max: 1, slots_per_node: 2") if mode == "pilots" else ""
    spec = cli.write_spec(PROMOTION.format(name=name, python=sys.executable, script=script,
                                           pilots=pilots))
    proc = cli("submit", spec, env=slurm_cluster.env, check=0, timeout=300)
    _, trials = read_store(cli.runs, name)
    segments = _segments(cli.runs, name)
    best = next(t for t in trials if t.params["x"] == 0)
    assert best.state == "completed", proc.stdout
    assert best.objective_values == [0.25]  # x + 1/4, as an uninterrupted run
    assert [(s[1], s[2]) for s in segments[best.id]] == [(0, 1), (1, 2), (2, 4)]
    attempts = _attempt_jobs(cli.runs, name, best.id)
    reported = (cli.runs / name / "trials" / f"{best.id:05d}" / "metrics.jsonl").read_text()
    assert [json.loads(line)["step"] for line in reported.splitlines()] == [0, 1, 2, 3]
    if mode == "pilots":
        assert len({t.job_id for t in trials}) == 1  # one pilot ran every segment
    else:
        assert len(set(attempts)) == 3, attempts  # each segment its own Slurm job
    assert {t.state for t in trials} <= {"completed", "paused"}


def _attempt_jobs(runs, name, trial_id) -> list[str]:
    from hpsearch.store.reader import Reader
    from hpsearch.store.runs import STORE_FILE
    reader = Reader(runs / name / STORE_FILE)
    try:
        return [a["job_id"] for a in reader.attempts(trial_id)]
    finally:
        reader.close()

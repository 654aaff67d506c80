"""Trials get their own Slurm environment, not that of the allocation they were submitted
from or run in (issue 26, item 2).

A driver inside a Slurm job (here `--driver-job`) has SLURM_MEM_PER_CPU from the cluster's
DefMemPerCPU; sbatch used to pass it on to every trial job beside the trial's own `--mem`,
and the trial's first srun died: "SLURM_MEM_PER_CPU, SLURM_MEM_PER_GPU, and
SLURM_MEM_PER_NODE are mutually exclusive". In a pilot, a trial saw the pilot job's
SLURM_CPUS_PER_TASK (all the CPUs of a node) instead of its own."""

from __future__ import annotations

import subprocess
import time
import uuid
from pathlib import Path

from tests.helpers import read_store

RUN = uuid.uuid4().hex[:6]
ROOT = Path(__file__).resolve().parents[2]
SHOW = ("for v in SLURM_NTASKS SLURM_CPUS_PER_TASK SLURM_MEM_PER_NODE SLURM_MEM_PER_CPU; "
        "do echo \"$v=$(printenv $v || echo unset)\"; done; srun --ntasks=1 true && echo srun-ok")

SPEC = """
name: {name}
command: '{show}; echo "@hpsearch step=0 loss={{x}}"'
search: {{strategy: grid, parallel: 2, space: {{x: {{choices: [1, 2]}}}}}}
objective: {{metric: loss}}
resources: {{time: "00:02:00", mem: 500M, cpus_per_task: 1}}
executor: {{type: slurm, poll_interval: 0.5, array: false{pilots}}}
"""
PILOTS = (", pilots: {nodes: 1, time: '00:05:00', max: 1, slots_per_node: 2, "
          "idle_timeout: 5, heartbeat: 0.5}")


def _seen(cli, name: str, trial: int) -> dict[str, str]:
    out = (cli.runs / name / "trials" / f"{trial:05d}" / "stdout.log").read_text()
    return dict(line.split("=", 1) for line in out.splitlines() if line.startswith("SLURM_")) \
        | {"srun": "ok" if "srun-ok" in out else "failed"}


def _completed(cli, name: str) -> None:
    exp, trials = read_store(cli.runs, name)
    assert exp.status == "completed", exp
    assert [t.state for t in trials] == ["completed"] * 2, [(t.id, t.error) for t in trials]


def test_a_driver_job_submits_trials_that_srun_with_their_own_memory(cli, slurm_cluster):
    name = f"env-drv-{RUN}"
    spec = cli.write_spec(SPEC.format(name=name, show=SHOW, pilots=""), f"{name}.yaml")
    env = {**slurm_cluster.env, "PYTHONPATH": str(ROOT)}
    cli("submit", spec, "--driver-job", env=env, check=0)
    deadline = time.monotonic() + 180
    while read_store(cli.runs, name)[0].status not in ("completed", "failed"):
        assert time.monotonic() < deadline, "the driver job did not finish"
        time.sleep(1)
    _completed(cli, name)
    for trial in (0, 1):
        assert _seen(cli, name, trial) == {
            "SLURM_NTASKS": "1", "SLURM_CPUS_PER_TASK": "1", "SLURM_MEM_PER_NODE": "500",
            "SLURM_MEM_PER_CPU": "unset", "srun": "ok"}


def test_a_trial_in_a_pilot_sees_its_own_size_not_the_pilots(cli, slurm_cluster):
    name = f"env-pilot-{RUN}"
    spec = cli.write_spec(SPEC.format(name=name, show=SHOW, pilots=PILOTS), f"{name}.yaml")
    cli("submit", spec, env=slurm_cluster.env, check=0, timeout=300)
    _completed(cli, name)
    for trial in (0, 1):  # the pilot job holds 2 CPUs and 1000 MB for its two slots
        assert _seen(cli, name, trial) == {
            "SLURM_NTASKS": "1", "SLURM_CPUS_PER_TASK": "1", "SLURM_MEM_PER_NODE": "500",
            "SLURM_MEM_PER_CPU": "unset", "srun": "ok"}
    # The pilot's clock is its job's: its end is the job's start plus its time limit (from
    # squeue: Slurm 22.05 sets no SLURM_JOB_END_TIME), not the pilot process's start plus
    # the limit, which comes a second or more later.
    from hpsearch.pilot import protocol
    from hpsearch.pilot.program import MARGIN
    beat = protocol.read_json(
        protocol.PilotPaths(protocol.pilots_dir(cli.runs / name) / "1").heartbeat)
    deadline = time.monotonic() + 30
    while True:  # sacct lags slurmctld by a moment
        fields = subprocess.run(
            ["sacct", "-n", "-X", "-P", "-j", beat["job_id"], "-o", "Start,TimelimitRaw"],
            env={**slurm_cluster.env, "SLURM_TIME_FORMAT": "%s"}, capture_output=True,
            text=True, check=True).stdout.strip().split("|")
        if len(fields) == 2 and fields[0].isdigit() and fields[1].isdigit():
            break
        assert time.monotonic() < deadline, fields
        time.sleep(1)
    job_end = float(fields[0]) + 60 * float(fields[1])
    assert beat["time"] + beat["remaining"] <= job_end - MARGIN + 0.5, (beat, fields)

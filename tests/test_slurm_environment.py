"""What a Slurm command and a trial in a pilot inherit (hpsearch.slurm.environment): the
allocation's own variables never, the user's settings always; a pilot keeps its job's clock.
The same on the emulated cluster: tests/slurm/test_slurm_env.py."""

from __future__ import annotations

import time

from hpsearch.pilot import protocol
from hpsearch.pilot.program import MARGIN, Allocation, Pilot
from hpsearch.slurm.environment import for_pilot_trial, job_end, outside_allocation

IN_A_JOB = {"SLURM_JOB_ID": "7", "SLURM_MEM_PER_CPU": "1000", "SLURM_CPUS_PER_TASK": "4",
            "SBATCH_PARTITION": "x", "SRUN_CPUS_PER_TASK": "4", "PMI_RANK": "0",
            "PMIX_RANK": "0", "SLURM_CONF": "/etc/slurm/slurm.conf",
            "SLURM_TIME_FORMAT": "relative", "PATH": "/bin", "OMPI_MCA_btl": "self"}


def test_inside_a_job_slurm_commands_get_none_of_its_variables_but_the_users_settings():
    assert outside_allocation(IN_A_JOB) == {
        "SLURM_CONF": "/etc/slurm/slurm.conf", "SLURM_TIME_FORMAT": "relative",
        "PATH": "/bin", "OMPI_MCA_btl": "self"}


def test_outside_a_job_nothing_is_removed():
    mine = {"SBATCH_ACCOUNT": "proj", "SLURM_CONF": "/x", "PATH": "/bin"}
    assert outside_allocation(mine) == mine


def test_a_trial_in_a_pilot_gets_the_slurm_variables_of_its_own_size():
    env = for_pilot_trial("node[3-4]", 2, 2, 3, ["1", "2"], [1, 2], 500)
    assert env["SLURM_NTASKS"] == "4" and env["SLURM_CPUS_PER_TASK"] == "3"
    assert env["SLURM_TASKS_PER_NODE"] == "2(x2)" and env["SLURM_JOB_CPUS_PER_NODE"] == "6(x2)"
    assert env["CUDA_VISIBLE_DEVICES"] == "1,2" and env["SLURM_GPUS_ON_NODE"] == "2"
    assert env["HPSEARCH_GPU_FIELDS"] == "2,3"  # its srun steps: the slot's GPUs
    assert "SLURM_GPUS_PER_NODE" not in env  # srun's input: every step would get GPU 0
    assert env["SLURM_MEM_PER_NODE"] == "500" and "SLURM_MEM_PER_CPU" not in env


def test_a_pilot_ends_by_its_jobs_clock_when_slurm_tells_it(tmp_path):
    assert job_end({"SLURM_JOB_END_TIME": "1800000000"}) == 1800000000.0
    assert job_end({}) is None
    paths = protocol.PilotPaths(tmp_path / "1")
    config = {"time_limit": 600, "slots_per_node": 1, "trial_gpus": 0, "kill_grace": 1,
              "signal_before": 0, "heartbeat": 1, "trial_time": None}
    pilot = Pilot(paths, config, Allocation("7", ("n1",), "n1", (), time.time() + 100))
    assert 100 - MARGIN - 1 < pilot.end - time.monotonic() <= 100 - MARGIN
    pilot = Pilot(paths, config, Allocation("7", ("n1",), "n1"))  # not told: the limit
    assert 600 - MARGIN - 1 < pilot.end - time.monotonic() <= 600 - MARGIN



def test_a_steps_gpus_narrow_to_the_slots_positions_on_its_node():
    import subprocess

    from hpsearch.launch.base import GPU_NARROW
    show = 'echo "$CUDA_VISIBLE_DEVICES $SLURM_STEP_GPUS"'
    step = {"PATH": "/bin:/usr/bin", "SLURM_STEP_GPUS": "4,5,6,7",
            "CUDA_VISIBLE_DEVICES": "0,1,2,3", "HPSEARCH_GPU_FIELDS": "2,4"}
    out = subprocess.run(["/bin/sh", "-c", GPU_NARROW + "\n" + show], env=step,
                         capture_output=True, text=True, check=True).stdout
    assert out.split() == ["1,3", "5,7"]
    outside = {k: v for k, v in step.items() if k != "HPSEARCH_GPU_FIELDS"}
    for unchanged in (outside,  # not in a pilot (an empty list: a trial of no GPUs)
                      {**step, "SLURM_STEP_GPUS": ""}):  # no GPUs from Slurm
        out = subprocess.run(["/bin/sh", "-c", GPU_NARROW + "\n" + show], env=unchanged,
                             capture_output=True, text=True, check=True).stdout
        assert out.split()[0] == "0,1,2,3"

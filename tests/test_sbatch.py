"""Golden tests of the batch script each Slurm trial gets (what `hpsearch plan` prints).

Set UPDATE_GOLDEN=1 to rewrite the files after a deliberate change, then read the diff.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from hpsearch.launch.attempt import build_launch
from hpsearch.preflight import parse_spec
from hpsearch.slurm.sbatch import batch_script, job_name

GOLDEN = Path(__file__).parent / "golden" / "sbatch"

BASE = """
name: golden
command: "train --lr {lr} --name {tag}"
workdir: /work/project
runs_dir: /scratch/runs
search:
  strategy: grid
  space:
    lr: {choices: [0.1]}
    tag: {choices: ["it's a $(test)"]}
objective: {metric: loss}
executor: slurm
"""

CASES = {
    "minimal": "",
    "all_resources": """
resources:
  nodes: 2
  tasks_per_node: 4
  gpus_per_node: 4
  cpus_per_task: 8
  mem: 64G
  time: "1-00:00:00"
  partition: gpu
  account: proj42
  qos: high
  sbatch_extra: ["--constraint=a100", "--exclusive"]
env: {OMP_NUM_THREADS: 8, WANDB_MODE: offline}
""",
}


def _script(extra: str, attempt: int = 1) -> str:
    spec = parse_spec(BASE + extra, "golden.yaml", Path("/work/project"))
    launch = build_launch(spec.trial_recipe(True), 0, attempt, {"lr": 0.1, "tag": "it's a $(test)"})
    # a GPU trial's sampler runs on the driver's python (docs/gpu.md): not this machine's path
    return batch_script(spec.slurm_job(), launch).replace(sys.executable, "/venv/bin/python")


@pytest.mark.parametrize("case", sorted(CASES))
def test_batch_script_matches_golden_file(case):
    text = _script(CASES[case])
    path = GOLDEN / f"{case}.sbatch"
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text()


def test_values_are_quoted_and_names_are_unique_per_attempt():
    text = _script("")
    assert "--name 'it'\"'\"'s a $(test)'" in text
    assert "#SBATCH --job-name=hps.golden.0.1" in text
    assert job_name("golden", 0, 2) in _script("", attempt=2)
    assert "export HPSEARCH_ATTEMPT=2" in _script("", attempt=2)


@pytest.mark.parametrize("time_limit, lead", [("2", 30), ("00:10:00", 120), ("1-00:00:00", 300),
                                              (None, 300)])
def test_driver_job_is_signalled_before_its_time_limit(time_limit, lead):
    """The driver job asks for SIGUSR1 a fifth of its limit ahead (30 s to 5 min), marks its
    run for `hpsearch resume`, and carries its instance tag in its name."""
    import dataclasses

    from hpsearch.driver.slurm_job import driver_script
    spec = dataclasses.replace(parse_spec(BASE, "golden.yaml", Path("/work/project")),
                               instance="abc123")
    text = driver_script(spec, "/usr/bin/python3", time_limit)
    assert f"#SBATCH --signal=B:USR1@{lead}\n" in text
    assert "#SBATCH --requeue\n" in text and "#SBATCH --job-name=hps-driver.golden.abc123\n" \
        in text
    assert 'export HPSEARCH_DRIVER_JOB="$SLURM_JOB_ID"' in text


@pytest.mark.parametrize("text, seconds", [("90", 5400), ("01:30", 90), ("1:30:00", 5400),
                                           ("2-00", 172800), ("2-01:02:03", 176523),
                                           ("UNLIMITED", None), ("1\n#SBATCH -p x", None),
                                           ("1_0", None), ("", None), ("-5", None)])
def test_slurm_time_limits_are_read_as_sbatch_reads_them(text, seconds):
    from hpsearch.spec.durations import parse_time_limit
    assert parse_time_limit(text) == seconds

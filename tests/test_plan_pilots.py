"""`hpsearch plan` of a pilot search: the pilot job's batch script (a golden file), then each
trial's command inside a pilot; no Slurm command, nothing written.

Set UPDATE_GOLDEN=1 to rewrite the golden files after a deliberate change, then read the diff.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import pytest

from hpsearch.procs import SAFE_MODULE_RUN

GOLDEN = Path(__file__).parent / "golden" / "sbatch"

SPEC = """
name: pgold
command: "train --lr {{lr}} --name {{tag}}"
search:
  strategy: grid
  space:
    lr: {{choices: [0.1, 0.2]}}
    tag: {{choices: ["it's a $(test)"]}}
objective: {{metric: loss}}
resources:
{resources}
executor:
  type: slurm
  pilots: {{nodes: {nodes}, time: "00:05:00", max: 2, slots_per_node: {slots}}}
"""

CASES = {
    "pilot_minimal": dict(nodes=2, slots=1, resources='  nodes: 1\n  time: "00:02:00"'),
    "pilot_all_resources": dict(nodes=4, slots=2, resources="""\
  nodes: 2
  tasks_per_node: 2
  cpus_per_task: 4
  gpus_per_node: 2
  mem: 16G
  time: "00:02:00"
  partition: gpu
  account: proj42
  qos: high"""),
}


def _plan(cli, case: str, env: dict | None = None):
    cli.write_spec(SPEC.format(**CASES[case]))
    return cli("plan", "spec.yaml", env=env, check=0)


def _pilot_section(cli, stdout: str) -> str:
    """The pilot part of plan's output, its absolute paths as placeholders."""
    section = stdout.split("\n\npilots: ", 1)[1].split("\n\ntrial ", 1)[0]
    return ("pilots: " + section + "\n").replace(str(cli.runs), "<runs>").replace(
        sys.executable, "<python>")


@pytest.mark.parametrize("case", sorted(CASES))
def test_plan_prints_the_pilot_batch_script_of_the_golden_file(cli, case):
    text = _pilot_section(cli, _plan(cli, case).stdout)
    path = GOLDEN / f"{case}.sbatch"
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text()
    # what a pilot must be, whatever else changes: one process on the allocation's first
    # node (no srun), never requeued, no --signal (Slurm would send it to the trials' steps)
    script = text.split("#!/bin/bash", 1)[1]
    assert "srun" not in script and "--signal" not in script
    for line in ("#SBATCH --no-requeue", f"#SBATCH --nodes={CASES[case]['nodes']}",
                 "#SBATCH --ntasks-per-node=1", "#SBATCH --time=00:05:00",
                 "<python> -u -c " + shlex.quote(SAFE_MODULE_RUN)
                 + " hpsearch.pilot.submitted <runs>/pgold/pilots/submitit"):
        assert line in script.splitlines(), line  # never `-m`: the submit folder's code


def test_pilot_nodes_hold_slots_per_node_trials_and_the_queue_options(cli):
    script = _pilot_section(cli, _plan(cli, "pilot_all_resources").stdout)
    lines = set(script.splitlines())
    # 2 slots of (2 tasks x 4 CPUs, 2 GPUs, 16G) per node
    assert {"#SBATCH --cpus-per-task=16", "#SBATCH --gpus-per-node=4", "#SBATCH --mem=32768M",
            "#SBATCH --partition=gpu", "#SBATCH --account=proj42",
            "#SBATCH --qos=high"} <= lines, script


def test_each_trial_is_a_command_inside_a_pilot_not_a_job(cli):
    out = _plan(cli, "pilot_all_resources").stdout
    assert out.count("#!/bin/bash") == 1  # the pilot's script; no per-trial job script
    assert "#SBATCH --job-name=hps.pgold.0" not in out
    assert "#SBATCH --job-name=hps.pgold.pilot.1" in out
    assert "are chosen from live node state at submit time" in out
    trials = out.split("\n\ntrial ")[1:]
    assert len(trials) == 2
    for trial, lr in zip(trials, ("0.1", "0.2")):
        lines = trial.splitlines()
        assert lines[1] == ("  runs inside a pilot (no job of its own), on 2 nodes of the "
                            "pilot's allocation:")
        assert lines[2].startswith("  $ ")
        assert f"train --lr {lr} --name 'it'\"'\"'s a $(test)'" in trial
    assert not cli.runs.exists()  # plan writes nothing


def test_plan_of_a_pilot_search_needs_no_slurm_on_the_machine(cli, tmp_path):
    """Before: submitit refused to build the script without `srun` on PATH (a laptop)."""
    empty = tmp_path / "no-slurm-bin"
    empty.mkdir()
    out = _plan(cli, "pilot_minimal", env={"PATH": str(empty)}).stdout
    assert "#SBATCH --job-name=hps.pgold.pilot.1" in out

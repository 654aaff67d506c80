"""`hpsearch plan --brief` (issue 38 item 13): a pilot search's plan without the ten lines of
launch shell around each trial's command (before: `--brief` was refused, exit 2)."""

from __future__ import annotations

import sys

SPEC = """
name: brief
command: "{{python}} train.py --lr {{lr}} --name {{tag}}"
search:
  strategy: grid
  space:
    lr: {{choices: [0.1, 0.2, 0.3]}}
    tag: {{choices: ["it's"]}}
objective: {{metric: loss}}
resources: {{nodes: 1, gpus_per_node: 1, time: "00:02:00"}}
executor:
{executor}
"""
PILOTS = '  type: slurm\n  pilots: {nodes: 2, time: "00:05:00", max: 2, slots_per_node: 2}'


def _plan(cli, executor: str, *flags: str) -> str:
    (cli.cwd / "train.py").write_text("")
    cli.write_spec(SPEC.format(executor=executor))
    return cli("plan", "spec.yaml", *flags, check=0).stdout


def test_brief_shows_each_pilot_trial_as_its_own_command_in_two_lines(cli):
    full = _plan(cli, PILOTS)
    brief = _plan(cli, PILOTS, "--brief")
    command = f"{sys.executable} train.py --lr 0.2 --name 'it'\"'\"'s'"
    assert f"$ {command}" not in full.splitlines()  # wrapped in shell lines there
    assert "MASTER_ADDR" in full and "#SBATCH" in full and "--brief" in full
    assert "MASTER_ADDR" not in brief and "#SBATCH" not in brief and "scontrol" not in brief
    trials = brief.split("\ntrial ")[1:]
    assert [t.splitlines() for t in trials] == [
        [f"{i}: lr={lr} tag=it's", f"  $ {sys.executable} train.py --lr {lr} --name "
         "'it'\"'\"'s'"] for i, lr in enumerate(("0.1", "0.2", "0.3"))]
    assert "pilots: trials run in pilot jobs, up to 2 at a time, each of 2 nodes x 2 slots " \
        "for 00:05:00" in brief
    assert len(brief.splitlines()) <= 12
    assert not cli.runs.exists()  # plan writes nothing


def test_brief_on_slurm_jobs_and_locally_shows_the_command_not_the_script(cli):
    brief = _plan(cli, "  type: slurm", "--brief")
    assert "#SBATCH" not in brief and "#SBATCH" in _plan(cli, "  type: slurm")
    assert f"  $ {sys.executable} train.py --lr 0.3 --name " in brief
    local = _plan(cli, "  type: local\n  gpus: ['0']", "--brief", "--limit", "1")
    assert local.split("\ntrial ")[1].splitlines()[1].startswith(
        f"  $ {sys.executable} train.py --lr 0.1")
    assert "hpsearch.gpu.sampler" not in local and "... 2 more" in local


def test_help_shows_brief_with_an_example(cli):
    text = cli("plan", "--help", check=0).stdout
    assert "--brief" in text and "hpsearch plan pilots.yaml --brief" in text

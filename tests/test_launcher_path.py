"""A launcher missing where trials run (issue 24 item 5): a trial that exits 127 names the
program not found, and the node, in the message status and events show (it was only
"exit code 127: srun: error: node2: task 1: Exited with exit code 127"); `validate` and
`plan` warn, without failing, about a launcher or container runtime not on PATH here.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from hpsearch.ingest.not_found import missing_program

HINT = "docs/trial.md#your-scripts-environment"

LOCAL = """
name: {name}
command: {command}
search:
  strategy: random
  trials: 1
  space:
    lr: {{low: 0.1, high: 1.0}}
objective: {{metric: loss}}
retries: {{launch_error: 0}}
"""
# What a 2-node torchrun trial left in stderr.log when torchrun was not on the nodes: dash's
# words for the `exec torchrun` of each node's srun task, then srun's (as issue 24 quotes).
SRUN_TAIL = ("sh: 1: exec: torchrun: not found\\nsh: 1: exec: torchrun: not found\\n"
             "srun: error: node2: task 1: Exited with exit code 127\\n"
             "srun: error: node1: task 0: Exited with exit code 127\\n")


@pytest.mark.parametrize("name,command,cause", [
    ("local", "hpsearch-no-such-launcher train.py",
     "exit code 127: hpsearch-no-such-launcher: not found (it must be on PATH where the "
     f"trial runs: {HINT})"),
    ("nodes", f"\"printf '{SRUN_TAIL}' >&2; exit 127\"",
     "exit code 127: torchrun: not found on node2, node1 (it must be on PATH on every node "
     f"the trial runs on: {HINT})"),
])
def test_a_trial_that_exits_127_names_the_program_not_found(cli, name, command, cause):
    cli.write_spec(LOCAL.format(name=name, command=command))
    out = cli("submit", "spec.yaml", check=1).stdout
    assert f"trial 0 failed: {cause} (launch_error" in out, out
    status = cli("status", name, check=0).stdout
    assert cause in status and "srun: error" not in status, status
    assert cause in cli("events", name, check=0).stdout


def test_the_shells_words_for_a_program_not_found():
    assert missing_program(["bash: line 1: torchrun: command not found"]) == (
        f"torchrun: not found (it must be on PATH where the trial runs: {HINT})")
    assert missing_program(["/var/spool/slurmd/job00042/slurm_script: line 9: mpirun: "
                            "command not found",
                            "srun: error: node3: tasks 0-1: Exited with exit code 127"]) == (
        f"mpirun: not found on node3 (it must be on PATH on every node the trial runs on: "
        f"{HINT})")
    assert missing_program(["env: ‘horovodrun’: No such file or directory"]).startswith(
        "horovodrun: not found (")
    assert missing_program(["sh: 1: ./train.sh: not found"]) == "./train.sh: not found"
    assert missing_program(["python: can't open file '/x/t.py': [Errno 2] No such file or "
                            "directory", "Traceback (most recent call last):"]) is None


SLURM = """
name: ddp
command: "{{python}} train.py --lr {{lr}}"
search:
  strategy: tpe
  trials: 2
  space:
    lr: {{low: 0.1, high: 1.0}}
objective: {{metric: loss}}
executor: {executor}
launcher: {launcher}
container: {container}
"""


def _path_without(tmp_path: Path, *have: str) -> str:
    """A PATH of one folder holding only `have` (empty scripts)."""
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    for program in have:
        (folder / program).write_text("#!/bin/sh\n")
        (folder / program).chmod(0o755)
    return str(folder)


def test_validate_and_plan_warn_about_a_launcher_not_on_path(cli, tmp_path):
    (cli.cwd / "train.py").write_text("")  # else the script missing here is warned of too
    cli.write_spec(SLURM.format(executor="slurm", launcher="torchrun", container="{}"))
    env = {"PATH": _path_without(tmp_path)}
    want = ("hpsearch: warning: spec.yaml:10: launcher: torchrun is not on PATH here; it must "
            "be on PATH on the compute nodes, or every trial fails with exit code 127")
    for command in (["validate", "spec.yaml"], ["plan", "spec.yaml", "--limit", "1"]):
        proc = cli(*command, env=env, check=0)
        assert proc.stderr.startswith(want) and proc.stderr.endswith(f" ({HINT})\n"), \
            proc.stderr
        assert proc.stderr.count("\n") == 1
    assert "torchrun" in proc.stdout  # plan still prints the batch script
    cli.write_spec(SLURM.format(executor="slurm", launcher="torchrun", container="{}"))
    assert cli("validate", "spec.yaml", env={"PATH": _path_without(tmp_path, "torchrun")},
               check=0).stderr == ""


def test_the_warning_names_each_host_program_with_its_line(cli, tmp_path):
    """mpirun and ch-run run on the host; the local executor runs trials here."""
    (cli.cwd / "train.py").write_text("")  # the local executor's script must be there
    cli.write_spec(SLURM.format(executor="local", launcher="{type: mpirun}",
                                container="{runtime: charliecloud, image: /img}"))
    proc = cli("validate", "spec.yaml", env={"PATH": _path_without(tmp_path)}, check=0)
    local = "the local executor runs trials here: each would fail with exit code 127"
    assert proc.stderr.splitlines() == [
        f"hpsearch: warning: spec.yaml:10: launcher: mpirun is not on PATH here; {local} "
        f"({HINT})",
        f"hpsearch: warning: spec.yaml:11: container.runtime: ch-run is not on PATH here; "
        f"{local} ({HINT})"]


def test_torchrun_in_a_container_is_the_images_not_this_machines(cli, tmp_path):
    (cli.cwd / "train.py").write_text("")  # else the script missing here is warned of too
    cli.write_spec(SLURM.format(executor="slurm", launcher="torchrun",
                                container="{runtime: charliecloud, image: /img}"))
    proc = cli("validate", "spec.yaml", env={"PATH": _path_without(tmp_path)}, check=0)
    assert proc.stderr.splitlines() == [
        "hpsearch: warning: spec.yaml:11: container.runtime: ch-run is not on PATH here; it "
        f"must be on PATH on the compute nodes, or every trial fails with exit code 127 "
        f"({HINT})"]


def test_a_launcher_beside_hpsearchs_python_names_that_folder(cli, tmp_path):
    """The usual cause: a virtual environment used without activating it."""
    beside = Path(sys.executable).parent / "torchrun"
    if not beside.is_file():
        pytest.skip(f"no torchrun beside {sys.executable} (torch is not installed)")
    cli.write_spec(SLURM.format(executor="slurm", launcher="torchrun", container="{}"))
    proc = cli("validate", "spec.yaml", env={"PATH": _path_without(tmp_path)}, check=0)
    assert (f"; it is in {beside.parent}, beside hpsearch's Python, which is not on PATH: "
            "activate that environment before submitting (trials and Slurm jobs inherit its "
            "PATH), or set PATH in the spec's env:") in proc.stderr, proc.stderr


def test_a_program_name_with_control_characters_is_not_repeated_into_the_message():
    """A hostile stderr line: terminal escapes in the "program" never reach status."""
    from hpsearch.ingest.not_found import missing_program
    found = missing_program(["sh: 1: exec: \x1b[31mevil: not found"])
    assert found is None or "\x1b" not in found


def test_validate_warns_that_warm_starts_need_pilots_on_slurm(cli, tmp_path):
    """executor.warm with plain Slurm jobs: each segment is a job of its own, and no warm
    server outlives a job, so validate says its trials start cold (pilots are warm)."""
    (cli.cwd / "train.py").write_text("")  # the local executor's script must be there
    env = {"PATH": _path_without(tmp_path, "torchrun")}
    cli.write_spec(SLURM.format(executor="{type: slurm, warm: [json]}", launcher="torchrun",
                                container="{}"))
    proc = cli("validate", "spec.yaml", env=env, check=0)
    assert proc.stderr.startswith("hpsearch: warning: spec.yaml:9: executor.warm: each trial "
                                  "(and each of its segments) runs as a Slurm job of its own")
    assert "Warm starts need executor.pilots" in proc.stderr
    for executor in ("{type: slurm, warm: [json], pilots: {}}", "{type: local, warm: [json]}"):
        cli.write_spec(SLURM.format(executor=executor, launcher="torchrun", container="{}"))
        assert cli("validate", "spec.yaml", env=env, check=0).stderr == ""

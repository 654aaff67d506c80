"""Issue 38, what a new user hit first: a workdir or script typo that passed `validate` and
then failed every trial's launch, and messages that showed Python reprs or `<input>:`.
Through the CLI."""

from __future__ import annotations

from hpsearch.errors import BadInput

SPEC = """\
name: typo
command: "{{python}} {script} --x {{x}}"
{workdir}search: {{strategy: grid, space: {{x: {{choices: [1, 2]}}}}}}
objective: {{metric: loss}}
"""


def _spec(cli, script="train.py", workdir=""):
    (cli.cwd / "train.py").write_text("import sys\nprint('@hpsearch step=0 loss=' + sys.argv[2])\n")
    return cli.write_spec(SPEC.format(script=script, workdir=workdir))


def test_a_workdir_that_does_not_exist_is_refused_before_any_trial(cli):
    spec = _spec(cli, workdir="workdir: projj\n")
    for command in ("validate", "plan", "submit"):
        proc = cli(command, spec, check=2)
        assert f"spec.yaml:3: workdir: {cli.cwd / 'projj'} is not a folder here" in \
            proc.stderr, (command, proc.stderr)
        assert "PosixPath" not in proc.stderr and "<input>" not in proc.stderr
    assert not (cli.runs / "typo").exists()  # nothing made, no trial launched


def test_a_script_name_typo_is_refused_with_its_line(cli):
    spec = _spec(cli, script="trian.py")
    proc = cli("submit", spec, check=2)
    assert "spec.yaml:2: command: trian.py is not a file in" in proc.stderr, proc.stderr
    assert not (cli.runs / "typo").exists()
    cli("submit", _spec(cli), check=0)  # the right name runs


def test_messages_without_a_file_have_no_input_placeholder():
    assert str(BadInput("runs dir /x is not a folder")) == "runs dir /x is not a folder"
    assert str(BadInput("bad", "s.yaml", 3, "search.trials")) == "s.yaml:3: search.trials: bad"
    assert str(BadInput("bad", key="--logdir")) == "--logdir: bad"


def test_a_program_path_that_is_missing_or_not_executable_is_refused_with_its_line(cli):
    """A command that starts with a path of its own (`./train.sh`) runs from the workdir on
    the local executor: a missing or non-executable one failed every launch with exit 127 or
    126; now exit 2 at the command's line, before anything is made."""
    script = cli.cwd / "train.sh"
    script.write_text("#!/bin/sh\necho \"@hpsearch step=0 loss=$2\"\n")
    text = "name: prog\ncommand: {cmd} --x {{x}}\n" \
           "search: {{strategy: grid, space: {{x: {{choices: [1, 2]}}}}}}\n" \
           "objective: {{metric: loss}}\n"
    typo = cli.write_spec(text.format(cmd="./trian.sh"), "typo.yaml")
    proc = cli("validate", typo, check=2)
    assert "typo.yaml:2: command: ./trian.sh is not a file in" in proc.stderr, proc.stderr
    plain = cli.write_spec(text.format(cmd="./train.sh"), "plain.yaml")
    proc = cli("submit", plain, check=2)
    assert "plain.yaml:2: command: ./train.sh is not executable in" in proc.stderr
    assert "chmod +x" in proc.stderr and not (cli.runs / "prog").exists()
    script.chmod(0o755)
    cli("submit", plain, check=0)
    cli("validate", cli.write_spec(text.format(cmd="echo"), "bare.yaml"), check=0)  # on PATH


def test_on_slurm_a_script_missing_here_is_a_warning_with_its_line(cli):
    """The compute nodes may see another filesystem than the login node: on Slurm the
    script typo is a warning from validate and submit's checks, not an error (the walkthrough
    of issue 38 saw `{python} trian.py` pass validate silently and burn every trial)."""
    spec = cli.write_spec(SPEC.format(script="trian.py", workdir="") +
                          "executor: {type: slurm}\n", "slurm.yaml")
    proc = cli("validate", spec, check=0, env={"SLURM_CONF": "/nonexistent"})
    assert "hpsearch: warning: " in proc.stderr and "slurm.yaml:2: command: trian.py is not " \
        "a file in" in proc.stderr and "(on this machine;" in proc.stderr, proc.stderr

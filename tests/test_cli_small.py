"""Small things users reach for (issue 15, item 9): did-you-mean for experiment names, a spec
path where a name is expected, exit 2 for a missing trial, quiet `watch --once | head`,
parameters in spec order, YAML-like values in `validate`/`plan`."""

from __future__ import annotations

import subprocess
import sys

import pytest

SPEC = """
name: tidy
command: 'true {alpha} {flag} {opt}; echo "@hpsearch step=0 loss={zeta}"'
search:
  strategy: grid
  space:
    zeta: {choices: [1, 2]}
    alpha: {choices: [0.5]}
    flag: {value: true}
    opt: {choices: ["yes", null]}
objective: {metric: loss}
executor: {type: local}
"""


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    from tests.conftest import Cli
    cli = Cli(tmp_path_factory.mktemp("small"))
    spec = cli.write_spec(SPEC)
    cli("submit", spec, "--no-tui", check=0)
    return cli, spec


def test_a_mistyped_name_gets_did_you_mean(ran):
    cli, _ = ran
    for command in (("status", "tidyy"), ("resume", "tdy"), ("best", "tidy2")):
        proc = cli(*command, check=2)
        assert "no experiment" in proc.stderr and "did you mean 'tidy'?" in proc.stderr


def test_a_spec_path_stands_for_its_experiment(ran):
    cli, spec = ran
    assert "experiment tidy: completed" in cli("status", spec, check=0).stdout
    assert "1. trial 0" in cli("best", spec, check=0).stdout


def test_checkpoints_of_a_missing_trial_is_exit_2(ran):
    cli, _ = ran
    proc = cli("checkpoints", "tidy", "--trial", "9", check=2)
    assert "experiment tidy has no trial 9 (trials 0 to 3)" in proc.stderr


def test_params_print_in_spec_order_with_yaml_values(ran):
    cli, spec = ran
    status = cli("status", "tidy", check=0).stdout
    assert "zeta=1 alpha=0.5 flag=true opt=yes" in status, status
    best = cli("best", "tidy", check=0).stdout
    assert "params: zeta=1 alpha=0.5 flag=true opt=yes" in best, best
    shown = cli("validate", spec, check=0).stdout
    assert "flag: fixed true" in shown and "opt: one of ['yes', null]" in shown, shown


def test_watch_once_into_head_ends_quietly(ran):
    cli, _ = ran
    proc = subprocess.run(f"{sys.executable} -m hpsearch watch tidy --once | head -1",
                          shell=True, cwd=cli.cwd, env=cli.env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith("tidy")
    assert proc.stderr == "", proc.stderr


def test_status_of_many_trials_lists_the_last_and_says_how_to_see_all(ran, monkeypatch,
                                                                      capsys):
    """Past LISTED trials, status lists those in flight and the last LISTED (a listing of
    100,000 took seconds) and names --all, which lists every one."""
    import argparse

    from hpsearch.cli import inspect_cmds
    cli, _ = ran
    monkeypatch.setattr(inspect_cmds, "LISTED", 1)

    def listed(show_all: bool) -> tuple[list[str], str]:
        inspect_cmds.status(argparse.Namespace(name="tidy", runs_dir=cli.runs, all=show_all))
        out = capsys.readouterr().out
        return [ln.split()[0] for ln in out.splitlines() if " completed " in ln], out

    ids, out = listed(False)
    assert ids == ["3"] and "3 earlier trials not listed: `hpsearch status tidy --all`" in out
    ids, out = listed(True)
    assert ids == ["0", "1", "2", "3"] and "not listed" not in out


def test_best_reads_the_rows_of_the_winners_only(ran, monkeypatch, capsys):
    import argparse

    from hpsearch.cli import inspect_cmds
    from hpsearch.store.reader import Reader
    cli, _ = ran

    def every(*args, **kwargs):
        raise AssertionError("best read every trial's row")

    monkeypatch.setattr(Reader, "trials", every)
    assert inspect_cmds.best(argparse.Namespace(name="tidy", runs_dir=cli.runs, k=1,
                                                json=False)) == 0
    assert capsys.readouterr().out.startswith("1. trial 0: loss=1")

"""`submit --wait` and `--best-out`, the two flags pipelines rely on."""

from __future__ import annotations

import json
import os
import stat

import pytest

from tests.helpers import AWK_QUAD, quad

SPEC = """
name: {name}
command: |-
  {command}
search: {{strategy: random, trials: 3, parallel: 2, seed: 5,
         space: {{x: {{low: -2.0, high: 2.0}}, y: {{low: -3, high: 3}}}}}}
objective: {{metric: loss}}
"""
FAILING = 'echo "cannot read data for {x} {y}" >&2; exit 3'


def _spec(cli, name: str, command: str = AWK_QUAD):
    return cli.write_spec(SPEC.format(name=name, command=command), f"{name}.yaml")


def test_best_out_holds_the_best_trial_of_a_successful_search(cli):
    out = cli.cwd / "results" / "best.json"
    cli("submit", _spec(cli, "ok"), "--best-out", out, check=0)
    best = json.loads(out.read_text())
    (listed,) = json.loads(cli("best", "ok", "--json", check=0).stdout)
    assert best["experiment"] == "ok" and best["objective"] == [
        {"metric": "loss", "direction": "minimize"}]
    assert {k: best[k] for k in listed} == listed
    assert best["values"]["loss"] == quad(best["params"]["x"], best["params"]["y"])
    assert [p.name for p in out.parent.iterdir()] == ["best.json"]  # no temporary left


def test_failed_search_writes_no_best_file_and_says_why(cli):
    out = cli.cwd / "best.json"
    out.write_text("from an earlier run\n")
    proc = cli("submit", _spec(cli, "broken", FAILING), "--best-out", out, check=1)
    assert not out.exists()
    assert f"not writing {out}" in proc.stderr
    assert "trial 0 failed: exit code 3" in proc.stderr
    assert "cannot read data for" in proc.stderr  # the trial's own stderr


@pytest.mark.slow  # 5.0 s in the quick tier (2026-11-29): over its 5 s rule
def test_detach_wait_blocks_until_the_end_and_returns_its_status(cli):
    out = cli.cwd / "best.json"
    proc = cli("submit", _spec(cli, "bg"), "--detach", "--wait", "--best-out", out, check=0)
    assert "driver running in the background" in proc.stdout
    assert "experiment bg: completed" in proc.stdout
    assert json.loads(out.read_text())["experiment"] == "bg"
    failed = cli("submit", _spec(cli, "bgfail", FAILING), "--detach", "--wait", check=1)
    assert "experiment bgfail: failed" in failed.stdout and "3 failed" in failed.stdout


def test_best_out_without_an_end_to_wait_for_is_refused(cli):
    proc = cli("submit", _spec(cli, "nowait"), "--detach", "--best-out", "b.json", check=2)
    assert "--best-out needs the end of the search" in proc.stderr
    assert not cli.runs.exists()


def test_detach_under_umask_002_makes_a_private_runs_dir_and_runs(cli):
    """`submit --detach` makes the runs dir and the experiment folder itself, before the
    driver starts: under a project space's umask 002 they must come out owner-only, not
    group-writable and then refused by the driver's own check (exit 2, as before)."""
    old = os.umask(0o002)
    try:
        proc = cli("submit", _spec(cli, "bg002"), "--detach", "--wait", check=0)
    finally:
        os.umask(old)
    assert "experiment bg002: completed" in proc.stdout
    assert stat.S_IMODE(cli.runs.stat().st_mode) == 0o700
    assert stat.S_IMODE((cli.runs / "bg002").stat().st_mode) == 0o700

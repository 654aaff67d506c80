"""The CLI surface: help with examples, exit codes, errors for missing experiments."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from hpsearch import procs
from tests.helpers import read_store


def _commands() -> list[str]:
    """Every command the parser has (so a new one cannot go undocumented)."""
    import argparse

    from hpsearch.cli.main import build_parser
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sorted(sub.choices)


COMMANDS = _commands()


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help_with_examples_and_exit_codes_and_a_docs_section(cli, command):
    out = cli(command, "--help", check=0).stdout
    assert "examples:\n  hpsearch " + command in out
    assert "exit codes: 0 ok, 1 trials failed or search incomplete, 2 bad input" in out
    from tests.conftest import ROOT
    assert f"\n## {command}\n" in (ROOT / "docs" / "cli.md").read_text()


def test_bad_flags_and_unknown_commands_exit_2(cli):
    assert cli("frobnicate").returncode == 2
    assert cli("best").returncode == 2  # missing NAME
    assert cli("export", "x", "--format", "xml").returncode == 2


@pytest.mark.parametrize("command", ["status", "best", "export", "resume", "cancel"])
def test_missing_experiment_is_a_clear_error(cli, command):
    proc = cli(command, "nope", check=2)
    assert "no experiment 'nope'" in proc.stderr
    assert not cli.runs.exists()


@pytest.mark.parametrize("name", ["../escape", "a/b", ".hidden", ""])
def test_names_cannot_escape_the_runs_dir(cli, name):
    proc = cli("status", name, check=2)
    assert "bad experiment name" in proc.stderr


@pytest.mark.slow  # 3.7 s in the quick tier (2026-11-30): over its 3 s rule
def test_cancel_with_no_driver_stops_orphaned_trials(cli):
    spec = cli.write_spec("""
        name: orphans
        command: 'sleep 60; echo "@hpsearch step=0 loss={x}"'
        search: {strategy: random, trials: 4, parallel: 2, space: {x: {low: 0.0, high: 1.0}}}
        objective: {metric: loss}
        """)
    crashed = cli("submit", spec, env={"HPSEARCH_FAULT": "after_running:2"})
    assert crashed.returncode == -signal.SIGKILL
    _, stored = read_store(cli.runs, "orphans")
    rows = [t for t in stored if t.pid is not None]  # a third may wait, asked ahead
    assert len(rows) == 2 and all(procs.alive(t.pid, t.pid_start) for t in rows)
    out = cli("cancel", "orphans", check=0).stdout
    assert "no driver was running; stopped 2 trial process group(s) or job(s)" in out
    deadline = time.monotonic() + 5
    while any(procs.group_alive(t.pid) for t in rows) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(procs.group_alive(t.pid) for t in rows)
    exp, after = read_store(cli.runs, "orphans")
    assert exp.status == "cancelled" and [t.state for t in after] == ["cancelled"] * len(stored)


@pytest.mark.slow  # over 5 s in the quick tier on 2026-11-28 (docs/testing.md#tiers)
def test_cancel_with_no_driver_gives_orphans_the_experiments_grace(cli):
    """SIGKILL comes executor.grace seconds after SIGTERM (here 1 s, and 3 s), not after a
    fixed 10 s: a trial that ignores SIGTERM is killed after 1 s; one whose handler takes
    2 s to save is given them."""
    for name, grace, command in (
            ("stubborn", 1, 'trap "" TERM; sleep 60'),
            ("saver", 3, "trap 'sleep 2; touch $HPSEARCH_TRIAL_DIR/saved; exit 0' TERM; "
                         "sleep 60 & wait")):
        line = json.dumps(f'{command}; echo "@hpsearch step=0 loss={{x}}"')  # YAML too
        spec = cli.write_spec(f"""
            name: {name}
            command: {line}
            search: {{strategy: random, trials: 1, parallel: 1,
                      space: {{x: {{low: 0.0, high: 1.0}}}}}}
            objective: {{metric: loss}}
            executor: {{type: local, grace: {grace}}}
            """, f"{name}.yaml")
        crashed = cli("submit", spec, env={"HPSEARCH_FAULT": "after_running:1"})
        assert crashed.returncode == -signal.SIGKILL
        [row] = [t for t in read_store(cli.runs, name)[1] if t.pid is not None]
        began = time.monotonic()
        out = cli("cancel", name, check=0).stdout
        took = time.monotonic() - began
        assert "no driver was running; stopped 1 trial process group(s)" in out
        assert not procs.group_running(row.pid)  # (zombies, until PID 1 reaps them)
        if name == "stubborn":
            assert 1.0 <= took < 6, took  # killed after its 1 s grace (was: 10 s)
        else:
            assert (Path(row.trial_dir) / "saved").exists()  # its handler ran to its end
            assert 2.0 <= took < 8, took


def test_output_into_a_closed_pipe_ends_quietly_with_exit_0(cli):
    """`hpsearch status NAME | head -1`: once the reader is gone, no 'Broken pipe' error."""
    import os
    import subprocess
    import sys
    spec = cli.write_spec("""
        name: piped
        command: "echo @hpsearch step=0 loss={x}"
        search: {strategy: grid, space: {x: {choices: [1, 2, 3]}}}
        objective: {metric: loss}
        """)
    cli("submit", spec, check=0)
    for command in (["status", "piped"], ["export", "piped"], ["status"]):
        read, write = os.pipe()
        os.close(read)  # the reader left before anything was written
        proc = subprocess.run([sys.executable, "-m", "hpsearch", *command], cwd=cli.cwd,
                              env=cli.env, stdout=write, stderr=subprocess.PIPE, text=True,
                              timeout=60)
        os.close(write)
        assert (proc.returncode, proc.stderr) == (0, ""), (command, proc.stderr)

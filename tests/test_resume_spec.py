"""`hpsearch resume NAME --spec FIXED.yaml` (issue 38 item 2): a search stopped by
search.max_failures for a typo in its command goes on with the fixed spec, where `resume`
alone fails the same way again and a new submit of the fixed spec is refused. What runs a
trial may change only while no trial has a result; what decides the search never."""

from __future__ import annotations

import pytest

from hpsearch.store.reader import Reader
from hpsearch.store.runs import STORE_FILE
from tests.helpers import event_kinds, read_store

SPEC = """
name: fixme
command: {command} --x {{x}}
search:
  strategy: grid
  parallel: 2
  max_failures: {{first: 2}}
  space:
    x: {{choices: [1, 2, 3, 4]}}
objective: {{metric: loss}}
executor: {{type: local}}
resources: {{time: "{time}"}}
"""
GOOD = """python3 -c 'import sys; print("@hpsearch step=0 loss=" + sys.argv[2])'"""


def _spec(cli, name: str, command: str, time: str = "00:10:00", extra: str = ""):
    return cli.write_spec(SPEC.format(command=command, time=time) + extra, name)


def _stored_command(cli) -> str:
    reader = Reader(cli.runs / "fixme" / STORE_FILE)
    try:
        return reader.experiment().spec_yaml.splitlines()[1]
    finally:
        reader.close()


@pytest.mark.slow  # 4.2 s in the quick tier (2026-11-30): over its 3 s rule
def test_a_search_stopped_for_a_typo_goes_on_with_the_fixed_spec(cli):
    broken = _spec(cli, "spec.yaml", "hpsearch-no-such-program")
    out = cli("submit", broken, "--no-tui", check=1)
    assert "hpsearch resume fixme (add --spec FILE if the fix is in the spec)" in out.stderr
    fixed = _spec(cli, "fixed.yaml", GOOD)
    refused = cli("submit", fixed, "--resume", "--no-tui", check=2)
    assert f"`hpsearch resume fixme --spec {fixed}`" in refused.stderr, refused.stderr
    refused = cli("submit", fixed, "--no-tui", check=2)  # without --resume: the same advice
    assert f"`hpsearch resume fixme --spec {fixed}`" in refused.stderr, refused.stderr
    cli("resume", "fixme", "--no-tui", check=1)  # the stored spec: the same typo again

    assert any(t.state == "failed" for t in read_store(cli.runs, "fixme")[1])  # retries spent

    cli("resume", "fixme", "--spec", fixed, "--no-tui", check=0)
    exp, trials = read_store(cli.runs, "fixme")
    assert exp.status == "completed"  # the failed ones never ran the command: run again
    assert [t.state for t in trials] == ["completed"] * 4, [t.state for t in trials]
    assert "spec_replaced" in event_kinds(cli.runs, "fixme")
    assert "python3 -c" in _stored_command(cli)  # a later plain resume runs the fixed one
    events = cli("events", "fixme", check=0).stdout
    assert "spec replaced from" in events and "command changed" in events, events


@pytest.mark.slow  # 4.2 s in the quick tier (2026-11-30): over its 3 s rule
def test_with_results_only_what_cannot_change_them_may_change(cli):
    spec = _spec(cli, "spec.yaml", GOOD)
    cli("submit", spec, "--no-tui", check=0)
    other = _spec(cli, "other.yaml", GOOD.replace("loss=", "loss=1"))
    proc = cli("resume", "fixme", "--spec", other, "--no-tui", check=2)
    assert "changes command, which the experiment's results depend on, and it holds " \
           "results (4 completed)" in proc.stderr, proc.stderr
    assert "python3 -c" in _stored_command(cli) and "loss=1" not in _stored_command(cli)

    longer = _spec(cli, "longer.yaml", GOOD, time="01:00:00")
    cli("resume", "fixme", "--spec", longer, "--no-tui", check=0)
    messages = cli("events", "fixme", check=0).stdout
    assert "resources changed" in messages, messages

    space = cli.write_spec((cli.cwd / "longer.yaml").read_text().replace("[1, 2, 3, 4]",
                                                                        "[1, 2, 3, 5]"),
                           "space.yaml")
    proc = cli("resume", "fixme", "--spec", space, "--no-tui", check=2)
    assert "changes search of experiment 'fixme': that is another search" in proc.stderr

    renamed = cli.write_spec((cli.cwd / "longer.yaml").read_text().replace(
        "name: fixme", "name: other"), "renamed.yaml")
    proc = cli("resume", "fixme", "--spec", renamed, "--no-tui", check=2)
    assert "renamed.yaml" in proc.stderr and "names experiment 'other'" in proc.stderr

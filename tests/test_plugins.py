"""A plugin package adds an executor and a strategy with no edit to hpsearch (issue 39): the
example plugin (examples/plugin) is installed with pip as a user would, and its `nice`
executor, with its own setting, and its `lhs` strategy are then checked by `validate` and run
a search."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES

SPEC = """
name: plugged
command: >-
  {{python}} -c "import os; print('@hpsearch step=0 nice=%d' % os.nice(0));
  print('@hpsearch result loss={{x}}')"
search:
  strategy: lhs
  strata: 6
  trials: 6
  parallel: 2
  seed: 5
  space:
    x: {{type: float, low: 0, high: 1}}
objective: {{metric: loss}}
executor: {{type: nice, niceness: {niceness}}}
"""


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory) -> Path:
    """The example plugin, installed by pip into a folder of its own (on PYTHONPATH): built
    from a copy, so nothing is written into the repository."""
    root = tmp_path_factory.mktemp("plugin")
    shutil.copytree(EXAMPLES / "plugin", root / "src")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                    "--no-build-isolation", "--no-index", "--target", str(root / "site"),
                    str(root / "src")], check=True, capture_output=True, text=True)
    return root / "site"


@pytest.fixture
def plugged(cli, plugin_path):
    cli.env["PYTHONPATH"] = str(plugin_path)
    return cli


def test_without_the_plugin_its_names_are_unknown(cli):
    cli.write_spec(SPEC.format(niceness=15))
    proc = cli("validate", "spec.yaml", check=2)
    assert "unknown strategy 'lhs'" in proc.stderr


def test_the_plugin_s_settings_are_checked_at_their_line(plugged):
    plugged.write_spec(SPEC.format(niceness=15))
    plugged("validate", "spec.yaml", check=0)
    plugged.write_spec(SPEC.format(niceness=25))
    proc = plugged("validate", "spec.yaml", check=2)
    assert "spec.yaml:14" in proc.stderr, proc.stderr
    assert "executor.niceness: expected an integer from 0 to 19; got 25" in proc.stderr
    plugged.write_spec(SPEC.format(niceness=15).replace("strategy: lhs", "strategy: tpe"))
    proc = plugged("validate", "spec.yaml", check=2)
    assert "'strata' is a setting of strategy lhs, not of tpe" in proc.stderr, proc.stderr
    plugged.write_spec(SPEC.format(niceness=15).replace("type: nice", "type: local"))
    proc = plugged("validate", "spec.yaml", check=2)
    assert "'niceness' is a setting of executor nice, not of local" in proc.stderr


def test_a_search_runs_on_the_plugin_s_executor_and_strategy(plugged):
    """Every trial ran at the niceness the spec asked for, and the six points of the Latin
    hypercube fell one in each sixth of x's range."""
    plugged.write_spec(SPEC.format(niceness=13))
    plugged("submit", "spec.yaml", timeout=180, check=0)
    db = sqlite3.connect(plugged.runs / "plugged" / "store.sqlite")
    rows = db.execute("SELECT t.state, t.params, m.name, m.value FROM trials t "
                      "JOIN metrics m ON m.trial = t.id WHERE m.name = 'nice'").fetchall()
    assert len(rows) == 6 and {r[0] for r in rows} == {"completed"}
    assert {r[3] for r in rows} == {13.0}
    import json
    xs = sorted(json.loads(r[1])["x"] for r in rows)
    assert [int(x * 6) for x in xs] == [0, 1, 2, 3, 4, 5], xs

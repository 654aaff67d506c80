"""The spec of `executor.pilots`: defaults, each key, and every bad value or combination
refused by the real CLI with one message naming file, line and key path, exit code 2, and
nothing written. In each bad spec the line the message must name is marked with `# <-`.
"""

from __future__ import annotations

import os
import textwrap

import pytest

from hpsearch.preflight import parse_spec
from hpsearch.spec.executor import PILOT_KEYS
from hpsearch.spec.model import Pilots
from tests.conftest import ROOT
from tests.helpers import AWK_QUAD, quad, read_store

MARK = "# <-"
HEAD = """\
name: demo
command: "run {lr}"
search: {strategy: tpe, trials: 3, space: {lr: {low: 0.1, high: 1.0}}}
objective: {metric: loss}
"""
KEYS_LIST = "nodes, time, max, slots_per_node, idle_timeout, grace, heartbeat, agents"
TIME_EXPECTED = "expected a Slurm time limit such as 90 (minutes), 01:30:00 or 2-00:00:00"
DURATION_EXPECTED = "expected a positive duration such as 90, '90s', '10m', '2h' or '01:30:00'"


def _pilots(tmp_path, tail: str):
    """The parsed executor.pilots of the spec HEAD + tail."""
    text = HEAD + textwrap.dedent(tail).lstrip("\n")
    return parse_spec(text, "spec.yaml", tmp_path).executor.pilots


# -- good specs ------------------------------------------------------------------------------

def test_without_pilots_nothing_changes(tmp_path):
    assert _pilots(tmp_path, "executor: slurm\n") is None
    assert _pilots(tmp_path, "executor: {type: slurm, pilots: false}\n") is None
    assert _pilots(tmp_path, "executor: {type: slurm, pilots: null}\n") is None
    assert _pilots(tmp_path, "") is None


@pytest.mark.parametrize("written", ["true", "{}"])
def test_pilots_true_or_empty_take_every_default(tmp_path, written):
    pilots = _pilots(tmp_path, f"executor: {{type: slurm, pilots: {written}}}\n")
    assert pilots == Pilots(nodes=1, time="01:00:00", max=2, slots_per_node=1,
                            idle_timeout=60.0, grace=300.0, heartbeat=2.0)


def test_every_key_is_read(tmp_path):
    pilots = _pilots(tmp_path, """
        executor:
          type: slurm
          pilots:
            nodes: 4
            time: "2-00:00:00"
            max: 8
            slots_per_node: 2
            idle_timeout: 5m
            grace: "00:10:00"
            heartbeat: 1.5
            agents: false
        """)
    assert pilots == Pilots(nodes=4, time="2-00:00:00", max=8, slots_per_node=2,
                            idle_timeout=300.0, grace=600.0, heartbeat=1.5, agents=False)


def test_keys_not_given_keep_their_default(tmp_path):
    pilots = _pilots(tmp_path, "executor: {type: slurm, pilots: {nodes: 4, grace: 1h}}\n")
    assert pilots == Pilots(nodes=4, grace=3600.0)


@pytest.mark.parametrize("written, kept", [
    ("90", "90"), ("'1:30:00'", "1:30:00"), ("1:30:00", "1:30:00"), ("45:00", "45:00"),
    ("2-12", "2-12"), ("'1-00:00:00'", "1-00:00:00")])
def test_pilot_time_is_any_slurm_time_limit(tmp_path, written, kept):
    """As sbatch --time takes it: a bare number is minutes; kept as written."""
    pilots = _pilots(tmp_path, f"executor: {{type: slurm, pilots: {{time: {written}}}}}\n")
    assert pilots.time == kept


def test_a_pilot_just_large_enough_for_a_trial_is_accepted(tmp_path):
    """As many nodes as a trial, and its time limit plus the 30 s a pilot keeps."""
    pilots = _pilots(tmp_path, """
        resources: {nodes: 4, time: "02:00:00"}
        executor: {type: slurm, pilots: {nodes: 4, time: "02:00:30"}}
        """)
    assert (pilots.nodes, pilots.time) == (4, "02:00:30")


def test_validate_accepts_a_pilot_spec(cli):
    cli.write_spec(HEAD + "resources: {nodes: 2, time: 30}\n"
                          "executor: {type: slurm, pilots: {nodes: 4, time: '01:00:00'}}\n")
    proc = cli("validate", "spec.yaml", check=0)
    assert proc.stdout.startswith("spec.yaml: ok\n")
    assert os.listdir(cli.cwd) == ["spec.yaml"]


def test_submit_executor_local_runs_a_pilot_spec_locally(cli):
    """Examples and tests run Slurm specs on the local executor: pilots are ignored there."""
    command = AWK_QUAD.replace("\\", "\\\\").replace('"', '\\"')
    cli.write_spec(f"""
        name: pilots-local
        command: "{command}"
        search:
          strategy: random
          trials: 3
          parallel: 2
          seed: 1
          space: {{x: {{low: -3.0, high: 3.0}}, y: {{low: -4, high: 0}}}}
        objective: {{metric: loss}}
        executor: {{type: slurm, pilots: {{nodes: 2, max: 1}}}}
        """)
    cli("submit", "spec.yaml", "--executor", "local", check=0)
    exp, trials = read_store(cli.runs, "pilots-local")
    assert exp.status == "completed"
    assert [t.state for t in trials] == ["completed"] * 3
    for t in trials:
        assert t.objective_values[0] == pytest.approx(quad(t.params["x"], t.params["y"]))


# -- bad specs -------------------------------------------------------------------------------

# (id, the spec after HEAD, key path, the whole message after it)
BAD = [
    ("on-local-written", """
        executor:
          type: local
          pilots: {nodes: 2}   # <-
        """, "executor.pilots", "pilots run on Slurm: set executor.type: slurm (it is local)"),
    ("without-type", """
        executor:
          pilots: true   # <-
        """, "executor.pilots", "pilots run on Slurm: set executor.type: slurm (without it, "
                                "it is local)"),
    ("a-number", """
        executor:
          type: slurm
          pilots: 3   # <-
        """, "executor.pilots", f"expected true, false or a mapping with keys {KEYS_LIST}; "
                                "got an integer 3"),
    ("a-string", """
        executor:
          type: slurm
          pilots: "yes please"   # <-
        """, "executor.pilots", f"expected true, false or a mapping with keys {KEYS_LIST}; "
                                "got a string 'yes please'"),
    ("unknown-key", """
        executor:
          type: slurm
          pilots:
            slot_per_node: 2   # <-
        """, "executor.pilots.slot_per_node", "unknown key 'slot_per_node'; did you mean "
                                              "'slots_per_node'?"),
    ("nodes-zero", """
        executor:
          type: slurm
          pilots:
            nodes: 0   # <-
        """, "executor.pilots.nodes", "expected an integer >= 1; got 0"),
    ("nodes-a-string", """
        executor:
          type: slurm
          pilots:
            nodes: four   # <-
        """, "executor.pilots.nodes", "expected an integer; got a string 'four'"),
    ("max-zero", """
        executor:
          type: slurm
          pilots:
            max: 0   # <-
        """, "executor.pilots.max", "expected an integer >= 1; got 0"),
    ("max-a-boolean", """
        executor:
          type: slurm
          pilots:
            max: true   # <-
        """, "executor.pilots.max", "expected an integer; got a boolean True"),
    ("slots-a-float", """
        executor:
          type: slurm
          pilots:
            slots_per_node: 1.5   # <-
        """, "executor.pilots.slots_per_node", "expected an integer; got a number 1.5"),
    ("slots-too-large", """
        executor:
          type: slurm
          pilots:
            slots_per_node: 99999999999   # <-
        """, "executor.pilots.slots_per_node", "expected an integer <= 2147483647; "
                                              "got 99999999999"),
    ("agents-a-string", """
        executor:
          type: slurm
          pilots:
            agents: "no"   # <-
        """, "executor.pilots.agents", "expected true or false; got a string 'no'"),
    ("time-unlimited", """
        executor:
          type: slurm
          pilots:
            time: UNLIMITED   # <-
        """, "executor.pilots.time", f"{TIME_EXPECTED}; got a string 'UNLIMITED'"),
    ("time-zero", """
        executor:
          type: slurm
          pilots:
            time: 0   # <-
        """, "executor.pilots.time", f"{TIME_EXPECTED}; got an integer 0"),
    ("time-negative", """
        executor:
          type: slurm
          pilots:
            time: -30   # <-
        """, "executor.pilots.time", f"{TIME_EXPECTED}; got an integer -30"),
    ("time-with-unit", """
        executor:
          type: slurm
          pilots:
            time: 2h   # <-
        """, "executor.pilots.time", f"{TIME_EXPECTED}; got a string '2h'"),
    ("time-a-float", """
        executor:
          type: slurm
          pilots:
            time: 1.5   # <-
        """, "executor.pilots.time", f"{TIME_EXPECTED}; got a number 1.5"),
    ("time-a-list", """
        executor:
          type: slurm
          pilots:
            time: [1, 2]   # <-
        """, "executor.pilots.time", f"{TIME_EXPECTED}; got a list [1, 2]"),
    ("time-overflows", f"""
        executor:
          type: slurm
          pilots:
            time: "{'9' * 400}"   # <-
        """, "executor.pilots.time", f"{TIME_EXPECTED}; got a string '{'9' * 79}... "
                                "(402 characters)"),
    ("idle-timeout-words", """
        executor:
          type: slurm
          pilots:
            idle_timeout: 5 minutes   # <-
        """, "executor.pilots.idle_timeout", f"{DURATION_EXPECTED}; got '5 minutes'"),
    ("grace-negative", """
        executor:
          type: slurm
          pilots:
            grace: -1   # <-
        """, "executor.pilots.grace", f"{DURATION_EXPECTED}; got -1"),
    ("heartbeat-nan", """
        executor:
          type: slurm
          pilots:
            heartbeat: .nan   # <-
        """, "executor.pilots.heartbeat", f"{DURATION_EXPECTED}; got nan"),
    ("heartbeat-not-below-grace", """
        executor:
          type: slurm
          pilots:
            grace: 10
            heartbeat: 10s   # <-
        """, "executor.pilots.heartbeat", "expected a heartbeat shorter than grace (10 s); "
                                          "got 10 s"),
    ("heartbeat-not-below-idle-timeout", """
        executor:
          type: slurm
          pilots:
            idle_timeout: 30s
            heartbeat: 1m   # <-
        """, "executor.pilots.heartbeat", "expected a heartbeat shorter than idle_timeout "
                                          "(30 s); got 60 s"),
    ("heartbeat-above-default-idle-timeout", """
        executor:
          type: slurm
          pilots:
            heartbeat: 90   # <-
        """, "executor.pilots.heartbeat", "expected a heartbeat shorter than idle_timeout "
                                          "(60 s); got 90 s"),
    ("grace-not-above-default-heartbeat", """
        executor:
          type: slurm
          pilots:
            grace: 2s   # <-
        """, "executor.pilots.grace", "expected grace longer than the heartbeat (2 s, its "
                                      "default); got 2 s"),
    ("idle-timeout-not-above-default-heartbeat", """
        executor:
          type: slurm
          pilots:
            idle_timeout: 1   # <-
        """, "executor.pilots.idle_timeout", "expected idle_timeout longer than the heartbeat "
                                             "(2 s, its default); got 1 s"),
    ("nodes-below-resources", """
        resources: {nodes: 4}
        executor:
          type: slurm
          pilots:
            nodes: 2   # <-
        """, "executor.pilots.nodes", "a pilot of 2 node(s) cannot hold a trial of 4 nodes "
                                      "(resources.nodes); expected nodes >= 4"),
    ("default-nodes-below-resources", """
        resources: {nodes: 2}
        executor:
          type: slurm
          pilots: true   # <-
        """, "executor.pilots.nodes", "a pilot of 1 node(s) cannot hold a trial of 2 nodes "
                                      "(resources.nodes); expected nodes >= 2; nodes is not "
                                      "given, and its default is 1"),
    ("time-below-resources", """
        resources: {time: "02:00:00"}
        executor:
          type: slurm
          pilots:
            time: "02:00:29"   # <-
        """, "executor.pilots.time", "a pilot of time 02:00:29 could never start a trial of "
                                     "time 02:00:00 (resources.time); expected a time limit "
                                     "of at least 02:00:00 plus 30 s (a pilot keeps them to "
                                     "start and stop)"),
    ("default-time-below-resources", """
        resources: {time: 1-00:00:00}
        executor:
          type: slurm
          pilots:   # <-
            nodes: 1
        """, "executor.pilots.time", "a pilot of time 01:00:00 could never start a trial of "
                                     "time 1-00:00:00 (resources.time); expected a time limit "
                                     "of at least 1-00:00:00 plus 30 s (a pilot keeps them to "
                                     "start and stop); time is not given, and its "
                                     "default is 01:00:00"),
]
CASES = {case[0]: case[1:] for case in BAD}


def _write(cli, case: str) -> int:
    """Write the case's spec as spec.yaml; return the line its message must name."""
    path = cli.write_spec(HEAD + textwrap.dedent(CASES[case][0]).lstrip("\n"))
    marked = [n for n, line in enumerate(path.read_text().splitlines(), 1) if MARK in line]
    assert len(marked) == 1
    return marked[0]


def _assert_refused(proc, case: str, line: int) -> None:
    """One line on stderr, naming file, line and key path, then exactly the case's message."""
    _, key, message = CASES[case]
    assert (proc.returncode, proc.stdout) == (2, ""), proc.stderr
    assert proc.stderr == f"hpsearch: error: spec.yaml:{line}: {key}: {message}\n"


@pytest.mark.parametrize("case", list(CASES))
def test_bad_pilots_get_one_clear_message(cli, case):
    line = _write(cli, case)
    _assert_refused(cli("validate", "spec.yaml"), case, line)
    assert os.listdir(cli.cwd) == ["spec.yaml"]


@pytest.mark.parametrize("case", ["on-local-written", "heartbeat-not-below-grace",
                                  "nodes-below-resources", "time-below-resources"])
@pytest.mark.parametrize("executor", [[], ["--executor", "local"], ["--executor", "slurm"]])
def test_submit_of_bad_pilots_writes_nothing(cli, case, executor):
    """`submit --executor` changes which executor runs the spec, not what the spec says: the
    YAML's own mistakes are refused whatever executor is asked for."""
    line = _write(cli, case)
    _assert_refused(cli("submit", "spec.yaml", *executor), case, line)
    assert not cli.runs.exists()
    assert os.listdir(cli.cwd) == ["spec.yaml"]


def test_docs_describe_every_pilot_key_and_their_example_validates(tmp_path):
    text = (ROOT / "docs" / "spec.md").read_text()
    section = text.split("### executor.pilots", 1)[1].split("\n## ", 1)[0]
    assert [k for k in PILOT_KEYS if f"| `{k}` |" not in section] == []
    assert "(pilots.md)" in section
    example = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    assert _pilots(tmp_path, example) == Pilots(nodes=4, time="04:00:00", max=3,
                                                slots_per_node=2, idle_timeout=120.0,
                                                grace=600.0, heartbeat=5.0)

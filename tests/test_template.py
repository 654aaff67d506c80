"""Command templates: every parameter value reaches the trial as one intact argument and runs
nothing (docs/architecture.md, invariant 4); shell syntax around the placeholders is left alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpsearch.launch.attempt import build_launch
from hpsearch.preflight import parse_spec
from hpsearch.template import placeholders, render, shell_value

# Prints its arguments as a JSON list: what the process really received.
ARGV = "{python} -c 'import sys, json; print(json.dumps(sys.argv[1:]))'"
BUILTINS = {"python": sys.executable}

NASTY = [
    "two words",
    "it's",
    'say "hi"',
    "$(touch canary)",
    "`touch canary`",
    "x; touch canary",
    "x && touch canary",
    "x || touch canary",
    "x | tee canary",
    "> canary",
    "first line\nsecond line; touch canary",
    "*",
    "-rf",
    "--help",
    "",
    " padded ",
    "tab\there",
    "${HOME}",
    "$HOME",
    "back\\slash",
    "'",
    '"',
    "{x}",
    "{params}",
    "héllo ✓",
    "#not-a-comment",
    "~",
]


def run_shell(command: str, cwd: Path, env: dict | None = None) -> str:
    """Run `command` the way the local executor does: /bin/sh -c, in cwd."""
    proc = subprocess.run(["/bin/sh", "-c", command], cwd=cwd, capture_output=True, text=True,
                          timeout=30, env={**os.environ, **(env or {})})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def argv_of(command: str, cwd: Path) -> list[str]:
    return json.loads(run_shell(command, cwd))


@pytest.mark.parametrize("value", NASTY, ids=[repr(v) for v in NASTY])
def test_value_reaches_process_as_one_intact_argument(tmp_path, value):
    (tmp_path / "decoy-file").write_text("")  # something for an unquoted * to expand to
    command = render(ARGV + " {v}", {"v": value}, BUILTINS)
    assert argv_of(command, tmp_path) == [value]
    assert not (tmp_path / "canary").exists()
    assert sorted(os.listdir(tmp_path)) == ["decoy-file"]


def test_unquoted_value_would_break(tmp_path):
    """The check above can fail: the same values substituted without quoting do break."""
    (tmp_path / "decoy-file").write_text("")
    broken = 0
    for value in NASTY:
        if not value or "\n" in value or "'" in value or '"' in value or "`" in value:
            continue  # would leave the shell with a syntax error or hang on input
        raw = ARGV.replace("{python}", sys.executable) + " " + value
        proc = subprocess.run(["/bin/sh", "-c", raw], cwd=tmp_path, capture_output=True,
                              text=True, timeout=30, stdin=subprocess.DEVNULL)
        try:
            broken += json.loads(proc.stdout.splitlines()[0]) != [value]
        except (ValueError, IndexError):
            broken += 1
    assert broken >= 10
    assert (tmp_path / "canary").exists()


def test_many_values_in_one_command(tmp_path):
    params = {f"p{i}": v for i, v in enumerate(NASTY)}
    command = render(ARGV + " " + " ".join(f"--{k} {{{k}}}" for k in params), params, BUILTINS)
    expected = [arg for k, v in params.items() for arg in (f"--{k}", v)]
    assert argv_of(command, tmp_path) == expected
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("value,text", [
    (3, "3"),
    (-2, "-2"),
    (0.5, "0.5"),
    (1.0, "1.0"),  # stays a float on the command line
    (1e-05, "1e-05"),
    (2.5e20, "2.5e+20"),
    (True, "true"),
    (False, "false"),
    (None, ""),
    ("adam", "adam"),
])
def test_shell_value_text(tmp_path, value, text):
    assert shell_value(value) == text
    assert argv_of(render(ARGV + " {v}", {"v": value}, BUILTINS), tmp_path) == [text]


def test_shell_variables_stay_shell_variables(tmp_path):
    template = "echo ${HOME} ${x} {x}"
    command = render(template, {"x": "$(echo no)"}, {})
    assert command == "echo ${HOME} ${x} '$(echo no)'"
    out = run_shell(command, tmp_path, env={"HOME": "/home/someone", "x": "shell-x"})
    assert out == "/home/someone shell-x $(echo no)\n"


def test_double_braces_give_literal_braces(tmp_path):
    command = render("echo {{x}} {x} {{trial_id}}", {"x": "1"}, {"trial_id": "7"})
    assert command == "echo {x} 1 {trial_id}"
    assert run_shell(command, tmp_path) == "{x} 1 {trial_id}\n"
    assert placeholders("echo {{x}} {x} {{trial_id}}") == ["x"]


def test_awk_and_brace_syntax_left_alone(tmp_path):
    template = "printf '3 4\\n' | awk -v x={x} '{ print $2 * x }'; echo {a,b} {1..2} {}"
    command = render(template, {"x": 10}, {})
    assert command == "printf '3 4\\n' | awk -v x=10 '{ print $2 * x }'; echo {a,b} {1..2} {}"
    assert placeholders(template) == ["x"]
    assert run_shell(command, tmp_path).splitlines()[0] == "40"


def test_params_placeholder_is_one_quoted_json_argument(tmp_path):
    params = {"lr": 0.001, "layers": 3, "opt": "it's $(touch canary)", "flag": True,
              "none": None, "text": "a\nb"}
    command = render(ARGV + " {params}", params, BUILTINS)
    argv = argv_of(command, tmp_path)
    assert len(argv) == 1
    assert json.loads(argv[0]) == params
    assert argv[0] == json.dumps(params, sort_keys=True)
    assert not (tmp_path / "canary").exists()


def test_a_substituted_value_is_not_substituted_again():
    assert render("run {a} {b}", {"a": "{b}", "b": "x"}, {}) == "run '{b}' x"


def test_placeholders_in_order_with_repeats():
    assert placeholders("{python} t.py {lr} --again {lr} ${HOME} {{lr}} {trial_dir}") == [
        "python", "lr", "lr", "trial_dir"]


def test_builtin_placeholders_filled_and_quoted(tmp_path):
    spec = parse_spec("""
name: built.ins
command: >-
  {python} -c 'import sys, json; print(json.dumps(sys.argv[1:]))'
  {trial_id} {trial_dir} {checkpoint_dir} {experiment} {lr}
runs_dir: runs with space
search: {strategy: random, trials: 1, space: {lr: {low: 0.1, high: 1.0}}}
objective: {metric: loss}
""", "spec.yaml", tmp_path)
    launch = build_launch(spec.trial_recipe(False), 12, 1, {"lr": 0.25})
    trial_dir = tmp_path / "runs with space" / "built.ins" / "trials" / "00012"
    assert argv_of(launch.command, tmp_path) == [
        "12", str(trial_dir), str(trial_dir / "checkpoints"), "built.ins", "0.25"]
    assert launch.env["HPSEARCH_PARAMS"] == '{"lr": 0.25}'
    assert launch.env["HPSEARCH_TRIAL_DIR"] == str(trial_dir)


# -- end to end: the real CLI, the local executor, a grid over nasty strings -------------------

DUMP_ARGV = """\
import json, os, sys
with open(os.path.join(os.environ["HPSEARCH_TRIAL_DIR"], "argv.json"), "w") as fh:
    json.dump(sys.argv[1:], fh)
print("@hpsearch result loss=0")
"""

# Strings that survive a YAML round trip (JSON strings are valid YAML flow scalars).
E2E_VALUES = [v for v in NASTY if v != "{params}"] + ["{v}", "--v={v}"]


def test_nasty_values_reach_every_trial_intact(cli):
    (cli.cwd / "dump_argv.py").write_text(DUMP_ARGV)
    cli.write_spec(f"""
name: quoting
command: "{{python}} dump_argv.py {{v}} --then {{n}}"
search:
  strategy: grid
  parallel: 8
  space:
    v: {{choices: {json.dumps(E2E_VALUES)}}}
    n: 1.0
objective: {{metric: loss}}
""")
    proc = cli("submit", "spec.yaml", "-q", check=0)
    assert f"grid: {len(E2E_VALUES)} x 1 = {len(E2E_VALUES)} points; {len(E2E_VALUES)} trials" in proc.stdout
    trials = cli.runs / "quoting" / "trials"
    for trial_id, value in enumerate(E2E_VALUES):
        tdir = trials / f"{trial_id:05d}"
        assert json.loads((tdir / "params.json").read_text()) == {"v": value, "n": 1.0}
        assert json.loads((tdir / "argv.json").read_text()) == [value, "--then", "1.0"]
        assert not (tdir / "canary").exists()
    assert len(list(trials.iterdir())) == len(E2E_VALUES)
    assert sorted(os.listdir(cli.cwd)) == ["dump_argv.py", "hpsearch-runs", "spec.yaml"]

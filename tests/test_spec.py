"""The experiment spec: every malformed spec gets one message naming file, line, key path and
what was expected, exit code 2, and nothing on disk; good specs expand to exact grids.

In each bad spec below, the line the message must name is marked with `# <-`.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from hpsearch.cli.main import main
from hpsearch.errors import BadInput
from hpsearch.preflight import load_spec, parse_spec
from hpsearch.search.grid import GridSearch, grid_points, grid_size
from hpsearch.search.registry import STRATEGIES
from hpsearch.spec import space, validate
from hpsearch.spec.executor import EXECUTOR_KEYS
from hpsearch.template import BUILTIN_PLACEHOLDERS
from tests.conftest import EXAMPLES

_NAMES = ", ".join(STRATEGIES.names())  # every strategy, in the registry's order

MARK = "# <-"

# (id, spec text, key path or None, fragments the message must contain)
BAD_SPECS = [
    ("yaml-syntax-error", """
        name: demo
        command: "run {lr}"
        search:
          strategy: tpe
          trials: 3
            parallel: 2   # <-
        """, None, ["YAML syntax error: mapping values are not allowed here"]),
    ("yaml-unclosed-bracket", """
        name: demo
        command: "run {lr}"
        search:
          strategy: tpe
          space: {lr: {low: 0.1, high: 1.0}
        objective: {metric: loss}   # <-
        """, None, ["YAML syntax error: expected ',' or '}', but got '<scalar>' (while parsing a "
                    "flow mapping that starts on line 5)"]),
    ("yaml-unclosed-quote", """
        name: demo
        command: "run {lr}
        search: {strategy: tpe}
        """, None, ["YAML syntax error: found unexpected end of stream (while scanning a "
                    "quoted scalar that starts on line 2)"]),
    ("empty-file", "", None, ["the spec is empty; expected a mapping with at least name, "
                               "command, search and objective"]),
    ("only-comments", "# nothing here yet\n", None, ["the spec is empty"]),
    ("not-a-mapping", """
        - name: demo   # <-
        """, None, ["expected a mapping with keys name, command, workdir"]),
    ("unknown-key-did-you-mean", """
        name: demo
        command: "run {lr}"
        search:
          stratgy: tpe   # <-
          trials: 3
          space:
            lr: {low: 0.1, high: 1.0}
        objective: {metric: loss}
        """, "search.stratgy", ["unknown key 'stratgy'; did you mean 'strategy'?"]),
    ("unknown-top-level-key", """
        name: demo
        command: "run {lr}"
        search:
          strategy: tpe
          trials: 3
          space:
            lr: {low: 0.1, high: 1.0}
        objectve: {metric: loss}   # <-
        """, "objectve", ["unknown key 'objectve'; did you mean 'objective'?"]),
    ("unknown-nested-param-key", """
        name: demo
        command: "run {lr}"
        search:
          strategy: tpe
          trials: 3
          space:
            lr:
              low: 0.1
              lwo: 0.2   # <-
        objective: {metric: loss}
        """, "search.space.lr.lwo", ["unknown key 'lwo'; did you mean 'low'?"]),
    ("unknown-key-no-close-match", """
        name: demo
        command: "run {lr}"
        search:
          strategy: tpe
          trials: 3
          budget: 10   # <-
          space:
            lr: {low: 0.1, high: 1.0}
        objective: {metric: loss}
        """, "search.budget", ["unknown key 'budget'; expected one of: strategy, trials, "
                               "parallel, seed, space"]),
    ("trials-is-a-string", """
        name: demo
        command: "run {lr}"
        search:
          strategy: tpe
          trials: "ten"   # <-
          space:
            lr: {low: 0.1, high: 1.0}
        objective: {metric: loss}
        """, "search.trials", ["expected an integer; got a string 'ten'"]),
    ("trials-is-a-bool", """
        name: demo
        command: "run {lr}"
        search:
          strategy: tpe
          trials: true   # <-
          space:
            lr: {low: 0.1, high: 1.0}
        objective: {metric: loss}
        """, "search.trials", ["expected an integer; got a boolean True"]),
    ("parallel-is-a-float", """
        name: demo
        command: "run {lr}"
        search:
          strategy: tpe
          trials: 3
          parallel: 1.5   # <-
          space:
            lr: {low: 0.1, high: 1.0}
        objective: {metric: loss}
        """, "search.parallel", ["expected an integer; got a number 1.5"]),
    ("log-is-a-string", """
        name: demo
        command: "run {lr}"
        search:
          strategy: tpe
          trials: 3
          space:
            lr: {low: 0.1, high: 1.0, log: "yes"}   # <-
        objective: {metric: loss}
        """, "search.space.lr.log", ["expected true or false; got a string 'yes'"]),
    ("low-is-a-string", """
        name: demo
        command: "run {lr}"
        search:
          strategy: tpe
          trials: 3
          space:
            lr:
              type: float
              low: small   # <-
              high: 1.0
        objective: {metric: loss}
        """, "search.space.lr.low", ["expected a number; got a string 'small'"]),
    ("int-param-with-float-bound", """
        name: demo
        command: "run {layers}"
        search:
          strategy: tpe
          trials: 3
          space:
            layers:
              type: int
              low: 1
              high: 4.5   # <-
        objective: {metric: loss}
        """, "search.space.layers.high", ["expected an integer; got a number 4.5"]),
    ("low-above-high", """
        name: demo
        command: "run {lr}"
        search:
          strategy: tpe
          trials: 3
          space:
            lr:
              low: 1.0   # <-
              high: 0.5
        objective: {metric: loss}
        """, "search.space.lr.low", ["expected low < high; got low=1.0, high=0.5"]),
    ("low-equals-high", """
        name: demo
        command: "run {layers}"
        search:
          strategy: tpe
          trials: 3
          space:
            layers: {low: 3, high: 3}   # <-
        objective: {metric: loss}
        """, "search.space.layers.low", ["expected low < high; got low=3, high=3"]),
    ("log-scale-low-zero", """
        name: demo
        command: "run {lr}"
        search:
          strategy: tpe
          trials: 3
          space:
            lr:
              low: 0.0   # <-
              high: 0.1
              log: true
        objective: {metric: loss}
        """, "search.space.lr.low", ["a log scale needs low > 0; got low=0.0"]),
    ("log-scale-low-negative", """
        name: demo
        command: "run {lr}"
        search:
          strategy: tpe
          trials: 3
          space:
            lr: {low: -1e-3, high: 0.1, log: true}   # <-
        objective: {metric: loss}
        """, "search.space.lr.low", ["a log scale needs low > 0; got low=-0.001"]),
    ("empty-choices", """
        name: demo
        command: "run {opt}"
        search:
          strategy: tpe
          trials: 3
          space:
            opt:
              choices: []   # <-
        objective: {metric: loss}
        """, "search.space.opt.choices", ["expected at least one choice; got an empty list"]),
    ("duplicate-choices", """
        name: demo
        command: "run {opt}"
        search:
          strategy: tpe
          trials: 3
          space:
            opt:
              choices: [sgd, adam, sgd]   # <-
        objective: {metric: loss}
        """, "search.space.opt.choices", ["duplicate choices; each may appear once"]),
    ("list-as-param-is-ambiguous", """
        name: demo
        command: "run {opt}"
        search:
          strategy: tpe
          trials: 3
          space:
            opt: [sgd, adam]   # <-
        objective: {metric: loss}
        """, "search.space.opt", ["a list is ambiguous: write {choices: [...]}"]),
    ("grid-float-without-step", """
        name: demo
        command: "run {lr}"
        search:
          strategy: grid
          space:
            lr: {low: 0.1, high: 1.0}   # <-
        objective: {metric: loss}
        """, "search.space.lr", ["a grid search needs a finite set: give this float range a "
                                 "'step', or use 'choices'"]),
    ("grid-log-range", """
        name: demo
        command: "run {layers}"
        search:
          strategy: grid
          space:
            layers: {type: int, low: 1, high: 8, log: true}   # <-
        objective: {metric: loss}
        """, "search.space.layers.log", ["a grid search cannot enumerate a log range"]),
    ("step-does-not-divide-range", """
        name: demo
        command: "run {lr}"
        search:
          strategy: grid
          space:
            lr:
              low: 0.0
              high: 1.0
              step: 0.3   # <-
        objective: {metric: loss}
        """, "search.space.lr.step", ["expected a step that divides high - low (1.0 - 0.0); "
                                      "got 0.3"]),
    ("step-with-log", """
        name: demo
        command: "run {lr}"
        search:
          strategy: tpe
          trials: 3
          space:
            lr:
              low: 0.1
              high: 1.0
              log: true
              step: 0.1   # <-
        objective: {metric: loss}
        """, "search.space.lr.step", ["step and log cannot be combined"]),
    ("trials-zero", """
        name: demo
        command: "run {lr}"
        search:
          strategy: random
          trials: 0   # <-
          space:
            lr: {low: 0.1, high: 1.0}
        objective: {metric: loss}
        """, "search.trials", ["expected an integer >= 1; got 0"]),
    ("trials-negative", """
        name: demo
        command: "run {lr}"
        search:
          strategy: grid
          trials: -4   # <-
          space:
            lr: {choices: [0.1, 0.2]}
        objective: {metric: loss}
        """, "search.trials", ["expected an integer >= 1; got -4"]),
    ("trials-missing-for-tpe", """
        name: demo
        command: "run {lr}"
        search:   # <-
          strategy: tpe
          space:
            lr: {low: 0.1, high: 1.0}
        objective: {metric: loss}
        """, "search", ["missing required key 'trials'", "only grid may omit it"]),
    ("duplicate-param-yaml-key", """
        name: demo
        command: "run {lr}"
        search:
          strategy: tpe
          trials: 3
          space:
            lr: {low: 0.1, high: 1.0}
            momentum: {low: 0.1, high: 0.9}
            lr: {low: 0.01, high: 0.1}   # <-
        objective: {metric: loss}
        """, "search.space.lr", ["duplicate key 'lr' (each name may appear once)"]),
    ("duplicate-top-level-key", """
        name: demo
        command: "run {lr}"
        name: other   # <-
        """, "name", ["duplicate key 'name'"]),
    ("duplicate-objective-metric", """
        name: demo
        command: "run {lr}"
        search:
          strategy: nsga2
          trials: 3
          space:
            lr: {low: 0.1, high: 1.0}
        objective:
          - {metric: loss}
          - {metric: acc, direction: maximize}
          - {metric: loss, direction: maximize}   # <-
        """, "objective[2].metric", ["duplicate objective metric 'loss'"]),
    ("bad-direction", """
        name: demo
        command: "run {lr}"
        search:
          strategy: tpe
          trials: 3
          space:
            lr: {low: 0.1, high: 1.0}
        objective:
          metric: acc
          direction: max   # <-
        """, "objective.direction", ["expected minimize or maximize; got 'max'"]),
    ("empty-objective-list", """
        name: demo
        command: "run {lr}"
        search:
          strategy: tpe
          trials: 3
          space:
            lr: {low: 0.1, high: 1.0}
        objective: []   # <-
        """, "objective", ["expected at least one objective"]),
    ("unknown-strategy-did-you-mean", """
        name: demo
        command: "run {lr}"
        search:
          strategy: tpee   # <-
          trials: 3
          space:
            lr: {low: 0.1, high: 1.0}
        objective: {metric: loss}
        """, "search.strategy", [f"unknown strategy 'tpee'; expected one of {_NAMES}; did "
                                 "you mean 'tpe'?"]),
    ("unknown-strategy-no-close-match", """
        name: demo
        command: "run {lr}"
        search:
          strategy: hyperband   # <-
          trials: 3
          space:
            lr: {low: 0.1, high: 1.0}
        objective: {metric: loss}
        """, "search.strategy", [f"unknown strategy 'hyperband'; expected one of {_NAMES}"]),
    ("placeholder-without-param", """
        name: demo
        command: "run {lr} --momentum {momentun}"   # <-
        search:
          strategy: tpe
          trials: 3
          space:
            lr: {low: 0.1, high: 1.0}
            momentum: {low: 0.1, high: 0.9}
        objective: {metric: loss}
        """, "command", ["placeholder {momentun} names no parameter in search.space; "
                         "did you mean {momentum}?"]),
    ("awk-braces-without-spaces-are-placeholders", """
        name: demo
        command: "run {lr} | awk '{print}'"   # <-
        search:
          strategy: tpe
          trials: 3
          space:
            lr: {low: 0.1, high: 1.0}
        objective: {metric: loss}
        """, "command", ["placeholder {print} names no parameter in search.space"]),
    ("param-never-used", """
        name: demo
        command: "run {lr}"
        search:
          strategy: tpe
          trials: 3
          space:
            lr: {low: 0.1, high: 1.0}
            momentum: {low: 0.1, high: 0.9}   # <-
        objective: {metric: loss}
        """, "search.space.momentum", ["parameter 'momentum' is never used in command; add "
                                       "{momentum} to it (or {params}"]),
    ("fixed-param-never-used", """
        name: demo
        command: "run {lr}"
        search:
          strategy: tpe
          trials: 3
          space:
            lr: {low: 0.1, high: 1.0}
            epochs: 10   # <-
        objective: {metric: loss}
        """, "search.space.epochs", ["parameter 'epochs' is never used in command"]),
    ("param-named-like-a-builtin", """
        name: demo
        command: "run {python}"
        search:
          strategy: tpe
          trials: 3
          space:
            python: {choices: ["3.11", "3.12"]}   # <-
        objective: {metric: loss}
        """, "search.space.python", ["'python' is reserved for hpsearch's own placeholder "
                                     "{python}"]),
    ("param-name-not-an-identifier", """
        name: demo
        command: "run {lr}"
        search:
          strategy: tpe
          trials: 3
          space:
            learning-rate: {low: 0.1, high: 1.0}   # <-
        objective: {metric: loss}
        """, "search.space.learning-rate", ["expected a parameter name made of letters, digits "
                                            "and '_'"]),
    ("all-params-fixed", """
        name: demo
        command: "run {lr}"
        search:
          strategy: grid
          space:   # <-
            lr: 0.1
        objective: {metric: loss}
        """, "search.space", ["expected at least one parameter to search"]),
    ("missing-objective", """
        name: demo   # <-
        command: "run {lr}"
        search:
          strategy: tpe
          trials: 3
          space:
            lr: {low: 0.1, high: 1.0}
        """, None, ["missing required key 'objective'"]),
    ("missing-high", """
        name: demo
        command: "run {lr}"
        search:
          strategy: tpe
          trials: 3
          space:
            lr: {low: 0.1}   # <-
        objective: {metric: loss}
        """, "search.space.lr", ["missing required key 'high' for a float parameter"]),
    ("name-with-slash", """
        name: runs/demo   # <-
        command: "run {lr}"
        search: {strategy: tpe, trials: 3, space: {lr: {low: 0.1, high: 1.0}}}
        objective: {metric: loss}
        """, "name", ["expected a name of letters, digits, '.', '_' or '-', starting with a "
                      "letter or digit (it names a directory); got 'runs/demo'"]),
    ("name-dot-dot", """
        name: ..   # <-
        command: "run {lr}"
        search: {strategy: tpe, trials: 3, space: {lr: {low: 0.1, high: 1.0}}}
        objective: {metric: loss}
        """, "name", ["starting with a letter or digit (it names a directory); got '..'"]),
    ("name-escaping-up", """
        name: ../../etc   # <-
        command: "run {lr}"
        search: {strategy: tpe, trials: 3, space: {lr: {low: 0.1, high: 1.0}}}
        objective: {metric: loss}
        """, "name", ["got '../../etc'"]),
    ("bad-timeout-duration", """
        name: demo
        command: "run {lr}"
        search: {strategy: tpe, trials: 3, space: {lr: {low: 0.1, high: 1.0}}}
        objective: {metric: loss}
        executor:
          type: local
          timeout: 5 minutes   # <-
        """, "executor.timeout", ["expected a positive duration such as 90, '90s', '10m', "
                                  "'2h' or '01:30:00'; got '5 minutes'"]),
    ("negative-grace", """
        name: demo
        command: "run {lr}"
        search: {strategy: tpe, trials: 3, space: {lr: {low: 0.1, high: 1.0}}}
        objective: {metric: loss}
        executor:
          grace: -1   # <-
        """, "executor.grace", ["expected a positive duration", "got -1"]),
    ("unknown-executor", """
        name: demo
        command: "run {lr}"
        search: {strategy: tpe, trials: 3, space: {lr: {low: 0.1, high: 1.0}}}
        objective: {metric: loss}
        executor: slrum   # <-
        """, "executor.type", ["unknown executor 'slrum'; expected one of local, slurm"]),
    ("executor-gpus-not-a-list", """
        name: demo
        command: "run {lr}"
        search: {strategy: tpe, trials: 3, space: {lr: {low: 0.1, high: 1.0}}}
        objective: {metric: loss}
        executor:
          gpus: all   # <-
        """, "executor.gpus", ["expected 'auto' or a list of device ids; got a string 'all'"]),
    ("resources-nodes-zero", """
        name: demo
        command: "run {lr}"
        search: {strategy: tpe, trials: 3, space: {lr: {low: 0.1, high: 1.0}}}
        objective: {metric: loss}
        resources:
          nodes: 0   # <-
        """, "resources.nodes", ["expected an integer >= 1; got 0"]),
    ("resources-bad-mem", """
        name: demo
        command: "run {lr}"
        search: {strategy: tpe, trials: 3, space: {lr: {low: 0.1, high: 1.0}}}
        objective: {metric: loss}
        resources:
          mem: 4 GB   # <-
        """, "resources.mem", ["expected a size such as 4G or 4000M; got a string '4 GB'"]),
    ("resources-sbatch-extra-not-options", """
        name: demo
        command: "run {lr}"
        search: {strategy: tpe, trials: 3, space: {lr: {low: 0.1, high: 1.0}}}
        objective: {metric: loss}
        resources:
          sbatch_extra: [constraint=a100]   # <-
        """, "resources.sbatch_extra[0]", ["expected an sbatch option such as "
                                           "'--constraint=a100'; got 'constraint=a100'"]),
    ("retries-negative", """
        name: demo
        command: "run {lr}"
        search: {strategy: tpe, trials: 3, space: {lr: {low: 0.1, high: 1.0}}}
        objective: {metric: loss}
        retries: -1   # <-
        """, "retries", ["expected an integer >= 0; got -1"]),
    ("checkpoints-keep-zero", """
        name: demo
        command: "run {lr}"
        search: {strategy: tpe, trials: 3, space: {lr: {low: 0.1, high: 1.0}}}
        objective: {metric: loss}
        checkpoints:
          keep_last: 0   # <-
        """, "checkpoints.keep_last", ["expected an integer >= 1; got 0"]),
    ("env-bad-variable-name", """
        name: demo
        command: "run {lr}"
        search: {strategy: tpe, trials: 3, space: {lr: {low: 0.1, high: 1.0}}}
        objective: {metric: loss}
        env:
          OMP-THREADS: 4   # <-
        """, "env.OMP-THREADS", ["expected an environment variable name"]),
    ("cmaes-with-two-objectives", """
        name: demo
        command: "run {lr}"
        search:
          strategy: cmaes   # <-
          trials: 3
          space:
            lr: {low: 0.1, high: 1.0}
        objective:
          - {metric: loss}
          - {metric: latency}
        """, "search.strategy", ["cmaes optimizes one objective; use tpe, gp, nsga2 or nsga3 for "
                                 "several"]),
]

# Where no line can carry the mark: an unclosed quote runs to the end of the file (3 lines).
END_OF_FILE = {"yaml-unclosed-quote": 4}

# The cases the issue names run through the real CLI as a subprocess (`validate`), some also
# through `submit`; every case runs through the CLI's main() in-process, which is the same
# code from argument parsing to exit code, at a fraction of the cost.
SUBPROCESS_CASES = [
    "yaml-syntax-error", "unknown-key-did-you-mean", "unknown-nested-param-key",
    "trials-is-a-string", "parallel-is-a-float", "log-is-a-string", "low-above-high",
    "log-scale-low-zero", "empty-choices", "grid-float-without-step", "trials-zero",
    "duplicate-param-yaml-key", "duplicate-objective-metric", "unknown-strategy-did-you-mean",
    "placeholder-without-param", "param-never-used",
]
SUBMIT_CASES = ["yaml-syntax-error", "unknown-key-did-you-mean", "param-never-used",
                "name-dot-dot", "cmaes-with-two-objectives"]
CASES = {c[0]: c[1:] for c in BAD_SPECS}


def _write(cli, case: str) -> int:
    """Write the case's spec as spec.yaml; return the line its message must name."""
    path = cli.write_spec(CASES[case][0])
    lines = path.read_text().splitlines()
    marked = [n for n, line in enumerate(lines, 1) if MARK in line]
    assert len(marked) <= 1
    if case in END_OF_FILE:
        assert not marked and len(lines) == END_OF_FILE[case] - 1
        return END_OF_FILE[case]
    return marked[0] if marked else 1


def _assert_one_message(proc, case: str, line: int) -> None:
    _, key, fragments = CASES[case]
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stdout == ""
    message = proc.stderr.rstrip("\n")
    assert "\n" not in message, "expected one message line, got:\n" + proc.stderr
    prefix = f"hpsearch: error: spec.yaml:{line}: " + (f"{key}: " if key else "")
    assert message.startswith(prefix), message
    for fragment in fragments:
        assert fragment in message, message
    assert "Traceback" not in proc.stderr


def _main_in_process(capsys, *args: str) -> SimpleNamespace:
    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    return SimpleNamespace(returncode=code, stdout=out.out, stderr=out.err)


@pytest.mark.parametrize("case", list(CASES))
def test_bad_spec_gets_one_clear_message(cli, monkeypatch, capsys, case):
    line = _write(cli, case)
    monkeypatch.chdir(cli.cwd)
    monkeypatch.setenv("HPSEARCH_RUNS_DIR", str(cli.runs))
    _assert_one_message(_main_in_process(capsys, "validate", "spec.yaml"), case, line)
    _assert_one_message(_main_in_process(capsys, "submit", "spec.yaml"), case, line)
    assert sorted(os.listdir(cli.cwd)) == ["spec.yaml"]


@pytest.mark.parametrize("case", SUBPROCESS_CASES)
def test_validate_cli_rejects_bad_spec(cli, case):
    line = _write(cli, case)
    _assert_one_message(cli("validate", "spec.yaml"), case, line)
    assert sorted(os.listdir(cli.cwd)) == ["spec.yaml"]


@pytest.mark.parametrize("case", SUBMIT_CASES)
def test_submit_cli_of_bad_spec_creates_nothing(cli, case):
    line = _write(cli, case)
    _assert_one_message(cli("submit", "spec.yaml"), case, line)
    assert not cli.runs.exists()
    assert sorted(os.listdir(cli.cwd)) == ["spec.yaml"]


def test_submit_to_an_unreachable_slurm_creates_nothing(cli):
    cli.write_spec("""
        name: demo
        command: "run {lr}"
        search: {strategy: tpe, trials: 3, space: {lr: {low: 0.1, high: 1.0}}}
        objective: {metric: loss}
        executor: slurm
        """)
    assert cli("validate", "spec.yaml").returncode == 0  # a valid spec ...
    # A cluster whose controller does not answer (nothing listens on its port).
    conf = cli.cwd.parent / "down-slurm.conf"
    conf.write_text("ClusterName=nowhere\nSlurmctldHost=localhost\nSlurmctldPort=9\n"
                    "AuthType=auth/none\n")
    proc = cli("submit", "spec.yaml", env={"SLURM_CONF": str(conf)})
    assert proc.returncode == 2
    assert "executor.type: executor slurm: cannot reach the Slurm controller" in proc.stderr
    assert sorted(os.listdir(cli.cwd)) == ["spec.yaml"]


def test_missing_spec_file_is_bad_input(cli):
    proc = cli("validate", "nope.yaml")
    assert proc.returncode == 2
    assert proc.stderr.startswith("hpsearch: error: nope.yaml: cannot read spec: No such file")
    assert os.listdir(cli.cwd) == []


def test_bad_input_carries_file_line_and_key_in_process(tmp_path):
    text = ("name: demo\ncommand: run {lr}\nobjective: {metric: loss}\nsearch:\n"
            "  space: {lr: {low: 0.1, high: 1.0}}\n  strategy: tpe\n  trials: ten\n")
    with pytest.raises(BadInput) as err:
        parse_spec(text, "my.yaml", tmp_path)
    assert (err.value.file, err.value.line, err.value.key) == ("my.yaml", 7, "search.trials")
    assert err.value.detail == "expected an integer; got a string 'ten'"


# -- good specs -----------------------------------------------------------------------------

EXAMPLE_SPECS = sorted((EXAMPLES / "quadratic").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLE_SPECS, ids=[p.name for p in EXAMPLE_SPECS])
def test_example_specs_validate(cli, path):
    proc = cli("validate", path, check=0)
    assert proc.stdout.startswith(f"{path}: ok\n")
    assert proc.stderr == ""
    assert os.listdir(cli.cwd) == []


def test_examples_are_found():
    assert {p.name for p in EXAMPLE_SPECS} >= {"grid.yaml", "multi.yaml", "shell.yaml",
                                                "spec.yaml"}


GRID_SPEC = """
name: grid-demo
command: "run --lr {lr} --layers {layers} --opt {opt} --epochs {epochs}"
search:
  strategy: grid
  parallel: 2
  space:
    lr: {low: 0.1, high: 0.3, step: 0.1}
    layers: {low: 1, high: 3}
    opt: {choices: [sgd, adam]}
    epochs: 10
objective: {metric: loss}
"""


def _parse(text: str, base: Path):
    return parse_spec(text.lstrip(), "spec.yaml", base)


def test_grid_expands_to_the_exact_cartesian_product(tmp_path):
    spec = _parse(GRID_SPEC, tmp_path)
    kinds = {p.name: p.kind for p in spec.search.space}
    assert kinds == {"lr": "float", "layers": "int", "opt": "categorical", "epochs": "fixed"}
    points = grid_points(spec.search)
    expected = [{"lr": lr, "layers": layers, "opt": opt, "epochs": 10}
                for lr in (0.1, 0.2, 0.3) for layers in (1, 2, 3) for opt in ("sgd", "adam")]
    assert points == expected  # exact values, in order, last parameter fastest
    assert [type(p["layers"]) for p in points] == [int] * 18
    assert [type(p["lr"]) for p in points] == [float] * 18
    assert grid_size(spec.search) == 18
    assert spec.search.trials == 18  # a grid may omit trials: it runs every point


def test_plan_prints_grid_size_and_exact_commands(cli):
    cli.write_spec(GRID_SPEC)
    proc = cli("plan", "spec.yaml", "--limit", "0", check=0)
    lines = proc.stdout.splitlines()
    assert lines[0] == "grid: 3 x 3 x 2 x 1 = 18 points; 18 trials, 2 in parallel"
    commands = [line.strip()[2:] for line in lines if line.strip().startswith("$ ")]
    assert len(commands) == 18
    assert commands[0] == "run --lr 0.1 --layers 1 --opt sgd --epochs 10"
    assert commands[-1] == "run --lr 0.3 --layers 3 --opt adam --epochs 10"
    assert sorted(os.listdir(cli.cwd)) == ["spec.yaml"]  # plan writes nothing


def test_plan_of_example_grid(cli):
    proc = cli("plan", EXAMPLES / "quadratic" / "grid.yaml", "--limit", "1", check=0)
    assert proc.stdout.splitlines()[0] == "grid: 3 x 3 x 2 = 18 points; 18 trials, 4 in parallel"


def test_float_step_gives_clean_values(cli):
    text = """
        name: steps
        command: "run {x} {y}"
        search:
          strategy: grid
          space:
            x: {low: 0.0, high: 1.0, step: 0.1}
            y: {low: -0.5, high: 0.25, step: 0.25}
        objective: {metric: loss}
        """
    path = cli.write_spec(text)
    spec = load_spec(path)
    x, y = spec.search.space
    assert x.grid_values() == [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
    assert 0.1 * 3 != 0.3 and 0.3 in x.grid_values()  # float noise rounded away
    assert y.grid_values() == [-0.5, -0.25, 0.0, 0.25]
    out = cli("plan", "spec.yaml", "--limit", "0", check=0).stdout
    assert "$ run 0.3 -0.5" in out
    assert "0.30000000000000004" not in out and "0.7000000000000001" not in out


def test_float_param_with_integer_bounds_gives_floats_in_a_grid(tmp_path):
    spec = _parse("""
name: f
command: "run {x}"
search:
  strategy: grid
  space:
    x: {type: float, low: 0, high: 2, step: 1}
objective: {metric: loss}
""", tmp_path)
    values = spec.search.space[0].grid_values()
    assert values == [0.0, 1.0, 2.0] and all(type(v) is float for v in values)


@pytest.mark.parametrize("trials,expected", [(5, 5), (18, 18), (100, 18)])
def test_trials_caps_a_grid(tmp_path, trials, expected):
    text = GRID_SPEC.replace("  parallel: 2\n", f"  parallel: 2\n  trials: {trials}\n")
    spec = _parse(text, tmp_path)
    assert spec.search.trials == expected
    assert grid_size(spec.search) == 18
    search = GridSearch(spec.search)
    asked = []
    while (a := search.ask()) is not None:
        asked.append(a.params)
    assert asked == grid_points(spec.search)[:expected]  # the first points, in grid order


def test_plan_shows_capped_grid(cli):
    cli.write_spec(GRID_SPEC.replace("  parallel: 2\n", "  parallel: 2\n  trials: 5\n"))
    out = cli("plan", "spec.yaml", "--limit", "0", check=0).stdout
    assert out.splitlines()[0] == "grid: 3 x 3 x 2 x 1 = 18 points; 5 trials, 2 in parallel"
    assert out.count("\n  $ run ") == 5


@pytest.mark.parametrize("param,kind", [
    ("{low: 1, high: 4}", "int"),
    ("{low: -3, high: 5, step: 2}", "int"),
    ("{low: 1, high: 4.0}", "float"),
    ("{low: 1.0, high: 4}", "float"),
    ("{low: 1, high: 4, step: 0.5}", "float"),
    ("{low: 1, high: 64, log: true}", "float"),  # log ranges are float unless typed int
    ("{type: int, low: 1, high: 64, log: true}", "int"),
    ("{choices: [1, 2]}", "categorical"),
    ("{value: 3}", "fixed"),
    ("3", "fixed"),
])
def test_param_type_inference(tmp_path, param, kind):
    spec = _parse(f"""
name: infer
command: "run {{p}} {{q}}"
search:
  strategy: random
  trials: 2
  space:
    p: {param}
    q: {{choices: [a]}}
objective: {{metric: loss}}
""", tmp_path)
    assert spec.search.space[0].kind == kind


def test_int_grid_defaults_to_step_one(tmp_path):
    spec = _parse(GRID_SPEC, tmp_path)
    layers = spec.search.space[1]
    assert (layers.low, layers.high, layers.step) == (1, 3, 1)
    assert layers.grid_values() == [1, 2, 3]


def test_exponent_numbers_and_times_read_as_meant(tmp_path):
    """YAML 1.1 would read 1e-5 as a string and 2:00:00 as the base-60 integer 7200."""
    spec = _parse("""
name: yaml12
command: "run {lr} {t}"
search:
  strategy: tpe
  trials: 3
  space:
    lr: {low: 1e-5, high: 1E-1, log: true}
    t: {choices: [1:30, 90]}
objective: {metric: loss}
resources:
  time: 2:00:00
executor:
  timeout: 1:30:00
""", tmp_path)
    lr = spec.search.space[0]
    assert (lr.kind, lr.low, lr.high) == ("float", 1e-5, 0.1)
    assert spec.search.space[1].choices == ("1:30", 90)
    assert spec.resources.time == "2:00:00"
    assert spec.executor.timeout == 5400.0
    with pytest.raises(BadInput, match="duplicate choices"):  # 1:30 is the text "1:30"
        _parse(GRID_SPEC.replace("choices: [sgd, adam]", 'choices: [1:30, "1:30"]'), tmp_path)


def test_defaults_and_optional_sections(tmp_path, monkeypatch):
    monkeypatch.delenv("HPSEARCH_RUNS_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    spec = _parse("""
name: minimal
command: "run {x}"
search: {strategy: random, trials: 4, space: {x: {low: 0.0, high: 1.0}}}
objective: {metric: acc, direction: maximize}
""", tmp_path / "specs")
    assert spec.workdir == tmp_path / "specs"  # the spec's folder
    assert spec.runs_dir == tmp_path / "hpsearch-runs"
    assert spec.search.parallel == 1 and spec.search.seed is None
    assert [(o.metric, o.direction) for o in spec.objectives] == [("acc", "maximize")]
    assert spec.resources.nodes == 1 and spec.resources.gpus_per_node == 0
    assert spec.retries.max == 0
    assert (spec.executor.type, spec.executor.gpus, spec.executor.timeout,
            spec.executor.grace) == ("local", None, None, 10.0)


def test_runs_dir_precedence(tmp_path, monkeypatch):
    text = """
name: where
command: "run {x}"
search: {strategy: random, trials: 4, space: {x: {low: 0.0, high: 1.0}}}
objective: {metric: loss}
"""
    spec_file = tmp_path / "specs" / "s.yaml"
    spec_file.parent.mkdir()
    spec_file.write_text(text.lstrip())
    monkeypatch.setenv("HPSEARCH_RUNS_DIR", str(tmp_path / "from-env"))
    assert load_spec(spec_file).runs_dir == tmp_path / "from-env"
    assert load_spec(spec_file).experiment_dir == tmp_path / "from-env" / "where"
    spec_file.write_text(text.lstrip() + "runs_dir: ../from-spec\n")
    assert load_spec(spec_file).runs_dir == tmp_path / "from-spec"  # relative to the spec
    assert load_spec(spec_file, tmp_path / "flag").runs_dir == tmp_path / "flag"


def test_every_section_parses(tmp_path):
    spec = _parse("""
name: full.run_1-a
command: "{python} train.py {params} --out {trial_dir} --ckpt {checkpoint_dir}"
workdir: code
search:
  strategy: nsga2
  trials: 8
  parallel: 4
  seed: 0
  space:
    lr: {low: 1.0e-4, high: 0.1, log: true}
    layers: {type: int, low: 2, high: 8, step: 2}
    opt: {type: categorical, choices: [sgd, adam, null, true, 0.5]}
    tag: {type: fixed, value: [a, b]}
objective:
  - metric: loss
  - {metric: acc, direction: maximize}
resources: {nodes: 2, tasks_per_node: 4, gpus_per_node: 4, cpus_per_task: 8, mem: 64G,
            time: "1-00:00:00", partition: gpu, account: proj, qos: high,
            sbatch_extra: ["--constraint=a100", "--exclusive"]}
retries: {max: 2}
checkpoints: {keep_last: 3, keep_best: 1}
executor: {type: local, gpus: [0, 1, "2", 3], timeout: 2h, grace: 30s}
env: {OMP_NUM_THREADS: 4, MODE: fast}
""", tmp_path)
    assert spec.workdir == tmp_path / "code"
    assert spec.multi_objective
    assert spec.search.fixed == {"tag": ["a", "b"]}
    assert spec.search.space[2].choices == ("sgd", "adam", None, True, 0.5)
    r = spec.resources
    assert (r.nodes, r.tasks_per_node, r.gpus_per_node, r.cpus_per_task, r.mem, r.time,
            r.partition, r.account, r.qos, r.sbatch_extra) == (
        2, 4, 4, 8, "64G", "1-00:00:00", "gpu", "proj", "high", ("--constraint=a100",
                                                                "--exclusive"))
    assert spec.retries.max == 2
    assert (spec.checkpoints.keep_last, spec.checkpoints.keep_best) == (3, 1)
    assert (spec.executor.gpus, spec.executor.timeout, spec.executor.grace) == (
        ("0", "1", "2", "3"), 7200.0, 30.0)
    assert spec.env == (("OMP_NUM_THREADS", "4"), ("MODE", "fast"))
    assert _parse("""
name: short
command: "run {x}"
search: {strategy: random, trials: 1, space: {x: {low: 0.0, high: 1.0}}}
objective: {metric: loss}
retries: 3
executor: {gpus: auto}
""", tmp_path).retries.max == 3


# -- docs/spec.md stays true to the code -----------------------------------------------------

DOC = Path(__file__).resolve().parent.parent / "docs" / "spec.md"


def test_docs_complete_example_validates(tmp_path):
    text = DOC.read_text()
    example = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    spec = parse_spec(example, "example.yaml", tmp_path)
    assert set(spec.raw) == set(validate.TOP_KEYS)  # it shows every top-level key
    assert {p.kind for p in spec.search.space} == {"float", "int", "categorical", "fixed"}


def test_docs_name_every_key_strategy_and_placeholder():
    text = DOC.read_text()
    keys = (validate.TOP_KEYS + validate.SEARCH_KEYS + space.PARAM_KEYS +
            validate.OBJECTIVE_KEYS + validate.RESOURCE_KEYS + validate.RETRY_KEYS +
            validate.CHECKPOINT_KEYS + EXECUTOR_KEYS + space.PARAM_TYPES +
            validate.PLACEMENT_KEYS +
            STRATEGIES.names())
    missing = [k for k in keys if f"`{k}`" not in text and f"{k}:" not in text]
    assert missing == []
    assert [b for b in BUILTIN_PLACEHOLDERS if f"`{{{b}}}`" not in text] == []

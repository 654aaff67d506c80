"""Conditional search spaces (`when`): a parameter exists only where a categorical defined
before it has one of the listed values. Bad conditions get one message naming file, line and
key, exit 2 and nothing on disk; a grid holds exactly the combinations that exist; a TPE
search on the local executor gives every trial exactly its active parameters, also after
its driver is killed and resumed; status, export, best and report show the absent ones."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from hpsearch.cli.main import main
from hpsearch.preflight import parse_spec
from hpsearch.search.grid import GridSearch, grid_points
from hpsearch.search.optuna_search import OptunaSearch
from hpsearch.search.registry import STRATEGIES, SamplerStrategy
from hpsearch.store.rows import TrialRow
from tests.helpers import read_store

MARK = "# <-"
HEAD = """
    name: cond
    command: "train {params}"
    objective: {metric: loss}
    search:
      strategy: tpe
      trials: 4
      space:
"""

# (id, space lines (indented under space:), key path, fragments the message must contain);
# the line the message must name is marked with `# <-`.
BAD = [
    ("unknown-parent", """
        optimizer: {choices: [sgd, adam]}
        momentum: {low: 0.0, high: 0.9, when: {optimiser: sgd}}   # <-
        """, "search.space.momentum.when.optimiser",
     ["'optimiser' names no parameter in search.space; did you mean 'optimizer'?"]),
    ("float-parent", """
        lr: {low: 0.001, high: 0.1}
        momentum: {low: 0.0, high: 0.9, when: {lr: 0.01}}   # <-
        """, "search.space.momentum.when.lr",
     ["'lr' is a float parameter; a condition names a categorical one (with choices)"]),
    ("fixed-parent", """
        mode: fast
        momentum: {low: 0.0, high: 0.9, when: {mode: fast}}   # <-
        """, "search.space.momentum.when.mode", ["'mode' is a fixed parameter"]),
    ("value-not-a-choice", """
        optimizer: {choices: [sgd, adam]}
        momentum: {low: 0.0, high: 0.9, when: {optimizer: sgdd}}   # <-
        """, "search.space.momentum.when.optimizer",
     ["'sgdd' is not one of optimizer's choices ('sgd', 'adam')"]),
    ("listed-value-not-a-choice", """
        optimizer: {choices: [sgd, adam]}
        beta1:
          low: 0.8
          high: 0.99
          when: {optimizer: [adam, adamw]}   # <-
        """, "search.space.beta1.when.optimizer[1]",
     ["'adamw' is not one of optimizer's choices"]),
    ("true-is-not-1", """
        layers: {choices: [1, 2]}
        width: {low: 8, high: 64, when: {layers: true}}   # <-
        """, "search.space.width.when.layers", ["true is not one of layers's choices (1, 2)"]),
    ("parent-defined-after", """
        momentum: {low: 0.0, high: 0.9, when: {optimizer: sgd}}   # <-
        optimizer: {choices: [sgd, adam]}
        """, "search.space.momentum.when.optimizer",
     ["'optimizer' is defined after 'momentum'; a condition names a parameter defined "
      "earlier in search.space (move it above)"]),
    ("self", """
        optimizer: {choices: [sgd, adam], when: {optimizer: sgd}}   # <-
        """, "search.space.optimizer.when.optimizer", ["'optimizer' cannot depend on itself"]),
    ("cycle", """
        a: {choices: [x, y], when: {c: x}}   # <-
        b: {choices: [x, y], when: {a: x}}
        c: {choices: [x, y], when: {b: y}}
        """, "search.space.a.when.c", ["a cycle: a -> c -> b -> a"]),
    ("two-conditions", """
        optimizer: {choices: [sgd, adam]}
        sched: {choices: [cos, step]}
        momentum: {low: 0.0, high: 0.9, when: {optimizer: sgd, sched: cos}}   # <-
        """, "search.space.momentum.when", ["expected one condition; got 2 (optimizer, sched)"]),
    ("empty-list", """
        optimizer: {choices: [sgd, adam]}
        momentum: {low: 0.0, high: 0.9, when: {optimizer: []}}   # <-
        """, "search.space.momentum.when.optimizer",
     ["expected at least one of optimizer's choices; got an empty list"]),
    ("not-a-mapping", """
        optimizer: {choices: [sgd, adam]}
        momentum: {low: 0.0, high: 0.9, when: optimizer}   # <-
        """, "search.space.momentum.when",
     ["expected a mapping of one categorical parameter defined earlier"]),
    ("when-misspelt", """
        optimizer: {choices: [sgd, adam]}
        momentum: {low: 0.0, high: 0.9, wen: {optimizer: sgd}}   # <-
        """, "search.space.momentum.wen", ["unknown key 'wen'; did you mean 'when'?"]),
]


def _bad_text(space: str, command: str = "train {params}") -> str:
    head = textwrap.dedent(HEAD).lstrip().replace("train {params}", command)
    return head + textwrap.indent(textwrap.dedent(space).lstrip(), "    ")


def _main(capsys, *args: str) -> SimpleNamespace:
    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    return SimpleNamespace(returncode=code, stdout=out.out, stderr=out.err)


def _assert_message(proc, line: int, key: str, fragments: list[str]) -> None:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    message = proc.stderr.strip()
    assert "\n" not in message, message
    assert message.startswith(f"hpsearch: error: spec.yaml:{line}: {key}: "), message
    for fragment in fragments:
        assert fragment in message, message


@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_bad_condition_gets_one_clear_message_and_writes_nothing(cli, monkeypatch, capsys,
                                                                 case):
    _, space, key, fragments = case
    text = _bad_text(space)
    cli.write_spec(text)
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if MARK in ln)
    monkeypatch.chdir(cli.cwd)
    monkeypatch.setenv("HPSEARCH_RUNS_DIR", str(cli.runs))
    _assert_message(_main(capsys, "validate", "spec.yaml"), line, key, fragments)
    _assert_message(_main(capsys, "submit", "spec.yaml"), line, key, fragments)
    assert sorted(os.listdir(cli.cwd)) == ["spec.yaml"]


SPACE = """
    optimizer: {choices: [sgd, adam]}
    momentum: {low: 0.0, high: 0.9, when: {optimizer: sgd}}
    """


@pytest.mark.parametrize("command,line,key,fragment", [
    ("train {optimizer} {momentum} {params}", 2, "command",
     "placeholder {momentum} names a conditional parameter (when optimizer: 'sgd'), absent "
     "from the trials where that does not hold; pass it with {params}"),
    ("train {optimizer}", 9, "search.space.momentum",
     "conditional parameter 'momentum' (when optimizer: 'sgd') never reaches the command; "
     "add {params} to it"),
])
def test_a_conditional_parameter_has_no_placeholder(cli, command, line, key, fragment):
    """In a trial where it is inactive, `{momentum}` would have no value: it is refused by
    `submit` itself (exit 2, nothing written), and the way that works is named."""
    cli.write_spec(_bad_text(SPACE, command))
    _assert_message(cli("submit", "spec.yaml"), line, key, [fragment])
    assert not cli.runs.exists()


GRID = """
    name: grid-cond
    command: "echo @hpsearch step=0 loss=1 # {lr} {params}"
    objective: {metric: loss}
    search:
      strategy: grid
      space:
        lr: {choices: [0.1, 0.01]}
        optimizer: {choices: [sgd, adam, rmsprop]}
        momentum: {low: 0.0, high: 0.9, step: 0.3, when: {optimizer: [sgd, rmsprop]}}
        nesterov: {choices: [true, false], when: {optimizer: sgd}}
        dampening: {choices: [0.0, 0.1], when: {nesterov: false}}
        beta1: {choices: [0.8, 0.9, 0.99], when: {optimizer: adam}}
        epochs: 3
    """


def _expected_grid() -> list[dict]:
    """The grid written out by hand: only combinations that exist, in spec order."""
    out = []
    for lr in (0.1, 0.01):
        for opt in ("sgd", "adam", "rmsprop"):
            if opt == "adam":
                out += [{"lr": lr, "optimizer": opt, "beta1": b, "epochs": 3}
                        for b in (0.8, 0.9, 0.99)]
                continue
            for mom in (0.0, 0.3, 0.6, 0.9):
                if opt == "rmsprop":
                    out.append({"lr": lr, "optimizer": opt, "momentum": mom, "epochs": 3})
                    continue
                out.append({"lr": lr, "optimizer": opt, "momentum": mom, "nesterov": True,
                            "epochs": 3})
                out += [{"lr": lr, "optimizer": opt, "momentum": mom, "nesterov": False,
                         "dampening": d, "epochs": 3} for d in (0.0, 0.1)]
    return out


def test_grid_holds_exactly_the_combinations_that_exist(tmp_path):
    spec = parse_spec(textwrap.dedent(GRID), "spec.yaml", tmp_path)
    expected = _expected_grid()
    assert len(expected) == 2 * (4 * 3 + 3 + 4) == 38
    assert spec.search.trials == 38
    points = grid_points(spec.search)
    assert len(points) == 38
    assert list(points) == expected  # iteration, with keys in spec order
    assert [list(p) for p in points] == [list(p) for p in expected]
    assert [points[k] for k in range(38)] == expected  # decoding point k, as resume does
    assert points[-1] == expected[-1]
    assert len({json.dumps(p, sort_keys=True) for p in points}) == 38  # no duplicates
    search = GridSearch(spec.search)
    search.rebuild([], {})
    asked = [search.ask() for _ in range(39)]
    assert [a.params for a in asked[:38]] == expected and asked[38] is None


def test_grid_without_conditions_keeps_its_order(tmp_path):
    spec = parse_spec(textwrap.dedent("""
        name: plain
        command: "run {params}"
        objective: {metric: loss}
        search:
          strategy: grid
          space: {a: {choices: [1, 2, 3]}, b: {low: 0, high: 3}, c: x}
        """), "spec.yaml", tmp_path)
    points = grid_points(spec.search)
    assert len(points) == 12
    assert points[5] == {"a": 2, "b": 1, "c": "x"} and list(points)[5] == points[5]


def test_grid_search_runs_only_active_combinations(cli):
    cli.write_spec(GRID)
    plan = cli("plan", "spec.yaml", "--limit", "1", check=0)
    assert "grid: 38 points (conditional: only the combinations that exist); 38 trials" \
        in plan.stdout
    validate = cli("validate", "spec.yaml", check=0)
    line = next(ln for ln in validate.stdout.splitlines() if "momentum:" in ln)
    assert "float in [0.0, 0.9] step 0.3, when optimizer in [" in line, line
    assert "sgd" in line and "rmsprop" in line and "adam" not in line, line
    cli("submit", "spec.yaml", check=0, timeout=300)
    _, rows = read_store(cli.runs, "grid-cond")
    assert [t.params for t in rows] == _expected_grid()
    assert all(t.state == "completed" for t in rows)


TRAIN = """
import json, os, sys
from hpsearch import trial

p = trial.params()
assert p == json.loads(sys.argv[1]) == json.loads(os.environ["HPSEARCH_PARAMS"]), p
with open(os.path.join(os.environ["HPSEARCH_TRIAL_DIR"], "seen.json"), "w") as f:
    json.dump(p, f)
if p["optimizer"] == "sgd":
    loss = (p["momentum"] - 0.9) ** 2 + (0.0 if p["nesterov"] else 0.1 + p["dampening"])
else:
    loss = 0.05 + (p["beta1"] - 0.95) ** 2 + p["warmup"] / 100
print(f"@hpsearch step=0 loss={loss + (p['lr'] - 0.01) ** 2!r}")
"""

TPE = """
    name: {name}
    command: "{{python}} train.py {{params}}"
    objective: {{metric: loss}}
    search:
      strategy: tpe
      trials: {trials}
      parallel: 2
      seed: 7
      space:
        lr: {{low: 0.001, high: 0.1, log: true}}
        optimizer: {{choices: [sgd, adam]}}
        momentum: {{low: 0.0, high: 0.99, when: {{optimizer: sgd}}}}
        nesterov: {{choices: [true, false], when: {{optimizer: sgd}}}}
        dampening: {{low: 0.0, high: 0.5, when: {{nesterov: false}}}}
        beta1: {{low: 0.8, high: 0.999, when: {{optimizer: [adam]}}}}
        warmup: {{value: 5, when: {{optimizer: adam}}}}
        epochs: 3
    """


def _active_keys(p: dict) -> list[str]:
    """The parameters a trial with these values must have."""
    keys = ["lr", "optimizer"]
    if p["optimizer"] == "sgd":
        keys += ["momentum", "nesterov"] + (["dampening"] if p["nesterov"] is False else [])
    else:
        keys += ["beta1", "warmup"]
    return keys + ["epochs"]


def _assert_exact_params(cli, name: str, trials: int) -> list:
    exp, rows = read_store(cli.runs, name)
    assert exp.status == "completed"
    assert [t.id for t in rows] == list(range(trials))
    assert all(t.state == "completed" for t in rows), [(t.id, t.state, t.error) for t in rows]
    for t in rows:
        assert sorted(t.params) == sorted(_active_keys(t.params)), t.params
        seen = json.loads((Path(t.trial_dir) / "seen.json").read_text())
        on_disk = json.loads((Path(t.trial_dir) / "params.json").read_text())
        assert seen == on_disk == t.params, (seen, on_disk, t.params)
    assert {t.params["optimizer"] for t in rows} == {"sgd", "adam"}
    assert len({json.dumps(t.params, sort_keys=True) for t in rows}) == trials
    return rows


@pytest.mark.slow  # long end-to-end run, 10 to 200 s (docs/testing.md#tiers)
def test_tpe_search_gives_each_trial_exactly_its_active_parameters(cli):
    (cli.cwd / "train.py").write_text(TRAIN)
    cli.write_spec(TPE.format(name="tpe-cond", trials=16))
    cli("submit", "spec.yaml", check=0, timeout=300)
    rows = _assert_exact_params(cli, "tpe-cond", 16)
    # after TPE's 10 random startup trials the model sampled both branches' parameters
    assert any("dampening" in t.params for t in rows)
    _printing_shows_absent_parameters(cli, "tpe-cond", rows)


def _printing_shows_absent_parameters(cli, name: str, rows: list) -> None:
    status = cli("status", name, check=0)
    for t in rows:
        if "beta1" in t.params:
            line = next(ln for ln in status.stdout.splitlines() if "beta1=" in ln)
            assert "momentum=" not in line, line
    best = cli("best", name, check=0)
    assert "optimizer=" in best.stdout
    watch = cli("watch", name, "--once", check=0)
    assert f"{len(rows)}/{len(rows)} finished" in watch.stdout, watch.stdout
    exported = cli("export", name, "--format", "csv", check=0).stdout
    table = list(csv.DictReader(io.StringIO(exported)))
    assert len(table) == len(rows)
    for t, rec in zip(rows, table):
        for key in ("momentum", "beta1", "dampening", "warmup"):
            assert (rec[f"param_{key}"] == "") == (key not in t.params), (key, rec)
    records = json.loads(cli("export", name, "--format", "json", check=0).stdout)
    for t, rec in zip(rows, records):
        given = {k[6:]: v for k, v in rec.items() if k.startswith("param_")}
        assert {k: v for k, v in given.items() if k in t.params} == t.params
        assert all(v is None for k, v in given.items() if k not in t.params), given
    out = cli.cwd / "report"
    cli("report", name, "--out", out, check=0, timeout=300)
    assert (out / "report.html").exists()


@pytest.mark.slow  # 8 s in the quick tier under load (2026-11-30; docs/testing.md#tiers)
def test_resumed_conditional_search_rebuilds_its_sampler_and_finishes(cli):
    """The driver is SIGKILLed after 6 trials ended; resume rebuilds the TPE study from the
    store, each trial with only its active parameters' distributions, and asks the rest."""
    (cli.cwd / "train.py").write_text(TRAIN)
    cli.write_spec(TPE.format(name="resume-cond", trials=14))
    crashed = cli("submit", "spec.yaml", env={"HPSEARCH_FAULT": "after_finish:6"},
                  timeout=300)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    _, before = read_store(cli.runs, "resume-cond")
    assert 6 <= len(before) < 14
    resumed = cli("resume", "resume-cond", check=0, timeout=300)
    assert "Traceback" not in resumed.stderr
    rows = _assert_exact_params(cli, "resume-cond", 14)
    assert [t.params for t in rows[:len(before)]] == [t.params for t in before]
    assert all(t.attempt == 1 for t in rows)


def _loss(p: dict) -> float:
    if p["optimizer"] == "sgd":
        return (p["momentum"] - 0.9) ** 2 + (0.0 if p["nesterov"] else 0.1 + p["dampening"])
    return 0.05 + (p["beta1"] - 0.95) ** 2


def _row(trial_id: int, params: dict, values: list, attrs: dict) -> TrialRow:
    return TrialRow(id=trial_id, state="completed", params=params, objective_values=values,
                    attempt=1, created=0.0, started=0.0, finished=1.0, host=None, pid=None,
                    pid_start=None, gpus=None, exit_code=0, error=None, trial_dir="",
                    job_id=None, sampler_attrs=attrs or {})


@pytest.mark.slow  # long end-to-end run, 10 to 200 s (docs/testing.md#tiers)
@pytest.mark.parametrize("strategy", [s.name for s in STRATEGIES
                                      if isinstance(s, SamplerStrategy)])
def test_every_sampler_asks_active_parameters_only_and_resumes(tmp_path, strategy):
    """Define-by-run for each Optuna strategy (CMA-ES, GP and QMC sample what lies outside
    their fixed space independently, as Optuna does): 12 trials asked and told, then a study
    rebuilt from them, as resume does, asks 4 more."""
    spec = parse_spec(textwrap.dedent(TPE.format(name="s", trials=16)).replace(
        "strategy: tpe", f"strategy: {strategy}"), "spec.yaml", tmp_path)
    search = OptunaSearch(spec.search, spec.objectives, STRATEGIES.get(spec.search.strategy))
    search.rebuild([], {})
    rows, study_attrs = [], {}
    for _ in range(12):
        asked = search.ask()
        assert sorted(asked.params) == sorted(_active_keys(asked.params)), asked.params
        study_attrs = asked.study_attrs or study_attrs
        attrs = search.tell(asked.trial_id, "completed", [_loss(asked.params)])
        rows.append(_row(asked.trial_id, asked.params, [_loss(asked.params)], attrs))
    resumed = OptunaSearch(spec.search, spec.objectives, STRATEGIES.get(spec.search.strategy))
    resumed.rebuild(rows, study_attrs)
    for expected in range(12, 16):
        asked = resumed.ask()
        assert asked.trial_id == expected
        assert sorted(asked.params) == sorted(_active_keys(asked.params)), asked.params
        resumed.tell(asked.trial_id, "completed", [_loss(asked.params)])
    assert resumed.ask() is None


def test_tpe_models_the_conditional_parameters_together(tmp_path):
    """Multivariate TPE on a conditional space groups the parameters that occur together:
    momentum and beta1 are in its model, not only the parameters every trial has (plain
    multivariate TPE would model lr and optimizer only, and sample the rest independently)."""
    spec = parse_spec(textwrap.dedent(TPE.format(name="s", trials=16)), "spec.yaml", tmp_path)
    search = OptunaSearch(spec.search, spec.objectives, STRATEGIES.get(spec.search.strategy))
    search.rebuild([], {})
    for _ in range(12):
        asked = search.ask()
        search.tell(asked.trial_id, "completed", [_loss(asked.params)])
    study = search.study
    trial = study._storage.get_trial(study.ask()._trial_id)
    modelled = set(study.sampler.infer_relative_search_space(study, trial))
    assert {"lr", "optimizer", "momentum", "nesterov", "beta1"} <= modelled, modelled


def test_pbt_draws_and_explores_active_parameters_only_and_resumes_the_same(tmp_path):
    """pbt's first draws (search/population.py) and its explore (pbt_policy) on a conditional
    space: each member has exactly its active parameters, after an explore that switches the
    optimizer too; a search rebuilt after 5 members asks the 6th the same as one that was
    not (draws seeded per member)."""
    import random

    from hpsearch.search.pbt_policy import PbtSettings, Population
    from hpsearch.search.population import PopulationSearch
    text = textwrap.dedent(TPE.format(name="s", trials=8)).replace(
        "strategy: tpe", "strategy: pbt\n  perturbation_interval: 2\n  max_resource: 4")
    spec = parse_spec(text, "spec.yaml", tmp_path)
    search = PopulationSearch(spec.search)
    search.rebuild([], {})
    asked = [search.ask() for _ in range(8)]
    assert search.ask() is None
    for a in asked:
        assert sorted(a.params) == sorted(_active_keys(a.params)), a.params
    assert {a.params["optimizer"] for a in asked} == {"sgd", "adam"}
    again = PopulationSearch(spec.search)
    again.rebuild([_row(a.trial_id, a.params, None, {}) for a in asked[:5]], {})
    assert again.ask().params == asked[5].params
    tuned = tuple(p.name for p in spec.search.tuned)
    population = Population(PbtSettings(2, 4, tuned, resample_probability=1.0, seed=1),
                            spec.search.space)
    rng = random.Random(3)
    explored = [population.explore(a.params, rng)[0] for a in asked for _ in range(5)]
    assert {p["optimizer"] for p in explored} == {"sgd", "adam"}
    for params in explored:
        assert sorted(params) == sorted(_active_keys(params)), params

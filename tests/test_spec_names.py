"""What a new user from Optuna writes (issue 24 item 5): `strategy: TPE` is tpe; a name that
is none gets file, line, key, the valid names and the closest one (Optuna's class names too);
a trial that reads its parameters with hpsearch.trial.params() needs no placeholder.
"""

from __future__ import annotations

import pytest

from hpsearch.search.registry import STRATEGIES as _REGISTRY
from tests.helpers import read_store

SPEC = """
name: demo
command: "{command}"
search:
  strategy: {strategy}
  trials: 3
  pruner: {pruner}
  space:
    lr: {{low: 0.1, high: 1.0}}
    width: {{choices: [32, 64]}}
objective: {{metric: loss}}
"""
STRATEGIES = ", ".join(_REGISTRY.names())  # the names the message lists, in order
PRUNERS = ("none, median, percentile, successive_halving, hyperband, wilcoxon, patient, "
           "threshold, asha")


def _spec(cli, command="run {lr} {width}", strategy="tpe", pruner="none"):
    return cli.write_spec(SPEC.format(command=command, strategy=strategy, pruner=pruner))


def test_strategy_and_pruner_names_ignore_case_as_optuna_writes_them(cli):
    _spec(cli, strategy="TPE", pruner="Median")
    out = cli("validate", "spec.yaml", check=0).stdout
    assert "experiment demo: tpe search, 3 trials" in out, out
    assert "pruner: median(" in out, out


@pytest.mark.parametrize("strategy,pruner,line,key,message", [
    ("TPESampler", "none", 4, "search.strategy",
     f"unknown strategy 'TPESampler'; expected one of {STRATEGIES}; did you mean 'tpe' "
     "(Optuna's TPESampler)?"),
    ("NSGA-II", "none", 4, "search.strategy",
     f"unknown strategy 'NSGA-II'; expected one of {STRATEGIES}; did you mean 'nsga2'?"),
    ("NSGA-III", "none", 4, "search.strategy",
     f"unknown strategy 'NSGA-III'; expected one of {STRATEGIES}; did you mean 'nsga3'?"),
    ("NSGAIIISampler", "none", 4, "search.strategy",
     f"unknown strategy 'NSGAIIISampler'; expected one of {STRATEGIES}; did you mean 'nsga3' "
     "(Optuna's NSGAIIISampler)?"),
    ("cma-es", "none", 4, "search.strategy",
     f"unknown strategy 'cma-es'; expected one of {STRATEGIES}; did you mean 'cmaes'?"),
    ("tpe", "MedianPruner", 6, "search.pruner.type",
     f"unknown pruner 'MedianPruner'; expected one of {PRUNERS}; did you mean 'median' "
     "(Optuna's MedianPruner)?"),
    ("tpe", "{type: NopPruner}", 6, "search.pruner.type",
     f"unknown pruner 'NopPruner'; expected one of {PRUNERS}; did you mean 'none' "
     "(Optuna's NopPruner)?"),
])
def test_a_name_that_is_none_gets_the_choices_and_the_closest(cli, strategy, pruner, line, key,
                                                              message):
    _spec(cli, strategy=strategy, pruner=pruner)
    for command in ("validate", "submit"):
        proc = cli(command, "spec.yaml", check=2)
        assert proc.stderr == f"hpsearch: error: spec.yaml:{line}: {key}: {message}\n"
    assert not cli.runs.exists()


TRAIN = """
from hpsearch import trial
p = trial.params()
trial.report(0, loss=(p["lr"] - 0.5) ** 2 + p["width"] / 1000)
"""


def test_a_trial_that_reads_its_params_needs_no_placeholder(cli):
    """`{python} train.py` names no parameter: each trial gets its own from
    hpsearch.trial.params(), and a search runs (it was refused: 'never used in command')."""
    (cli.cwd / "train.py").write_text(TRAIN)
    _spec(cli, command="{python} train.py", strategy="random")
    out = cli("validate", "spec.yaml", check=0).stdout
    assert ("the command names no parameter: the trial reads them with "
            "hpsearch.trial.params() (or $HPSEARCH_PARAMS, params.json)") in out, out
    cli("submit", "spec.yaml", check=0)
    trials = read_store(cli.runs, "demo")[1]
    assert [t.state for t in trials] == ["completed"] * 3
    for t in trials:
        p = t.params
        assert t.objective_values == [pytest.approx((p["lr"] - 0.5) ** 2 + p["width"] / 1000)]


def test_a_command_that_passes_some_parameters_must_pass_all(cli):
    """Where the command names some parameters, one it leaves out is a typo or forgotten:
    still an error, which now names the third way (no placeholder at all)."""
    _spec(cli, command="{python} train.py --lr {lr}")
    proc = cli("validate", "spec.yaml", check=2)
    assert proc.stderr == (
        "hpsearch: error: spec.yaml:9: search.space.width: parameter 'width' is never used in "
        "command; add {width} to it (or {params} to pass all parameters as one JSON argument, "
        "or no parameter placeholder at all if the trial reads them with "
        "hpsearch.trial.params())\n")

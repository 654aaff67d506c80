"""One registry per seam (issue 39): the spec schema, `validate`, the CLI and the docs take their
names from the registries, and a piece added to a registry is accepted everywhere with no
other edit. The launch registries have their own file (tests/test_launch_registry.py)."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from hpsearch.driver import session
from hpsearch.errors import BadInput
from hpsearch.executors.local import LocalExecutor
from hpsearch.executors.registry import EXECUTORS, ExecutorEntry, chosen
from hpsearch.preflight import parse_spec
from hpsearch.preflight import vocabulary as vocabulary_module
from hpsearch.search.registry import STRATEGIES, SamplerStrategy
from hpsearch.spec.vocabulary import ExecutorFacts, StrategyFacts

DOC = (Path(__file__).resolve().parent.parent / "docs" / "spec.md").read_text()

SPEC = """
name: reg
command: "echo {{x}}"
search:
  strategy: {strategy}
  trials: 3
  space:
    x: {{type: float, low: 0, high: 1}}
objective: {{metric: loss}}
executor: {executor}
"""


def _spec(tmp_path: Path, strategy: str = "tpe", executor: str = "local"):
    return parse_spec(textwrap.dedent(SPEC.format(strategy=strategy, executor=executor)),
                      "spec.yaml", tmp_path, tmp_path / "runs")


@pytest.fixture
def fresh_vocabulary():
    """The vocabulary is read once per process; a test that adds a piece reads it again."""
    vocabulary_module.vocabulary.cache_clear()
    yield
    vocabulary_module.vocabulary.cache_clear()


def _docs_row_names(heading: str) -> list[str]:
    """The first column of the table under `heading` in docs/spec.md."""
    section = DOC.split(heading, 1)[1].split("\n#", 1)[0]
    return re.findall(r"^\| `([a-z0-9]+)` \|", section, re.M)


def test_the_docs_strategy_table_lists_the_registry_in_its_order():
    assert _docs_row_names("### Strategies") == list(STRATEGIES.names())


def test_the_docs_name_every_strategy_and_executor_type_where_the_keys_are_listed():
    strategies = re.search(r"\| `strategy` \| yes \| string \| (.*?) in any case", DOC).group(1)
    assert re.findall(r"`([a-z0-9]+)`", strategies) == list(STRATEGIES.names())
    assert re.search(r"strategy: tpe +# (.*)", DOC).group(1).split(" | ") == \
        list(STRATEGIES.names())
    types = re.search(r"\| `type` \| (.*?) \| `local` \|", DOC).group(1)
    assert re.findall(r"`([a-z]+)`", types) == list(vocabulary_module.vocabulary()
                                                    .executor_types())


def test_facts_in_the_docs_agree_with_the_registry():
    """docs/spec.md: 'Every strategy except `cmaes` accepts several objectives.'"""
    single = [s.name for s in STRATEGIES if not s.facts.multi_objective]
    assert single == ["cmaes"]
    assert "Every strategy except `cmaes` accepts several objectives." in DOC


def test_an_unknown_strategy_names_the_registry_in_the_message(tmp_path):
    with pytest.raises(BadInput) as err:
        _spec(tmp_path, strategy="tpee")
    assert f"expected one of {', '.join(STRATEGIES.names())}" in str(err.value)
    assert "did you mean 'tpe'" in str(err.value)


def test_a_strategy_added_to_the_registry_is_a_strategy_everywhere(tmp_path, monkeypatch,
                                                                    fresh_vocabulary):
    """A new Optuna sampler is one entry: the spec accepts its name, `plan`'s facts come
    from it, and its search samples with it."""
    entry = SamplerStrategy(StrategyFacts("halton", learns=False, seeded_order=True),
                            lambda s, a: s.QMCSampler(
                                qmc_type="halton", seed=a.seed, scramble=a.seed is not None,
                                warn_asynchronous_seeding=False),
                            needs=(("scipy", "pip install scipy"),), fixed_seed=True)
    monkeypatch.setitem(STRATEGIES._entries, "halton", entry)
    spec = _spec(tmp_path, strategy="halton")
    assert spec.search.strategy == "halton"
    assert session.asks_ahead(spec.search)  # learns=False: the driver may ask ahead
    from hpsearch.search import make_search
    search = make_search(spec.search, spec.objectives)
    search.rebuild([], {})
    asked = search.ask()
    assert asked is not None and 0 <= asked.params["x"] <= 1
    assert type(search.study.sampler).__name__ == "QMCSampler"


def test_a_strategy_that_needs_a_missing_package_is_refused_at_its_line(tmp_path, monkeypatch):
    monkeypatch.setattr(STRATEGIES.get("tpe"), "needs", (("no_such_module_x", "pip x"),))
    with pytest.raises(BadInput) as err:
        _spec(tmp_path)
    assert err.value.line == 5 and "needs the Python package no_such_module_x" in str(err.value)


class _Twice(LocalExecutor):
    """A new executor: the local one under another name (what a plugin package would add)."""

    built: list[str] = []

    @classmethod
    def from_spec(cls, spec, store, ask_ahead):
        cls.built.append(spec.name)
        return super().from_spec(spec, store, ask_ahead)


def test_an_executor_added_to_the_registry_is_chosen_by_its_name(tmp_path, monkeypatch,
                                                                 fresh_vocabulary):
    monkeypatch.setitem(EXECUTORS._entries, "twice", ExecutorEntry(
        ExecutorFacts("twice"), f"{__name__}:_Twice"))
    spec = _spec(tmp_path, executor="twice")
    assert chosen(spec.executor).facts.name == "twice"
    executor = session.make_executor(spec)
    try:
        assert isinstance(executor, _Twice) and _Twice.built == ["reg"]
    finally:
        executor.close()


def test_an_unknown_executor_lists_the_registered_types(tmp_path):
    with pytest.raises(BadInput) as err:
        _spec(tmp_path, executor="slurmm")
    assert "unknown executor 'slurmm'; expected one of local, slurm" in str(err.value)


def test_pilots_refine_the_slurm_type_and_the_local_override_runs_them_here(tmp_path):
    """`executor: {type: slurm, pilots: ...}` chooses the pilots' executor; `submit
    --executor local` the local one for the same spec."""
    spec = _spec(tmp_path, executor="{type: slurm, pilots: true}")
    assert chosen(spec.executor).facts.name == "pilots"
    assert chosen(session.with_executor(spec, "local").executor).facts.name == "local"


def test_the_docs_list_each_strategy_s_own_settings_with_their_defaults():
    section = DOC.split("### Strategies", 1)[1].split("\n#", 1)[0]
    rows = {re.match(r"\| `([a-z0-9]+)` \|", line).group(1): line
            for line in section.splitlines() if re.match(r"\| `[a-z0-9]+` \|", line)}
    for entry in STRATEGIES:
        settings = rows[entry.name].split(" | ")[2]
        assert re.findall(r"`([a-z_]+)` \(", settings) == [o.name for o in entry.facts.options]
        for option in entry.facts.options:
            default = "required" if option.required else option.default
            assert f"`{option.name}` ({default}" in settings or \
                f"; {default})" in settings, (option, settings)


SETTINGS = """
name: opts
command: "echo {{x}}"
search:
  strategy: {strategy}
  trials: 4
  seed: 3
  {setting}
  space:
    x: {{type: float, low: 0, high: 1}}
objective: {{metric: loss}}
"""


def _with(tmp_path: Path, strategy: str, setting: str):
    return parse_spec(textwrap.dedent(SETTINGS.format(strategy=strategy, setting=setting)),
                      "spec.yaml", tmp_path, tmp_path / "runs")


@pytest.mark.parametrize("strategy, setting, attribute, value", [
    ("tpe", "n_startup_trials: 3", "_n_startup_trials", 3),
    ("qmc", "qmc_type: halton", "_qmc_type", "halton"),
    ("nsga2", "population_size: 8", "_population_size", 8),
    ("nsga3", "population_size: 8", "_population_size", 8),
])
def test_a_strategy_s_setting_reaches_its_sampler(tmp_path, strategy, setting, attribute,
                                                  value):
    from hpsearch.search import make_search
    spec = _with(tmp_path, strategy, setting)
    search = make_search(spec.search, spec.objectives)
    search.rebuild([], {})
    assert search.ask() is not None
    assert getattr(search.study.sampler, attribute) == value


def test_a_strategy_s_defaults_are_optuna_s(tmp_path):
    spec = _with(tmp_path, "tpe", "parallel: 1")
    assert spec.search.option("n_startup_trials") == 10


@pytest.mark.parametrize("strategy, setting, message", [
    ("tpe", "qmc_type: halton", "search.qmc_type: 'qmc_type' is a setting of strategy qmc, "
                                "not of tpe"),
    ("qmc", "qmc_type: faure", "search.qmc_type: expected one of sobol, halton; got 'faure'"),
    ("tpe", "n_startup_trials: -1", "search.n_startup_trials: expected an integer >= 0; got -1"),
    ("random", "n_startup_trial: 3", "unknown key 'n_startup_trial'; did you mean "
                                     "'n_startup_trials'?"),
])
def test_a_bad_setting_names_its_key_and_line(tmp_path, strategy, setting, message):
    with pytest.raises(BadInput) as err:
        _with(tmp_path, strategy, setting)
    assert message in str(err.value) and err.value.line == 8, str(err.value)


def test_a_grid_s_enqueue_names_the_registry_s_other_strategies(tmp_path):
    """The message that refuses `enqueue` with a grid lists the strategies that take it,
    from the registry (nsga3 and pbt among them), not a list written again."""
    text = textwrap.dedent(SPEC.format(strategy="grid", executor="local")).replace(
        "x: {type: float, low: 0, high: 1}", "x: {choices: [0.1, 0.2]}").replace(
        "  trials: 3\n", "  enqueue: [{x: 0.1}]\n")
    with pytest.raises(BadInput) as err:
        parse_spec(text, "spec.yaml", tmp_path, tmp_path / "runs")
    others = ", ".join(name for name in STRATEGIES.names() if name != "grid")
    assert err.value.key == "search.enqueue", err.value
    assert f"enqueue is for the other strategies ({others})" in str(err.value)
    assert "nsga3" in others and "pbt" in others

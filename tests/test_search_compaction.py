"""A random search keeps only its trials in flight in its Optuna study (issue 42 item 5: the
in-memory study was about 1 KB a trial of the driver's memory growth over 100,000 trials).
RandomSampler uses its generator only, so a study compacted every COMPACT_EVERY trials told
asks exactly the points an uncompacted one asks; ids stay dense, a trial in flight across a
compaction is told as before, and a resumed search (rebuild) keeps only its running trials."""

from __future__ import annotations

import textwrap

import pytest

from hpsearch.preflight import parse_spec
from hpsearch.search import make_search, optuna_search
from hpsearch.search.optuna_search import OptunaSearch
from hpsearch.search.registry import STRATEGIES
from hpsearch.store.rows import TrialRow

SPEC = """
name: r
command: "true"
search:
  strategy: random
  trials: 40
  parallel: 3
  seed: 7
  space:
    x: {low: 0.0, high: 1.0}
    n: {low: 1, high: 50, type: int}
    c: {choices: [a, b, c]}
objective: {metric: loss}
"""


def _spec(tmp_path, text=SPEC):
    return parse_spec(textwrap.dedent(text), "spec.yaml", tmp_path)


def _run(search, sizes: list[int] | None = None) -> list[tuple[int, dict]]:
    """Three in flight: ask three, then tell the oldest and ask the next, to the end."""
    asked, flight = [], []
    while True:
        while len(flight) < 3 and (got := search.ask()) is not None:
            asked.append((got.trial_id, got.params))
            flight.append(got.trial_id)
        if not flight:
            return asked
        tid = flight.pop(0)
        search.tell(tid, "completed" if tid % 4 else "failed", [tid * 0.5] if tid % 4 else None)
        if sizes is not None:
            inner = getattr(search, "inner", search)
            sizes.append(len(inner.built_study().get_trials(deepcopy=False)))


@pytest.mark.parametrize("wrapped", [False, True], ids=["optuna", "ordered (seeded, parallel)"])
def test_a_compacted_random_search_asks_the_same_points(tmp_path, monkeypatch, wrapped):
    spec = _spec(tmp_path)

    def build():
        if wrapped:
            return make_search(spec.search, spec.objectives)
        return OptunaSearch(spec.search, spec.objectives, STRATEGIES.get("random"))

    monkeypatch.setattr(optuna_search, "COMPACT_EVERY", 10**9)
    whole = build()
    whole.rebuild([], {})
    expected = _run(whole)
    monkeypatch.setattr(optuna_search, "COMPACT_EVERY", 5)
    compacted, sizes = build(), []
    compacted.rebuild([], {})
    assert _run(compacted, sizes) == expected
    assert [tid for tid, _ in expected] == list(range(40))
    assert max(sizes) <= 3 + 5, sizes  # in flight, and those told since the last compaction
    assert max(sizes) < 40


def _row(tid: int, state: str, params: dict) -> TrialRow:
    return TrialRow(id=tid, state=state, params=params,
                    objective_values=[1.0] if state == "completed" else None, attempt=1,
                    created=0.0, started=0.0, finished=1.0, host=None, pid=None,
                    pid_start=None, gpus=None, exit_code=0, error=None, trial_dir="",
                    job_id=None, sampler_attrs={})


def test_a_resumed_random_search_keeps_its_running_trials_only(tmp_path):
    spec = _spec(tmp_path)
    search = OptunaSearch(spec.search, spec.objectives, STRATEGIES.get("random"))
    params = {"x": 0.5, "n": 3, "c": "a"}
    rows = [_row(i, "running" if i in (4, 6) else "completed", params) for i in range(8)]
    search.rebuild(rows, {})
    assert len(search.built_study().get_trials(deepcopy=False)) == 2
    assert search.ask().trial_id == 8
    assert search.tell(6, "completed", [0.25]) is not None
    assert search.tell(6, "completed", [0.25]) is None  # told already: nothing to tell
    assert search.tell(4, "failed", None) is not None
    # in the study's order: trial 4 (failed), trial 6 (completed), trial 8 (asked)
    assert [t.state.name for t in search.built_study().get_trials(deepcopy=False)] == [
        "FAIL", "COMPLETE", "RUNNING"]


def test_a_model_based_search_keeps_every_trial(tmp_path, monkeypatch):
    """TPE learns from every trial: never compacted."""
    monkeypatch.setattr(optuna_search, "COMPACT_EVERY", 2)
    spec = _spec(tmp_path, SPEC.replace("strategy: random", "strategy: tpe"))
    search = OptunaSearch(spec.search, spec.objectives, STRATEGIES.get("tpe"))
    search.rebuild([], {})
    for _ in range(6):
        got = search.ask()
        search.tell(got.trial_id, "completed", [0.1])
    assert len(search.built_study().get_trials(deepcopy=False)) == 6

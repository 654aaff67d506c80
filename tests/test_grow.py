"""Growing and seeding a search (issue 15, item 5): `resume --trials N`, enqueued points
(`search.enqueue`, `hpsearch enqueue`), `search.warm_start` and `search.timeout`, on real
local-executor searches."""

from __future__ import annotations

import signal
import time

import pytest

from tests.helpers import event_kinds, read_store

SPEC = """
name: {name}
command: >-
  true {{opt}}; sleep {sleep};
  awk -v x={{x}} 'BEGIN {{ printf "@hpsearch step=0 loss=%.17g\\n", (x - 0.7)^2 }}'
search:
  strategy: tpe
  trials: {trials}
  parallel: 1
  seed: 1
{extra}
  space:
    x: {{low: 0.0, high: 1.0}}
    opt: {{choices: [a, b]}}
objective: {{metric: loss}}
executor: {{type: local}}
"""


def _spec(cli, name: str, trials: int = 3, sleep: float = 0, extra: str = ""):
    return cli.write_spec(SPEC.format(name=name, trials=trials, sleep=sleep, extra=extra),
                          f"{name}.yaml")


def _params(cli, name: str) -> list[dict]:
    return [t.params for t in read_store(cli.runs, name)[1]]


@pytest.mark.slow  # 4.3 s in the quick tier (2026-11-30): over its 3 s rule
def test_resume_trials_grows_a_finished_search_and_refuses_to_shrink_below_it(cli):
    cli("submit", _spec(cli, "grow"), "--no-tui", check=0)
    out = cli("resume", "grow", "--trials", "5", "--no-tui", check=0).stdout
    assert "resume --trials 5: 5 trials in all" in out
    exp, trials = read_store(cli.runs, "grow")
    assert exp.trials_requested == 5 and [t.state for t in trials] == ["completed"] * 5
    assert "experiment grow: completed, tpe, 5/5 finished" in cli("status", "grow").stdout
    proc = cli("resume", "grow", "--trials", "4", check=2)
    assert "at least the 5 already asked" in proc.stderr
    proc = cli("resume", "grow", "--trials", str(10**30), check=2)  # no integer overflow
    assert "at most 1000000000" in proc.stderr


@pytest.mark.slow  # over 5 s in the quick tier on 2026-11-28 (docs/testing.md#tiers)
def test_resume_trials_reaches_a_running_driver(cli):
    # trials of 4 s: a fresh-clone run under the suite's load saw 2 of 1 s end before
    # `resume` started, and resume then ran the search itself
    driver = cli.popen("submit", _spec(cli, "live", trials=2, sleep=4.0), "--no-tui")
    try:
        deadline = time.monotonic() + 30
        while not (cli.runs / "live" / "store.sqlite").exists():
            assert time.monotonic() < deadline
            time.sleep(0.1)
        out = cli("resume", "live", "--trials", "4", check=0).stdout
        assert "asked its running driver" in out and "4 trials in all" in out
        assert driver.wait(60) == 0
    finally:
        if driver.poll() is None:
            driver.send_signal(signal.SIGKILL)
    assert len(read_store(cli.runs, "live")[1]) == 4
    assert "extended" in event_kinds(cli.runs, "live")


@pytest.mark.slow  # 3.2 s in the quick tier (2026-11-30): over its 3 s rule
def test_enqueued_points_run_first_once_each_even_across_a_crash(cli):
    spec = _spec(cli, "enq", trials=3, extra="  enqueue:\n    - {x: 0.25}\n"
                                              "    - {x: 0.5, opt: b}")
    cli("submit", spec, "--no-tui", check=0)
    params = _params(cli, "enq")
    assert params[0]["x"] == 0.25 and params[1] == {"x": 0.5, "opt": "b"}
    assert params[0]["opt"] in ("a", "b") and params[2]["x"] not in (0.25, 0.5)

    out = cli("enqueue", "enq", "x=0.125", "opt=a", check=0).stdout
    assert "`hpsearch resume enq` runs it first" in out
    # killed after the point's trial is stored, before its request file is removed
    cli("resume", "enq", "--no-tui", env={"HPSEARCH_FAULT": "after_insert:1"}, check=-9)
    cli("resume", "enq", "--no-tui", check=0)
    params = _params(cli, "enq")
    assert params[3] == {"x": 0.125, "opt": "a"}  # beyond the 3 trials: the total grew by one
    assert sum(p == {"x": 0.125, "opt": "a"} for p in params) == 1, params
    assert len(params) == 4 and not list((cli.runs / "enq" / "requests").glob("*.json"))
    assert sum(p["x"] == 0.25 for p in params) == 1  # the spec's points are not asked again


@pytest.mark.slow  # 3.8 s in the quick tier (2026-11-30): over its 3 s rule
def test_a_bad_enqueued_point_is_exit_2(cli):
    cli("submit", _spec(cli, "badq"), "--no-tui", check=0)
    for point, message in (("x=3", "x: expected a number in [0.0, 1.0]; got 3.0"),
                           ("xx=1", "unknown parameter 'xx'; did you mean 'x'?"),
                           ("opt=c", "'c' is not one of the choices ['a', 'b']"),
                           ("x", "expected KEY=VALUE")):
        proc = cli("enqueue", "badq", point, check=2)
        assert message in proc.stderr, proc.stderr
    assert not list((cli.runs / "badq" / "requests").glob("*.json"))
    proc = cli("submit", _spec(cli, "badspec", extra="  enqueue:\n    - {x: 2}"), check=2)
    assert "badspec.yaml:11: search.enqueue[0].x: expected a number in [0.0, 1.0]" in proc.stderr


WARM_FROM = """
name: lowx
command: >-
  awk -v x={x} 'BEGIN { printf "@hpsearch step=0 loss=%.17g\\n", (x - 0.7)^2 }'
search:
  strategy: grid
  space:
    x: {low: 0.0, high: 1.0, step: 0.1}
objective: {metric: loss}
executor: {type: local}
"""


@pytest.mark.slow  # 3.3 s in the quick tier (2026-11-30): over its 3 s rule
def test_warm_start_feeds_earlier_trials_to_the_sampler(cli):
    cli("submit", cli.write_spec(WARM_FROM, "lowx.yaml"), "--no-tui", check=0)
    # the same seeded search, cold and warm: TPE's first trials are random when cold (10
    # startup trials), and drawn from the model of lowx's 11 trials (best at x=0.7) when warm
    cli("submit", _spec(cli, "cold", trials=5), "--no-tui", check=0)
    out = cli("submit", _spec(cli, "warm", trials=5, extra="  warm_start: [lowx]"),
              "--no-tui", check=0).stdout
    assert "warm start: 11 of 11 completed trials of lowx" in out
    warm = [p["x"] for p in _params(cli, "warm")]
    cold = [p["x"] for p in _params(cli, "cold")]
    print("warm x:", [round(x, 3) for x in warm], "cold x:", [round(x, 3) for x in cold])
    assert abs(sorted(warm)[2] - 0.7) < 0.15 < abs(sorted(cold)[2] - 0.7), (warm, cold)
    assert [t.id for t in read_store(cli.runs, "warm")[1]] == [0, 1, 2, 3, 4]
    proc = cli("submit", _spec(cli, "typo", extra="  warm_start: [lowxx]"), check=2)
    assert "no experiment 'lowxx'" in proc.stderr and "did you mean 'lowx'?" in proc.stderr


def test_timeout_stops_asking_for_trials_and_the_search_ends_completed(cli):
    spec = _spec(cli, "timed", trials=50, sleep=0.3, extra="  timeout: 1.5")
    out = cli("submit", spec, "--no-tui", check=0).stdout
    exp, trials = read_store(cli.runs, "timed")
    assert exp.status == "completed" and 1 <= len(trials) < 10, len(trials)
    assert "search.timeout (1.5 s) reached after" in out
    assert "timeout" in event_kinds(cli.runs, "timed")


def test_validate_says_what_the_search_section_asks_for(cli):
    spec = _spec(cli, "said", extra="  timeout: \"1:00:00\"\n  enqueue:\n    - {x: 0.5}\n"
                                     "  max_failures: {first: 3, fraction: 0.5}")
    out = cli("validate", spec, check=0).stdout
    assert "max_failures: stop after 3 failures with none completed, stop when more than " \
           "0.5 of finished trials failed" in out
    assert "timeout: no new trial 3600 s after the experiment's creation" in out
    assert "enqueue: 1 point(s) asked first: {x: 0.5}" in out

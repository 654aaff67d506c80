"""Asking ahead on the local executor: with a sampler that does not learn from results, the
driver stores the next trial while every slot is busy, and the executor starts it the moment
a slot frees (hpsearch.driver.session.asks_ahead). It must run the same trials as a search that asks
only when a slot is free, and a driver killed or stopped while a trial waits loses nothing."""

from __future__ import annotations

import signal
from collections import Counter

import pytest

from hpsearch.driver.session import asks_ahead
from hpsearch.preflight import load_spec
from tests.helpers import read_store, wait_for_trials

SPEC = """
name: {name}
command: 'echo "{{trial_id}} $HPSEARCH_ATTEMPT" >> "{runlog}"; sleep {sleep}; echo "@hpsearch step=0 loss={{x}}"'
search:
  strategy: {strategy}
  trials: {trials}
  parallel: {parallel}
  seed: 7
{extra}  space:
    x: {{low: 0.0, high: 1.0}}
objective: {{metric: loss}}
"""


def _spec(cli, name, strategy="random", trials=8, parallel=2, sleep=0.2, extra=""):
    runlog = cli.cwd / f"{name}.runs"
    return cli.write_spec(SPEC.format(name=name, strategy=strategy, trials=trials,
                                      parallel=parallel, sleep=sleep, extra=extra,
                                      runlog=runlog), f"{name}.yaml"), runlog


@pytest.mark.slow  # 4.1 s in the quick tier (2026-11-30): over its 3 s rule
def test_asking_ahead_runs_the_same_trials_and_the_next_waits_for_a_free_slot(cli):
    ahead, _ = _spec(cli, "ahead")
    # search.timeout turns asking ahead off (a trial could wait past it): the same search
    # asked only when a slot is free
    plain, _ = _spec(cli, "plain", extra="  timeout: 3600\n")
    cli("submit", ahead, check=0)
    cli("submit", plain, check=0)
    _, rows = read_store(cli.runs, "ahead")
    _, plain_rows = read_store(cli.runs, "plain")
    assert [(t.id, t.params) for t in rows] == [(t.id, t.params) for t in plain_rows]
    assert all(t.state == "completed" and t.attempt == 1 for t in rows)
    # Never more than `parallel` trials ran at once ...
    for t in rows:
        assert sum(1 for o in rows if o.started <= t.started < o.finished) <= 2
    # ... and trials were stored before a slot was free for them: the third was asked
    # while the first two still ran, and started once one of them had ended.
    first_end = min(t.finished for t in rows[:2])
    assert rows[2].created < first_end <= rows[2].started, \
        [(t.id, t.created, t.started, t.finished) for t in rows]
    plain_third = plain_rows[2]
    assert plain_third.created >= min(t.finished for t in plain_rows[:2]) - 0.05


@pytest.mark.slow  # over 5 s in the quick tier on 2026-11-28 (docs/testing.md#tiers)
def test_driver_killed_while_a_trial_waits_resumes_it_as_its_first_attempt(cli):
    spec, runlog = _spec(cli, "killed", trials=3, parallel=1, sleep=1.5)
    proc = cli.popen("submit", spec)
    rows = wait_for_trials(cli, "killed", lambda rows: len(rows) == 2 and rows[0].state == "running")
    assert rows[1].state == "submitting" and rows[1].pid is None  # waiting, not started
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    cli("resume", "killed", check=0, timeout=120)
    exp, rows = read_store(cli.runs, "killed")
    assert exp.status == "completed"
    assert [(t.state, t.attempt) for t in rows] == [("completed", 1)] * 3
    runs = Counter(line for line in runlog.read_text().splitlines())
    assert runs == Counter(["0 1", "1 1", "2 1"]), runs  # each ran once, as attempt 1


@pytest.mark.slow  # 3.6 s in the quick tier (2026-11-30): over its 3 s rule
def test_stopping_withdraws_a_waiting_trial_that_resume_launches_as_its_first_attempt(cli):
    go = cli.cwd / "go"  # the trials sleep 60 s until it exists
    spec, runlog = _spec(cli, "stopped", trials=3, parallel=1,
                         sleep=f'"$(test -e {go} && echo 0.1 || echo 60)"')
    proc = cli.popen("submit", spec)
    wait_for_trials(cli, "stopped", lambda rows: len(rows) == 2 and rows[0].state == "running")
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 1
    _, rows = read_store(cli.runs, "stopped")
    assert [t.state for t in rows] == ["cancelled", "queued"]
    log = cli.runs / "stopped" / "trials" / "00001" / "stdout.log"  # made ready, never run
    assert log.read_bytes() == b"" and rows[1].pid is None and rows[1].started is None
    assert runlog.read_text().split("\n")[:1] == ["0 1"] and "1 1" not in runlog.read_text()
    go.touch()
    cli("resume", "stopped", check=0, timeout=120)
    _, rows = read_store(cli.runs, "stopped")
    assert [(t.state, t.attempt) for t in rows] == [("completed", 2), ("completed", 1),
                                                    ("completed", 1)]


@pytest.mark.parametrize("strategy, extra, expected", [
    ("random", "", True), ("grid", "", True), ("qmc", "", True),
    ("tpe", "", False), ("cmaes", "", False), ("nsga2", "", False),
    ("random", "  reproducible: true\n", False),
    ("random", "  timeout: 60\n", False),
    ("random", "  pruner: {type: asha, mode: promotion, max_resource: 9}\n", False),
    ("pbt", "  perturbation_interval: 2\n  max_resource: 4\n", False),
    ("pb2", "  perturbation_interval: 2\n  max_resource: 4\n", False),
])
def test_only_searches_whose_trials_cannot_change_ask_ahead(cli, strategy, extra, expected):
    """A sampler that learns from results would ask with one result fewer; promotion
    decides at each free slot, and so does a population's (pbt, pb2: which paused member
    runs next, chosen while the last one still ran, made a one-slot search killed and
    resumed run its members in another order than one never killed); a reproducible
    search asks in a fixed order; a search timeout could pass while the trial waits."""
    spec, _ = _spec(cli, f"a-{strategy}", strategy=strategy, extra=extra)
    if strategy == "grid":
        spec.write_text(spec.read_text().replace("{low: 0.0, high: 1.0}",
                                                 "{choices: [0.1, 0.2]}"))
    assert asks_ahead(load_spec(spec, cli.runs).search) is expected


def test_a_trial_asked_ahead_costs_two_store_commits_and_its_start_follows_the_last_end(
        cli, monkeypatch):
    """Its insert, then its start stored in the commit of the end that freed its slot (the
    local executor reports that exit before the start): 2 commits a trial, not 3. Each start
    is recorded at or after that end, so the store never shows more than `parallel` trials
    running at once."""
    from hpsearch.driver import session
    from hpsearch.store.store import Store

    commits = Counter()
    opened = Store.__init__

    def counting(self, *args, **kwargs):
        opened(self, *args, **kwargs)
        self.db.conn.set_trace_callback(lambda sql: commits.update([sql.strip() == "COMMIT"]))

    monkeypatch.setattr(Store, "__init__", counting)
    path, _ = _spec(cli, "commits", trials=30, parallel=3, sleep=0.05)
    spec, _ = session.new_experiment(path, cli.runs, None, False)
    assert session.drive(spec, True, lambda line: None) == 0
    _, rows = read_store(cli.runs, "commits")
    assert [t.state for t in rows] == ["completed"] * 30
    assert commits[True] <= 2 * 30 + 10, commits  # + creating, finishing, a few lone starts
    for t in rows:
        assert sum(1 for o in rows if o.started <= t.started < o.finished) <= 3

"""`hpsearch finish`: after an ASHA promotion search, the best paused trials go on from their
checkpoints to max_resource, on the local executor, through the real CLI; with or without a
running driver, and never twice."""

from __future__ import annotations

import json

import pytest

from tests.helpers import read_store, wait_for_trials
from tests.promotion_search import attempts, promotion_spec


def _paused_by_value(runs, name) -> list[tuple[float, int]]:
    """(value at the rung it paused at, trial id) of every paused trial, best first: that
    value is its last report (rungs end a segment)."""
    _, trials = read_store(runs, name)
    out = []
    for t in trials:
        if t.state == "paused":
            lines = (runs / name / "trials" / f"{t.id:05d}" / "metrics.jsonl").read_text()
            out.append((json.loads(lines.splitlines()[-1])["loss"], t.id))
    return sorted(out)


@pytest.mark.slow  # over 5 s in the quick tier on 2026-11-28 (docs/testing.md#tiers)
def test_finish_top_2_trains_the_2_best_paused_trials_to_max_resource_once(cli):
    cli("submit", promotion_spec(cli, "fin"), check=0)
    before = attempts(cli.runs, "fin")
    ranked = _paused_by_value(cli.runs, "fin")
    best2 = [tid for _, tid in ranked[:2]]
    assert len(ranked) >= 4, ranked

    done = cli("finish", "fin", "--top", "2", "--quiet", check=0)
    assert "no driver runs; starting one" in done.stdout, done.stdout
    exp, trials = read_store(cli.runs, "fin")
    by_id = {t.id: t for t in trials}
    after = attempts(cli.runs, "fin")
    for tid in best2:
        t = by_id[tid]
        x = t.params["x"]
        assert t.state == "completed" and t.objective_values == [x + 1 / 9], t
        last = after[tid][-1]
        assert (last["budget"], last["state"]) == (9, "completed")
        events = cli("events", "fin", "--trial", str(tid), check=0).stdout
        assert f"attempt {last['attempt']}: finished by `hpsearch finish` from rung" in events
        assert len(after[tid]) == len(before[tid]) + 1  # one new segment, to the end
        reported = (cli.runs / "fin" / "trials" / f"{tid:05d}" / "metrics.jsonl").read_text()
        assert [json.loads(r)["step"] for r in reported.splitlines()] == list(range(9))
    for tid, rows in before.items():  # nothing else ran
        if tid not in best2:
            assert after[tid] == rows, tid
    assert exp.status == "completed"
    shown = cli("status", "fin", check=0).stdout
    for tid in best2:
        row = next(line.split() for line in shown.splitlines() if line.split()[:1] == [str(tid)])
        assert row[1] == "completed" and row[4] == "9", row
    top = json.loads(cli("best", "fin", "-k", "9", "--json", check=0).stdout)
    assert set(best2) <= {t["trial"] for t in top}

    again = cli("finish", "fin", "--top", "2", check=0)  # idempotent: nothing runs again
    assert "sent on by an earlier finish (now completed)" in again.stdout
    assert "nothing to run" in again.stdout
    assert attempts(cli.runs, "fin") == after
    assert not list((cli.runs / "fin" / "requests").glob("*.json"))

    third = cli("finish", "fin", "--top", "3", "--quiet", check=0)  # only the next one runs
    assert f"trial {ranked[2][1]}: loss=" in third.stdout
    final = attempts(cli.runs, "fin")
    assert [tid for tid in final if final[tid] != after[tid]] == [ranked[2][1]]

    refused = cli("finish", "fin", "--trial", str(_completed(trials)), check=2)
    assert "not paused at a rung: there is nothing to finish" in refused.stderr
    assert "no trial 99" in cli("finish", "fin", "--trial", "99", check=2).stderr


def _completed(trials) -> int:
    """A trial the search itself completed (never paused there)."""
    return next(t.id for t in trials if t.state == "completed"
                and "finish" not in t.pruner_attrs)


@pytest.mark.slow  # 4.0 s in the quick tier (2026-11-30): over its 3 s rule
def test_a_driver_killed_after_the_first_finish_segment_is_written_runs_none_twice(cli):
    """Killed right after the first of 2 finish segments is committed (its request file is
    still there): the next `finish` runs the second and the first once."""
    cli("submit", promotion_spec(cli, "crash"), check=0)
    before = attempts(cli.runs, "crash")
    best2 = [tid for _, tid in _paused_by_value(cli.runs, "crash")[:2]]
    killed = cli("finish", "crash", "--top", "2", "--quiet",
                 env={"HPSEARCH_FAULT": "after_promotion:1"})
    assert killed.returncode == -9, killed.stderr
    assert list((cli.runs / "crash" / "requests").glob("finish-*.json"))
    again = cli("finish", "crash", "--top", "2", "--quiet", check=0)
    assert "sent on by an earlier finish" in again.stdout, again.stdout
    _, trials = read_store(cli.runs, "crash")
    after = attempts(cli.runs, "crash")
    for t in trials:
        if t.id in best2:
            assert t.state == "completed" and t.objective_values == [t.params["x"] + 1 / 9]
            assert len(after[t.id]) == len(before[t.id]) + 1, after[t.id]
        else:
            assert after[t.id] == before[t.id]
    assert not list((cli.runs / "crash" / "requests").glob("*.json"))


@pytest.mark.slow  # over 7 s in the quick tier (docs/testing.md#tiers)
def test_a_running_driver_takes_the_finish_request(cli):
    """finish beside a running search: the driver sends a trial that the search would never
    promote (the worst) on to max_resource, and the search goes on to its end."""
    spec = promotion_spec(cli, "live", parallel=1, pause=0.3)
    cli("submit", spec, "--detach", check=0)
    rows = wait_for_trials(cli, "live", lambda rows: [
        t for t in rows if t.params["x"] == 8 and t.state == "paused"], timeout=120)
    worst = next(t for t in rows if t.params["x"] == 8)
    asked = cli("finish", "live", "--trial", str(worst.id), check=0)
    assert "its running driver (pid" in asked.stdout, asked.stdout
    wait_for_trials(cli, "live", lambda rows: read_store(cli.runs, "live")[0].status
                    != "running", timeout=180)
    exp, trials = read_store(cli.runs, "live")
    assert exp.status == "completed" and len(trials) == 9
    t = next(t for t in trials if t.id == worst.id)
    assert t.state == "completed" and t.objective_values == [8 + 1 / 9]
    assert attempts(cli.runs, "live")[worst.id][-1]["budget"] == 9


def test_bad_finish_requests_exit_2_with_a_clear_message(cli):
    assert "no experiment 'nope'" in cli("finish", "nope", "--top", "2", check=2).stderr
    assert "expected a number of trials, 1 or more" in \
        cli("finish", "nope", "--top", "0", check=2).stderr
    cli.write_spec("""
        name: plain
        command: "echo '@hpsearch step=0 loss={x}'"
        search: {strategy: grid, space: {x: {choices: [1, 2]}}}
        objective: {metric: loss, direction: minimize}
        executor: {type: local}
        """, "plain.yaml")
    cli("submit", "plain.yaml", "--quiet", check=0)
    err = cli("finish", "plain", "--top", "1", check=2).stderr
    assert "pauses no trials: finish is for promotion searches" in err, err


@pytest.mark.parametrize("flags", [["--top", "2", "--trial", "1"], []])
def test_finish_needs_top_or_trial(cli, flags):
    assert "--top" in cli("finish", "x", *flags, check=2).stderr

"""Promotion mode (search.pruner.mode: promotion) on the local executor, through the real CLI:
each trial runs to its rung's step budget, pauses there, and the best 1/eta are resumed from
their checkpoints, as new attempts, up to the next rung."""

from __future__ import annotations

import csv
import io
import json
import sys

import pytest

from hpsearch.store.reader import Reader
from hpsearch.store.runs import STORE_FILE
from tests.helpers import kill_driver_repeatedly, read_store
from tests.promotion_search import SEGMENTED, SPEC, XS

# loss(step) = x + 1/(step+1); the checkpoint holds the next step; one segment per process
# (tests/promotion_search.py).


def _spec(cli, name, xs=XS, parallel=1, pause=0.02):
    script = cli.cwd / "segmented.py"
    script.write_text(SEGMENTED)
    return cli.write_spec(SPEC.format(name=name, python=sys.executable, script=script,
                                      xs=xs, parallel=parallel, pause=pause), f"{name}.yaml")


def _reported(runs, name) -> dict[int, list[tuple]]:
    """trial id -> its stored reports, (step, metric, value), in step order."""
    reader = Reader(runs / name / STORE_FILE)
    try:
        return {t.id: [(m["step"], m["name"], m["value"]) for m in reader.metrics(t.id)]
                for t in reader.trials()}
    finally:
        reader.close()


def _segments(runs, name) -> dict[int, list[tuple]]:
    reader = Reader(runs / name / STORE_FILE)
    try:
        return {t.id: [(a["attempt"], a["rung"], a["budget"], a["state"])
                       for a in reader.attempts(t.id)] for t in reader.trials()}
    finally:
        reader.close()


@pytest.mark.slow  # over 5 s in the quick tier on 2026-11-28 (docs/testing.md#tiers)
def test_asha_promotion_pauses_trials_at_rungs_and_resumes_the_best_from_checkpoints(cli):
    proc = cli("submit", _spec(cli, "promo"), check=0)
    exp, trials = read_store(cli.runs, "promo")
    segments = _segments(cli.runs, "promo")
    by_x = {t.params["x"]: t for t in trials}
    # rungs at 1, 3 and 9 steps: x=0 (the best) runs every rung and completes
    best = by_x[0]
    assert best.state == "completed", proc.stdout
    assert [(s[1], s[2]) for s in segments[best.id]] == [(0, 1), (1, 3), (2, 9)]
    assert best.objective_values == [0 + 1.0 / 9]  # exactly an uninterrupted run's value
    assert best.pruner_attrs["rungs"] == {"0": 1.0, "1": 0 + 1 / 3, "2": 0 + 1 / 9}
    # its segments resumed from checkpoints: every step reported once, in order
    reported = (cli.runs / "promo" / "trials" / f"{best.id:05d}" / "metrics.jsonl")
    assert [json.loads(line)["step"] for line in reported.read_text().splitlines()] == \
        list(range(9))
    # the worst trials never left rung 0: they ran one step each
    for x in (8, 7, 6):
        assert by_x[x].state == "paused", segments[by_x[x].id]
        assert [(s[1], s[2], s[3]) for s in segments[by_x[x].id]] == [(0, 1, "paused")]
    steps = sum(max(s[2] for s in segments[t.id]) for t in trials)
    assert steps < len(XS) * 9 / 2, steps  # far less than running all 9 trials to the end
    assert exp.status == "completed"
    assert "promoted from rung 0" in proc.stdout and "paused at rung 0" in proc.stdout
    _assert_budget_shown(cli, "promo", trials, segments)


def _assert_budget_shown(cli, name, trials, segments):
    """status, export and report tell each trial's steps, segments and rung, and the
    resource used by how trials ended."""
    steps = {t.id: max(s[2] for s in segments[t.id]) for t in trials}
    by_state = {}
    for t in trials:
        by_state[t.state] = by_state.get(t.state, 0) + steps[t.id]
    shown = cli("status", name, check=0).stdout
    header = shown.splitlines()[1]
    assert header.startswith(f"resource used: {sum(steps.values())} steps"), shown
    assert f"completed {by_state['completed']} steps" in header
    assert f"paused {by_state['paused']} steps" in header
    table = [line.split() for line in shown.splitlines()[2:] if line.strip()]
    assert table[0][:6] == ["id", "state", "try", "time", "steps", "rung"], table[0]
    for row in table[1:]:
        tid = int(row[0])
        assert int(row[4]) == steps[tid] and int(row[5]) == segments[tid][-1][1], row
    rows = list(csv.DictReader(io.StringIO(cli("export", name, check=0).stdout)))
    assert {int(r["trial"]): (int(r["steps"]), int(r["segments"]), int(r["rung"]))
            for r in rows} == {tid: (steps[tid], len(s), s[-1][1])
                               for tid, s in segments.items()}
    cli("report", name, "--out", cli.cwd / "report", check=0)
    page = (cli.cwd / "report" / "report.html").read_text()
    assert "<h2 id='budget'>Budget</h2>" in page
    assert f"<td class='l'>total</td><td>{len(trials)}</td><td>{sum(steps.values())}</td>" \
        in page


@pytest.mark.slow  # long end-to-end run, 10 to 200 s (docs/testing.md#tiers)
def test_a_driver_killed_around_rung_decisions_resumes_to_the_same_segments(cli):
    """Killed at random moments 10 times, and at the exact instant after a promotion was
    written and before its segment was launched: the same segments, states and values."""
    cli("submit", _spec(cli, "once"), check=0)
    crashed = cli("submit", _spec(cli, "fault"), env={"HPSEARCH_FAULT": "after_promotion:2"})
    assert crashed.returncode == -9, crashed.stderr
    cli("resume", "fault", check=0)
    kills = kill_driver_repeatedly(cli, _spec(cli, "killed", pause=0.4), "killed", {},
                                   kills=10, delays=(1.0, 2.5))
    assert sum("killed" in k for k in kills) >= 4, kills
    cli("resume", "killed", check=0)
    once = _segments(cli.runs, "once")

    def rungs(segments):  # a killed driver may re-launch a segment as the same attempt
        return {tid: [(rung, budget) for _, rung, budget, state in s] for tid, s in
                segments.items()}

    _, reference = read_store(cli.runs, "once")
    reported = _reported(cli.runs, "once")
    for name in ("fault", "killed"):
        assert rungs(_segments(cli.runs, name)) == rungs(once), name
        # every step of every trial stored once, with its value: none lost, none twice
        # (a segment re-launched after a kill reads on from where its files were read)
        assert _reported(cli.runs, name) == reported, name
        _, trials = read_store(cli.runs, name)
        assert [(t.state, t.objective_values, t.pruner_attrs) for t in trials] == \
            [(t.state, t.objective_values, t.pruner_attrs) for t in reference]


def test_validate_and_plan_show_the_rungs(cli):
    spec = _spec(cli, "shown")
    for command in ("validate", "plan"):
        out = cli(command, spec, check=0).stdout
        assert ("pruner: successive_halving(min_resource=1, reduction_factor=3), promotion: "
                "segments run to rungs of 1, 3, 9 steps (max_resource 9)") in out, out


def test_every_hyperband_bracket_ends_with_its_best_trial_fully_trained():
    """The promotion policy alone, driven as the driver does (promote first, else a new
    trial, else the end game), over 27 trials: each bracket's best trial reaches the last
    rung. Before the end game went bracket by bracket, the top bracket (which starts at
    max_resource) counted as 'someone finished' and the others' best stayed paused."""
    import random

    from hpsearch.pruning.promotion import Promotion
    from hpsearch.spec.model import Pruner
    policy = Promotion(Pruner("hyperband", (("max_resource", 27),), mode="promotion",
                              max_resource=27), "minimize", "hpsearch-hb")
    quality = {tid: random.Random(tid).random() for tid in range(27)}
    asked = 0
    while True:
        segment = policy.promote()
        if segment is None and asked < 27:
            segment, asked = policy.first(asked), asked + 1
        if segment is None:
            segment = policy.promote(end_game=True)
        if segment is None:
            break
        top = policy.is_top(segment.trial_id, segment.rung)
        policy.record(segment.trial_id, segment.rung, quality[segment.trial_id], not top)
    brackets = {}
    for tid, t in policy.trials.items():
        brackets.setdefault(t.bracket, []).append(tid)
    assert len(brackets) > 1
    for bracket, members in brackets.items():
        best = min(members, key=quality.get)
        assert policy.is_top(best, policy.trials[best].rung), (bracket, members)

"""Population-based training (`search.strategy: pbt`, issue 41) on the local executor, through
the real CLI, on the PBT paper's toy problem (examples/pbt_toy/train.py): members run in
segments, the bottom quantile takes a top member's checkpoint and explores its parameters,
every segment runs with the parameters its member's schedule says, and a driver killed at any
point resumes to the history an uninterrupted run has."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

import hpsearch
from hpsearch.report import data as report_data
from hpsearch.report import figures
from hpsearch.search.pbt_schedule import as_json, describe, lived
from hpsearch.store.reader import Reader
from hpsearch.store.runs import STORE_FILE
from tests.helpers import kill_driver_repeatedly, read_store

TOY = Path(__file__).resolve().parent.parent / "examples" / "pbt_toy" / "train.py"
LR = 0.01  # the toy's step size

SPEC = """
name: {name}
command: "{{python}} train.py"
search:
  strategy: pbt
  population: 4
  parallel: {parallel}
  seed: 3
  perturbation_interval: 4
  max_resource: {steps}
  space:
    h0: {{type: float, low: 0.0, high: 1.0}}
    h1: {{type: float, low: 0.0, high: 1.0}}
objective: {{metric: Q, direction: maximize}}
executor: {{type: local}}
"""


def _spec(cli, name, parallel=2, steps=24):
    shutil.copy(TOY, cli.cwd / "train.py")
    return cli.write_spec(SPEC.format(name=name, parallel=parallel, steps=steps),
                          f"{name}.yaml")


def _history(runs, name):
    """Per member: its schedule, lineage and stored reports (step, value)."""
    reader = Reader(runs / name / STORE_FILE)
    try:
        return {t.id: (t.pruner_attrs["pbt"]["schedule"], t.pruner_attrs["pbt"]["lineage"],
                       [(m["step"], m["value"]) for m in reader.metrics(t.id)])
                for t in reader.trials()}
    finally:
        reader.close()


def _replayed(pieces, steps):
    """The toy's Q after `steps` steps from its start under `pieces` (examples/pbt_toy)."""
    theta = [0.9, 0.9]
    for step in range(steps):
        h = [p for p in pieces if p.from_step <= step][-1].params
        theta = [theta[0] + LR * -2 * h["h0"] * theta[0], theta[1] + LR * -2 * h["h1"] * theta[1]]
    return 1.2 - (theta[0] ** 2 + theta[1] ** 2)


def _writer(history, member, step, depth=0):
    """Who wrote `member`'s checkpoint of `step`: itself, or where it took that checkpoint
    from another member (an exploit at a boundary leaves it the copy of that step)."""
    took = [e for e in history[member][1] if e["donor_step"] == step]
    if not took or depth > len(history):
        return member
    return _writer(history, took[-1]["donor"], step, depth + 1)


def _in_force(schedule, segment):
    return [s["params"] for s in schedule if s["segment"] <= segment][-1]


@pytest.mark.slow  # 6.2 s in the quick tier (2026-11-30): over its 3 s rule
def test_members_exploit_and_explore_and_each_segment_runs_its_scheduled_params(cli):
    proc = cli("submit", _spec(cli, "toy"), "--no-tui", check=0, timeout=120)
    exp, trials = read_store(cli.runs, "toy")
    assert exp.status == "completed" and [t.state for t in trials] == ["completed"] * 4
    history = _history(cli.runs, "toy")
    exploits = [(tid, e) for tid, (_, lineage, _) in history.items() for e in lineage]
    assert exploits, proc.stdout  # the bottom quarter of 4 is one member at each boundary
    for tid, (schedule, lineage, reports) in history.items():
        steps = [s for s, _ in reports]
        assert steps == sorted(set(steps)) and steps[-1] == 23, (tid, steps)
        trial_dir = cli.runs / "toy" / "trials" / f"{tid:05d}"
        logs = sorted(trial_dir.glob("stdout.attempt*.log"),
                      key=lambda p: int(re.search(r"(\d+)", p.name).group(1)))
        logs.append(trial_dir / "stdout.log")
        # segments of 4 steps; after a boundary the next starts on from it, or from the
        # donor's step after an exploit (a donor behind costs the member a segment more)
        taken, starts = list(lineage), [0]  # lineage: in the order the exploits came
        while starts[-1] + 3 < 23:
            boundary = starts[-1] + 3
            if taken and taken[0]["at_step"] == boundary:
                boundary = taken.pop(0)["donor_step"]
            starts.append(boundary + 1)
        assert not taken, (tid, lineage)
        ran = []
        for segment, log in enumerate(logs):  # attempt k runs segment k - 1 (no retry here)
            text = log.read_text()
            found = re.search(r"params (\{.*\}) from step (\d+)", text)
            assert found, (log, text)
            params, start = json.loads(found.group(1)), int(found.group(2))
            assert params == _in_force(schedule, segment), (tid, log.name, schedule)
            ran.append(start)
        assert ran == starts, (tid, ran, lineage)
        for e in lineage:  # the segment after an exploit resumed from the donor's file
            writer = _writer(history, e["donor"], e["donor_step"])
            assert any(f"resumed from trial {writer}'s checkpoint of step "
                       f"{e['donor_step']}" in log.read_text() for log in logs), (tid, e)
        leftovers = [p.name for p in (trial_dir / "checkpoints").iterdir()
                     if p.name.startswith(".pbt-")]
        assert leftovers == [], leftovers
    status = cli("status", "toy", check=0).stdout
    assert "did not resume" not in status, status  # a member resumed from what it took
    # the schedule `best` prints is the one each model lived: the toy's steps replayed
    # under it give every member's final Q exactly
    schedules = {tid: h[0] for tid, h in history.items()}
    for t in trials:
        assert _replayed(lived(schedules, t.id), 24) == t.objective_values[0], t.id
    best = cli("best", "toy", "-k", "4", check=0).stdout
    for t in trials:
        for line in describe(lived(schedules, t.id), 23):
            assert f"     {line}\n" in best, (line, best)
    # export, the Python API and the Optuna view carry the same schedule
    exported = json.loads(cli("export", "toy", "--format", "json", check=0).stdout)
    experiment = hpsearch.load("toy", cli.runs)
    frozen = {f.number: f for f in experiment.optuna_trials()}
    for t in trials:
        pieces = as_json(lived(schedules, t.id))
        assert json.loads(next(r for r in exported if r["trial"] == t.id)["schedule"]) == pieces
        assert as_json(experiment.schedule(t.id)) == pieces
        assert frozen[t.id].user_attrs["hpsearch_pbt_schedule"] == pieces
    _check_population_figure(cli.runs / "toy", history)


def _check_population_figure(exp_dir, history):
    """The report's population figure draws what the store holds: each member's score by
    step cut at its exploits, a dotted jump per exploit across the cut and a ring on the
    donor's score at the step it gave, and each mutated parameter's schedule (a dot per
    exploit)."""
    data = report_data.collect(exp_dir, use_sacct=False)
    drawn = figures.population(data)
    assert isinstance(drawn, figures.Drawn), drawn
    figures.png(drawn.figure)
    score, h0, h1 = drawn.figure.axes
    assert (h0.get_ylabel(), h1.get_ylabel()) == ("h0", "h1")
    lines = [ln for ln in score.get_lines() if ln.get_linestyle() == "-"]
    jumps = [ln for ln in score.get_lines() if ln.get_linestyle() == ":"]
    rings = [ln for ln in score.get_lines() if ln.get_marker() == "o"]
    exploits = [e for _, lineage, _ in history.values() for e in lineage]
    assert len(jumps) == len(rings) == len(exploits)
    assert len(lines) == len(history) + len(exploits)
    drawn_points = {(x, y) for ln in lines for x, y in zip(ln.get_xdata(), ln.get_ydata())}
    assert drawn_points == {p for _, _, reports in history.values() for p in reports}
    for ln in jumps:  # from the member's last report before the exploit to its next
        assert all(p in drawn_points for p in zip(ln.get_xdata(), ln.get_ydata()))
    given = sorted((e["donor"], e["donor_step"]) for e in exploits)
    reports = {(tid, s): v for tid, (_, _, got) in history.items() for s, v in got}
    assert sorted((x, y) for ln in rings for x, y in zip(ln.get_xdata(), ln.get_ydata())) \
        == sorted((step, reports[(donor, step)]) for donor, step in given)
    for ax, name in ((h0, "h0"), (h1, "h1")):
        steps = [ln for ln in ax.get_lines() if ln.get_drawstyle() == "steps-post"]
        dots = [ln for ln in ax.get_lines() if ln.get_marker() == "o"]
        assert sorted(list(ln.get_ydata()[:-1]) for ln in steps) == sorted(
            [e["params"][name] for e in schedule] for schedule, _, _ in history.values())
        assert sum(len(ln.get_xdata()) for ln in dots) == len(exploits)
    assert f"4 members, {len(exploits)} exploit" in drawn.caption


@pytest.mark.slow  # long end-to-end run, 10 to 200 s (docs/testing.md#tiers)
def test_a_seeded_one_slot_search_killed_anywhere_resumes_to_the_same_history(cli):
    """One slot: the order of segments, hence every decision, follows from the seed. Killed
    at each pbt step of an exploit (copy staged, decision not stored; checkpoint swapped in,
    next segment not stored; segment stored, not launched) and at 8 random moments, the
    schedules, lineage and every report equal an uninterrupted run's: no decision made
    twice, no segment lost or its steps stored twice."""
    cli("submit", _spec(cli, "once", parallel=1), "--no-tui", check=0, timeout=120)
    once = _history(cli.runs, "once")
    assert any(lineage for _, lineage, _ in once.values()), once
    for i, fault in enumerate(("after_pbt_stage:1", "after_pbt_swap:1",
                               "after_promotion:5")):
        name = f"fault{i}"
        crashed = cli("submit", _spec(cli, name, parallel=1), "--no-tui",
                      env={"HPSEARCH_FAULT": fault}, timeout=120)
        assert crashed.returncode == -9, (fault, crashed.stdout, crashed.stderr)
        cli("resume", name, "--no-tui", check=0, timeout=120)
        assert _history(cli.runs, name) == once, fault
    # 96 steps (24 segments a member): one slot ran 24 steps' search in 1.7 s here, and CI's
    # driver outran six of eight kills (2026-11-30); 96 take about 5 s, so every kill lands.
    longer = _spec(cli, "longer", parallel=1, steps=96)
    cli("submit", longer, "--no-tui", check=0, timeout=120)
    kills = kill_driver_repeatedly(cli, _spec(cli, "killed", parallel=1, steps=96), "killed",
                                   {}, kills=8, delays=(0.5, 2.0))
    assert sum("killed" in k for k in kills) >= 4, kills
    cli("resume", "killed", "--no-tui", check=0, timeout=120)
    assert _history(cli.runs, "killed") == _history(cli.runs, "longer")


BAD = """\
name: bad
command: "echo {{h0}} {{h1}}"
search:
  strategy: pbt
  space:
    h0: {{type: float, low: 0.0, high: 1.0}}
    h1: {{type: float, low: 0.0, high: 1.0}}
  {setting}
objective: {{metric: Q, direction: maximize}}
"""


@pytest.mark.parametrize("setting, line, message", [
    ("max_resource: 8", 3, "search: missing required key 'perturbation_interval' for strategy "
                           "pbt (reported steps per segment"),
    ("perturbation_interval: 0\n  max_resource: 8", 8,
     "search.perturbation_interval: expected an integer >= 1; got 0"),
    ("perturbation_interval: 2\n  max_resource: 8\n  quantile_fraction: 0.75", 10,
     "search.quantile_fraction: expected a number > 0 and <= 0.5; got 0.75"),
    ("perturbation_interval: 2\n  max_resource: 8\n  perturbation_factors: [1.2, -1]", 10,
     "search.perturbation_factors[1]: expected a number > 0; got -1"),
    ("perturbation_interval: 2\n  max_resource: 8\n  mutations: [h0, lr]", 10,
     "search.mutations[1]: expected a searched parameter of search.space (h0, h1); got 'lr'"),
    ("perturbation_interval: 2\n  max_resource: 8\n  replay: [{from_step: 0, params: {h0: 1}},"
     " {from_step: 0, params: {h1: 1}}]", 10,
     "search.replay[1].from_step: expected a step after 0"),
    ("perturbation_interval: 2\n  max_resource: 8\n  replay: [{from_step: 0, params: {lr: 1}}]",
     10, "search.replay[0].params.lr: expected a parameter of search.space (h0, h1)"),
    ("perturbation_interval: 2\n  max_resource: 8\n  pruner: asha", 10,
     "search.pruner: strategy pbt runs each trial in segments and decides at each boundary "
     "itself; remove search.pruner"),
])
def test_a_bad_pbt_setting_names_its_key_and_line(tmp_path, setting, line, message):
    from hpsearch.errors import BadInput
    from hpsearch.preflight import parse_spec
    with pytest.raises(BadInput) as err:
        parse_spec(BAD.format(setting=setting), "spec.yaml", tmp_path, tmp_path / "runs")
    assert message in str(err.value) and err.value.line == line, (str(err.value),
                                                                   err.value.line)


def test_the_population_is_trials_and_the_settings_default_to_ray_s(tmp_path):
    from hpsearch.preflight import parse_spec
    spec = parse_spec(BAD.format(setting="perturbation_interval: 2\n  max_resource: 8"),
                      "spec.yaml", tmp_path, tmp_path / "runs")
    assert spec.search.trials == 8  # population's default
    assert [spec.search.option(k) for k in ("quantile_fraction", "resample_probability",
                                            "perturbation_factors", "burn_in_period")] == \
        [0.25, 0.25, (0.8, 1.2), 0]
    capped = parse_spec(BAD.format(setting="perturbation_interval: 2\n  max_resource: 8\n"
                                           "  population: 6\n  trials: 4"),
                        "spec.yaml", tmp_path, tmp_path / "runs")
    assert capped.search.trials == 4


def test_validate_shows_the_pbt_settings_in_force(cli):
    out = cli("validate", _spec(cli, "shown"), check=0).stdout
    assert ("pbt settings: population=4, perturbation_interval=4, max_resource=24, "
            "burn_in_period=0, quantile_fraction=0.25, resample_probability=0.25, "
            "perturbation_factors=[0.8, 1.2]\n") in out, out


@pytest.mark.slow  # over 5 s in the quick tier (60 s in a loaded fresh-clone run, 2026-11-29)
def test_replay_trains_a_member_s_schedule_again_to_the_same_score(cli):
    """`hpsearch replay`: the best member's lived schedule, as a new experiment of one member
    that changes its parameters where the schedule says: the same final Q, to the bit (the
    toy is deterministic); the spec it wrote stays, and is never written over."""
    cli("submit", _spec(cli, "src"), "--no-tui", check=0, timeout=120)
    exp, trials = read_store(cli.runs, "src")
    schedules = {tid: h[0] for tid, h in _history(cli.runs, "src").items()}
    best_trial = max(trials, key=lambda t: t.objective_values[0])
    pieces = lived(schedules, best_trial.id)
    proc = cli("replay", "src", "--no-tui", check=0, timeout=120)
    assert f"wrote {cli.cwd / 'src-replay.yaml'}: member {best_trial.id}'s schedule, " \
           f"{len(pieces)} piece(s)" in proc.stdout, proc.stdout
    _, replayed = read_store(cli.runs, "src-replay")
    assert [t.objective_values for t in replayed] == [best_trial.objective_values]
    mine = replayed[0].pruner_attrs["pbt"]["schedule"]
    assert [(e["from_step"], e["params"]) for e in mine] == \
        [(p.from_step, p.params) for p in pieces]
    again = cli("replay", "src", "--no-tui")
    assert again.returncode == 2 and "src-replay.yaml exists" in again.stderr, again.stderr
    other = cli("replay", "src-replay", "--no-tui")
    assert other.returncode == 2 and "not a pbt search of a population" in other.stderr


@pytest.mark.slow  # long end-to-end run, 10 to 200 s (docs/testing.md#tiers)
def test_pb2_runs_its_population_and_resumes_to_the_same_history(cli):
    """strategy pb2 (PBT with a GP-bandit explore, hpsearch.search.pb2_explore) on the toy,
    one slot and a seed: every member completes, explored values stay in their bounds, and
    a driver killed right after the second exploit's checkpoint was staged resumes to the
    history of an uninterrupted run (the model is fitted again from the stored boundaries)."""
    def pb2(name):
        spec = _spec(cli, name, parallel=1)
        spec.write_text(spec.read_text().replace("strategy: pbt", "strategy: pb2"))
        return spec
    proc = cli("submit", pb2("once"), "--no-tui", check=0, timeout=120)
    once = _history(cli.runs, "once")
    _, trials = read_store(cli.runs, "once")
    assert [t.state for t in trials] == ["completed"] * 4, proc.stdout
    assert sum(len(lineage) for _, lineage, _ in once.values()) >= 2, proc.stdout
    for schedule, _, _ in once.values():
        assert all(0.0 <= e["params"][h] <= 1.0 for e in schedule for h in ("h0", "h1"))
    crashed = cli("submit", pb2("fault"), "--no-tui", env={"HPSEARCH_FAULT": "after_pbt_stage:2"},
                  timeout=120)
    assert crashed.returncode == -9, (crashed.stdout, crashed.stderr)
    cli("resume", "fault", "--no-tui", check=0, timeout=120)
    assert _history(cli.runs, "fault") == once

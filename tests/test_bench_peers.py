"""benchmarks/peers.py: the curves are deterministic; the step log says what ran and the
columns are read from it alone (lost, repeated); a tiny run of the hpsearch and Optuna rows
prints columns that match its kept step log, and goal lines whose verdicts are what the
table's numbers give (Ray Tune and Syne Tune not needed)."""

from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.peers_steps import (
    assert_nothing_lost_or_repeated,
    check_goal,
    read_steps,
    seconds,
    table_rows,
)

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"
sys.path.insert(0, str(BENCH))

import _curves  # noqa: E402
import peers  # noqa: E402


def test_curves_fall_to_their_final_value_and_the_log_is_read_back(tmp_path):
    w = _curves.Workload(9, 3, 0.0)
    for i in range(9):
        values = [_curves.loss(i, s, 3) for s in range(3)]
        assert values == sorted(values, reverse=True)
        assert math.isclose(values[-1], _curves.CURVES[i][0])
    log = _curves.StepLog(str(tmp_path / "steps.log"), "a")
    best = min(range(9), key=lambda i: _curves.loss(i, 2, 3))
    _curves.run_steps(w, best, 0, 3, log, lambda step, v: None)
    _curves.run_steps(w, 0, 0, 3, _curves.StepLog(log.path, "b"), lambda step, v: None)
    stats = _curves.read_log(log, w, 0.0, w.best_final() + 0.02)
    assert (stats.steps_run, stats.processes) == (3, 1)  # row b's steps are not row a's
    assert stats.best == w.best_final()
    assert stats.to_target < math.inf
    assert stats.lost == 8  # the 8 configurations row a never ran


_KILLED = """
import sys
sys.path.insert(0, {bench!r})
import _curves
_curves.run_steps(_curves.Workload(9, 3, 0.05), 3, 0, 3, _curves.StepLog({log!r}, "a"),
                  lambda step, v: None)
"""


def _no_report(step: int, value: float) -> None:
    return None


def _die_at_step_1(step: int, value: float) -> None:
    if step == 1:
        raise KeyboardInterrupt


def test_lost_and_repeated_steps_come_from_the_step_log_alone(tmp_path):
    """Whatever a tool's store says: a configuration whose process was killed (SIGKILL
    after its first step) and never run on is lost; one stopped by a signal (TERM: not a
    verdict) is lost; one never started is lost; one the tool pruned or paused ended, and
    so did one told to stop mid-step and then killed; one resumed from an earlier step ran
    those steps again."""
    w = _curves.Workload(9, 3, 0.0)
    log = _curves.StepLog(str(tmp_path / "steps.log"), "a")
    proc = subprocess.Popen([sys.executable, "-c", _KILLED.format(bench=str(BENCH),
                                                                   log=log.path)])
    deadline = time.monotonic() + 30
    while not _curves.lines(log.path, "a") and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert [(ln.config, ln.kind) for ln in _curves.lines(log.path, "a")] == [(3, "step")]
    none = _no_report
    _curves.run_steps(w, 0, 0, 3, log, none)                               # completed
    _curves.run_steps(w, 1, 0, 3, log, none, lambda: "pruned")             # pruned at step 0
    _curves.run_steps(w, 2, 0, 1, log, none)                               # paused at step 0
    _curves.run_steps(w, 4, 0, 3, log, none, lambda: "TERM")               # cancelled
    _curves.run_steps(w, 5, 0, 2, log, none)                               # paused, then
    _curves.run_steps(w, 5, 1, 3, log, none)                               # step 1 again
    _curves.run_steps(w, 6, 0, 3, log, none)
    _curves.run_steps(w, 6, 0, 3, log, none)                               # all 3 again
    _curves.run_steps(w, 7, 0, 3, log, none)                               # 8: never
    with pytest.raises(KeyboardInterrupt):  # told mid-step, then gone before it could leave
        _curves.run_steps(_curves.Workload(9, 3, 0.02), 3, 0, 3,
                          _curves.StepLog(log.path, "told"), _die_at_step_1,
                          told=lambda: "pruned")
    told = [(ln.kind, ln.step) for ln in _curves.lines(log.path, "told")]
    assert told == [("told", -1), ("step", 0), ("step", 1)], told
    assert _curves.read_log(_curves.StepLog(log.path, "told"), w, 0.0, 0.0).lost == 8
    stats = _curves.read_log(log, w, 0.0, 0.0)
    assert (stats.lost, stats.repeated, stats.repeated_configs) == (3, 4, 2)  # 3, 4, 8
    ran = read_steps(log.path)["a"]
    assert (ran.lost(9, 3), ran.again()) == (3, "4/2")
    assert read_steps(log.path)["told"].lost(9, 3) == 8
    assert stats.steps_run == sum(ran.steps.values()) == 1 + 3 + 1 + 1 + 1 + 2 + 2 + 6 + 3



def test_a_signal_after_the_last_step_takes_nothing_and_a_verdict_after_death_is_judged(
        tmp_path):
    """The two races of a node kill (the CI run of e8a7464 counted both lost): a process
    TERMed after it ran its last step has ended; a process that died with its node after
    reporting a step, and whose STOP file came after its last line, was judged on that step
    (a `judged` line, counted ended by both readers). A STOP file that came before the
    process's last line, or one that is a link, judges nothing."""
    import _peers_kill

    w = _curves.Workload(4, 3, 0.0)
    log = _curves.StepLog(str(tmp_path / "steps.log"), "pilots-stop")
    none = _no_report
    after = iter([None, None, "TERM"])
    _curves.run_steps(w, 0, 0, 3, log, none, lambda: next(after))  # its last step, then TERM
    for config in (1, 2, 3):                                   # died after step 1
        with pytest.raises(KeyboardInterrupt):
            _curves.run_steps(w, config, 0, 3, log, _die_at_step_1)
    trials = tmp_path / "peers-pilots-stop" / "trials"
    last = _curves.lines(log.path, log.row)[-1].time
    for config, when in ((1, last + 1), (2, last - 100), (3, last + 1)):
        folder = trials / f"{config:05d}"
        folder.mkdir(parents=True)
        (folder / "params.json").write_text(f'{{"config": {config}}}')
        stop = folder / "STOP"
        if config == 3:
            (folder / "elsewhere").write_text("pruned\n")
            stop.symlink_to("elsewhere")
        else:
            stop.write_text("pruned\n")
        os.utime(stop, (when, when), follow_symlinks=False)
    assert _curves.read_log(log, w, 0.0, 0.0).lost == 3
    assert _peers_kill.judged_after_death(log.row, w, log, tmp_path) == 1
    judged = [(ln.config, ln.kind, ln.step, ln.detail) for ln in _curves.lines(log.path, log.row)
              if ln.kind == "judged"]
    assert judged == [(1, "judged", 1, "pruned")], judged
    assert _curves.read_log(log, w, 0.0, 0.0).lost == 2                   # 2 and 3
    assert read_steps(log.path)["pilots-stop"].lost(4, 3) == 2
    assert _peers_kill.judged_after_death(log.row, w, log, tmp_path) == 0  # once only


# makespan, steps run, processes, best value, to target, lost, again, versions
COLUMNS = re.compile(r" (?P<makespan>\d+\.\d) +(?P<steps>\d+) +(?P<processes>\d+) "
                     r"+(?P<best>\d\.\d{4}) +(?P<to_target>\d+\.\d|never) +(?P<lost>\d+|-) "
                     r"+(?P<again>\d+/\d+)  (?P<versions>\S.*)$")
TIME_GOAL = re.compile(r"^(ok|MISS): hpsearch's time to target is no worse than optuna "
                       r"(?P<peer>.+?)'s \(hpsearch (?P<mode>.+) (?P<ours>\d+\.\d|never) s, "
                       r"optuna (?P<theirs>\d+\.\d|never) s\)$")
MAKESPAN_GOAL = re.compile(r"^(ok|MISS): hpsearch's makespan is within 10% of in-process "
                           r"Optuna's \(hpsearch (?P<mode>.+) (?P<ours>\d+\.\d) s, Optuna "
                           r"(?P<theirs>\d+\.\d) s: (?P<ratio>\d+\.\d\d)x; goal <= 1\.10x\)$")


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_a_tiny_run_prints_what_its_step_log_says_and_goal_lines_its_numbers_give(tmp_path):
    steps_log = tmp_path / "steps.log"
    done = subprocess.run([sys.executable, str(BENCH / "peers.py"), "--tiny", "--tools",
                           "hpsearch", "optuna", "--step-log", str(steps_log)],
                          capture_output=True, text=True, timeout=85, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "not run" not in done.stdout, done.stdout
    rows = table_rows(done.stdout, COLUMNS, ("hpsearch ", "optuna "))
    ran = read_steps(str(steps_log))
    ours = [(tool, mode, text) for tool, mode, text in peers.ROWS
            if tool in ("hpsearch", "optuna")]
    assert set(rows) == {text for _, _, text in ours}, done.stdout
    assert set(ran) == {peers.row_key(tool, mode) for tool, mode, _ in ours}, ran.keys()
    for tool, mode, text in ours:
        row, log = rows[text], ran[peers.row_key(tool, mode)]
        # nothing was killed: every configuration ran its steps once each and then ended,
        # and the table says so
        assert_nothing_lost_or_repeated(log, 9, 3)
        assert (row["lost"], row["again"]) == ("0", "0/0"), (text, row)
        assert int(row["steps"]) == sum(log.steps.values()), (text, row)
        assert row["best"] == log.best(3), (text, row)
        # in-process Optuna's steps all ran in the benchmark's own process: none started
        started = 0 if tool == "optuna" else len(log.pids)
        assert int(row["processes"]) == started and len(log.pids) >= 1, (text, row)
    goals = [ln for ln in done.stdout.splitlines() if ln.startswith(("ok: ", "MISS: "))]
    assert len(goals) == 4, done.stdout
    hpsearch = {text: row for text, row in rows.items() if row["tool"] == "hpsearch"}
    optuna = next(row for row in rows.values() if row["tool"] == "optuna")

    time_goal = TIME_GOAL.match(goals[0])
    assert time_goal, goals[0]
    named = hpsearch[time_goal["mode"]]  # hpsearch's best mode, by the table
    assert named["to_target"] == time_goal["ours"] and optuna["to_target"] == time_goal["theirs"]
    assert seconds(named["to_target"]) == min(seconds(r["to_target"]) for r in hpsearch.values())
    check_goal(goals[0], seconds(time_goal["ours"]), seconds(time_goal["theirs"]), strict=False)

    makespan_goal = MAKESPAN_GOAL.match(goals[1])
    assert makespan_goal, goals[1]
    named = hpsearch[makespan_goal["mode"]]  # hpsearch's fastest mode, by the table
    assert (named["makespan"], optuna["makespan"]) == (makespan_goal["ours"],
                                                       makespan_goal["theirs"])
    assert float(named["makespan"]) == min(float(r["makespan"]) for r in hpsearch.values())
    ours_s, theirs_s = float(makespan_goal["ours"]), float(makespan_goal["theirs"])
    ratio = float(makespan_goal["ratio"])
    assert (ours_s - 0.05) / (theirs_s + 0.05) <= ratio <= (ours_s + 0.05) / max(
        theirs_s - 0.05, 1e-3), goals[1]  # the ratio of the two makespans (as rounded)
    check_goal(goals[1], ratio, 1.10, strict=False)

    # issue 42 item 3: the stop-mode row first to the target against in-process Optuna
    text = re.search(r"stop mode: hpsearch (.+)'s time to target", goals[2]).group(1)
    stop = hpsearch[text]
    assert text.startswith("ASHA (stop") and seconds(stop["to_target"]) == min(
        seconds(r["to_target"]) for t, r in hpsearch.items() if t.startswith("ASHA (stop"))
    assert goals[2].endswith(f"stop mode: hpsearch {text}'s time to target is no worse "
                             f"than in-process Optuna's ({stop['to_target']} s, Optuna "
                             f"{optuna['to_target']} s)"), goals[2]
    check_goal(goals[2], seconds(stop["to_target"]), seconds(optuna["to_target"]),
               strict=False)
    stop_ratio = float(re.search(r": (\d+\.\d\d)x;", goals[3]).group(1))
    assert f"({stop['makespan']} s, Optuna {optuna['makespan']} s: " in goals[3], goals[3]
    check_goal(goals[3], stop_ratio, 1.10, strict=False)

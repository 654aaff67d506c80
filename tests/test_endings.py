"""How a search's progress and end are told (issue 24, item 5, found on a promotion search):
the live view counts paused trials as finished the way `status` does, estimates its ETA by
steps under promotion, and stops its clock at the search's end; `status`'s headline adds up
to the trials it lists; a search whose every trial failed ends `failed`. Real searches on
the local executor, through the real CLI."""

from __future__ import annotations

import re
import signal
import sys
import textwrap
import time

import pytest

from hpsearch.pruning.promotion import Promotion
from hpsearch.spec.model import Pruner
from hpsearch.tui.eta import planned_steps
from tests.helpers import read_store

# One step per `pause` seconds (`slow` for x >= 5); a segment stops at its rung's budget and
# resumes from its checkpoint, as in tests/test_promotion.py.
SEGMENTED = textwrap.dedent("""
    import json, time
    from hpsearch import trial
    p = trial.params()
    latest = trial.latest_checkpoint()
    start = json.loads(latest.read_text())["next"] if latest else 0
    end = min(9, trial.budget() or 9)
    for step in range(start, end):
        trial.report(step, loss=p["x"] + 1.0 / (step + 1))
        with trial.checkpoint(step, ".json") as path:
            path.write_text(json.dumps({"next": step + 1}))
        time.sleep(float(p["slow"]) if p["x"] >= 5 else float(p["pause"]))
    trial.result(loss=p["x"] + 1.0 / end)
""")

PROMOTION = """
name: {name}
command: {python} {script} {{x}} {{pause}} {{slow}}
search:
  strategy: grid
  parallel: {parallel}
  space:
    x: {{choices: {xs}}}
    pause: {{value: {pause}}}
    slow: {{value: {slow}}}
  pruner: {{type: asha, mode: promotion, min_resource: 1, reduction_factor: 3,
           max_resource: 9}}
objective: {{metric: loss, direction: minimize}}
"""
XS = [5, 3, 4, 1, 8, 2, 7, 0, 6]  # ladder 1, 3, 9 steps: 9 + 3x2 + 1x6 = 21 planned


def _promotion_spec(cli, name, xs=XS, parallel=1, pause=0.2, slow=None):
    script = cli.cwd / "segmented.py"
    script.write_text(SEGMENTED)
    return cli.write_spec(PROMOTION.format(name=name, python=sys.executable, script=script,
                                           xs=xs, parallel=parallel, pause=pause,
                                           slow=pause if slow is None else slow),
                          f"{name}.yaml")


def _finished(text: str) -> str:
    """'9/9' of '... 9/9 finished ...' (status's headline, the view's bar)."""
    found = re.search(r"(\d+/\d+) finished", text)
    assert found, text
    return found.group(1)


def _wait(test, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while not test():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def _states(cli, name: str) -> list[str]:
    try:
        return [t.state for t in read_store(cli.runs, name)[1]]
    except Exception:  # noqa: BLE001 - the store is not there yet
        return []


@pytest.mark.slow  # over 7 s in the quick tier (docs/testing.md#tiers)
def test_the_view_counts_paused_trials_as_status_does_and_its_eta_counts_steps(cli):
    driver = cli.popen("submit", _promotion_spec(cli, "promo"), "--no-tui")
    _wait(lambda: bool(_states(cli, "promo")))
    etas = []
    while driver.poll() is None:  # snapshots while it runs: the ETA is by steps
        view = cli("watch", "promo", "--once", check=0).stdout
        etas += re.findall(r"ETA \S+ \((\d+) of ~(\d+) steps\)", view)
    assert driver.wait() == 0, driver.stderr.read()
    assert etas, "no snapshot showed an ETA by steps"
    assert all(int(planned) >= 21 for _, planned in etas), etas  # the plan, or more seen

    exp, trials = read_store(cli.runs, "promo")
    paused = sum(t.state == "paused" for t in trials)
    assert exp.status == "completed" and paused > 0
    status = cli("status", "promo", check=0).stdout
    view = cli("watch", "promo", "--once", check=0).stdout
    assert _finished(status) == _finished(view) == "9/9", (status, view)  # the view said 2/9
    assert f"{paused} paused" in view


def test_planned_steps_follow_the_rungs_and_grow_with_what_asha_promoted():
    asha = Promotion(Pruner(type="successive_halving", mode="promotion", max_resource=9,
                            options=(("min_resource", 1), ("reduction_factor", 3))),
                     "minimize", "x")
    assert asha.ladders == [[1, 3, 9]]
    assert planned_steps(asha, 9, {}) == 9 * 1 + 3 * 2 + 1 * 6
    # 4 trials reached rung 1 (not 3) and 2 the last: 9 + 4x2 + 2x6, as a real search ran
    assert planned_steps(asha, 9, {0: 9, 1: 4, 2: 2}) == 29
    hyperband = Promotion(Pruner(type="hyperband", mode="promotion", max_resource=9,
                                 options=(("min_resource", 1), ("reduction_factor", 3))),
                          "minimize", "x")
    assert 9 * 1 < planned_steps(hyperband, 9, {}) < 9 * 9  # between all-stopped and all-full


@pytest.mark.slow  # over 5 s in the quick tier on 2026-11-28 (docs/testing.md#tiers)
def test_the_clock_stops_at_the_last_trials_end_when_the_driver_did_not_record_it(cli):
    """The driver killed right after the last trial's end (its status still `running`):
    nothing is left to run, and the elapsed time no longer grows."""
    spec = cli.write_spec("""
        name: ended
        command: 'echo "@hpsearch step=0 loss={x}"'
        search: {strategy: grid, parallel: 1, space: {x: {choices: [1, 2, 3]}}}
        objective: {metric: loss}
        """)
    cli("submit", spec, "--no-tui", env={"HPSEARCH_FAULT": "after_finish:3"})
    exp, trials = read_store(cli.runs, "ended")
    assert exp.status == "running" and [t.state for t in trials] == ["completed"] * 3
    first = cli("watch", "ended", "--once", check=0).stdout
    time.sleep(2.5)
    again = cli("watch", "ended", "--once", check=0).stdout
    elapsed = re.search(r"elapsed (\S+)", first).group(1)
    assert re.search(r"elapsed (\S+)", again).group(1) == elapsed, (first, again)
    span = max(t.finished for t in trials) - min(t.created for t in trials)
    assert elapsed == f"{span:.1f}s", (elapsed, span)
    assert "ETA" not in again and "3/3 finished" in again


def test_after_ctrl_c_the_status_headline_adds_up_to_the_trials_listed(cli):
    """Ctrl-C with trials paused at a rung and slow ones running: status once said '6/16
    finished (2 cancelled, 6 paused)' over 8 rows."""
    spec = _promotion_spec(cli, "stopped", xs=[0, 1, 8, 9, 2, 3], parallel=3, pause=0.05,
                           slow=60)
    driver = cli.popen("submit", spec, "--no-tui")
    _wait(lambda: _states(cli, "stopped").count("paused") >= 2
          and _states(cli, "stopped").count("running") >= 2)
    driver.send_signal(signal.SIGINT)
    assert driver.wait(60) == 1
    counts: dict[str, int] = {}
    for state in _states(cli, "stopped"):
        counts[state] = counts.get(state, 0) + 1
    assert counts.get("cancelled", 0) >= 2 and counts.get("paused", 0) >= 2, counts

    out = cli("status", "stopped", check=0).stdout
    headline, rows = out.splitlines()[0], out.split("\nid ", 1)[1].splitlines()[1:]
    done, requested = map(int, _finished(headline).split("/"))
    inside = re.search(r"finished \(([^)]*)\)", headline).group(1)
    after = headline.split(")", 1)[1].split(";", 1)[0]
    numbers = [int(n) for n in re.findall(r"(\d+) [a-z]+", inside)]
    assert sum(numbers) == done == sum(n for s, n in counts.items()
                                       if s in ("completed", "failed", "pruned", "paused"))
    others = [int(n) for n in re.findall(r"(\d+) [a-z]+", after)]
    assert done + sum(others) == len(rows) == sum(counts.values()), out
    assert f"{counts['cancelled']} cancelled" in after and requested == 6, headline
    assert _finished(cli("watch", "stopped", "--once", check=0).stdout) == f"{done}/6"


def test_a_search_whose_every_trial_failed_ends_failed(cli):
    failing = cli.write_spec("""
        name: allfail
        command: 'echo "no data for {x}" >&2; exit 3'
        search: {strategy: grid, space: {x: {choices: [1, 2]}}}
        objective: {metric: loss}
        """, "allfail.yaml")
    proc = cli("submit", failing, "--no-tui", check=1)
    assert "experiment allfail: failed" in proc.stdout, proc.stdout
    assert read_store(cli.runs, "allfail")[0].status == "failed"
    assert "experiment allfail: failed, grid, 2/2 finished (2 failed)" in \
        cli("status", "allfail", check=0).stdout
    last = cli("events", "allfail", "--limit", "1", check=0).stdout
    assert "every trial failed (2 failed)" in last, last
    assert "failed" in cli("watch", "allfail", "--once", check=0).stdout.splitlines()[0]

    # one trial gave a value: the search completed, and still exits 1 for the failed one
    mixed = cli.write_spec("""
        name: mixed
        command: 'if [ {x} = 1 ]; then exit 3; fi; echo "@hpsearch step=0 loss={x}"'
        search: {strategy: grid, space: {x: {choices: [1, 2]}}}
        objective: {metric: loss}
        """, "mixed.yaml")
    cli("submit", mixed, "--no-tui", check=1)
    assert read_store(cli.runs, "mixed")[0].status == "completed"

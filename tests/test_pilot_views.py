"""Pilots in `hpsearch status` and `hpsearch report`, from stores written through the Store
API (a real pilot search on the emulated cluster: tests/slurm/test_pilot_views.py): each
pilot's job, state, nodes and leaf, the trials running in it, its time up and left; its
node-hours held, busy and idle, with the attempts in a pilot never given the pilot job's
sacct usage."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from hpsearch.report import data as report_data
from hpsearch.report.pilot_usage import busy_node_seconds
from hpsearch.slurm.sacct import JobUsage
from hpsearch.store.reader import Reader
from hpsearch.store.rows import PilotRow
from hpsearch.store.runs import STORE_FILE
from hpsearch.views.pilots import pilot_line
from tests.tui.conftest import build_pilot_store


def _pilot_rows(stdout: str) -> dict[str, str]:
    """pilot id -> its line of the pilot table `status` prints after the trials."""
    lines = stdout.split("\npilots: ", 1)[1].splitlines()
    return {line.split()[0]: line for line in lines[2:] if line.strip()}


def test_status_shows_each_pilot_its_trials_and_time_left(cli):
    build_pilot_store(cli.runs / "pil")
    out = cli("status", "pil", check=0).stdout
    assert "\npilots: 2 live, 1 ended\n" in out, out
    header = out.split("\npilots: ", 1)[1].splitlines()[1]
    assert header.split() == ["pilot", "job", "state", "nodes", "trials", "time", "left",
                              "note"], out
    rows = _pilot_rows(out)
    assert re.search(r"^1\s+5001\s+running\s+node\[1-2\] \[leaf1\]\s+#0 #1 #2\s+up 2m0\ds\s+"
                     r"3m(0\d|10)s left$", rows["1"]), out  # 200 s as of 10 s ago
    assert re.search(r"^2\s+5002\s+pending\s+waits \d", rows["2"]), out
    assert re.search(r"^3\s+5000\s+ended\s+node\[3-4\] \[leaf2\]\s+held 5m00s\s+"
                     r"Slurm job 5000 TIMEOUT$", rows["3"]), out
    # the trials' own table names the pilot's job and each trial's node
    assert re.search(r"^0\s+running\s+1\s+\S+\s+job 5001 node1", out, re.M), out


def test_status_of_a_search_without_pilots_prints_no_pilot_table(cli):
    from tests.tui.conftest import build_store
    build_store(cli.runs / "plain", 5, executor="slurm", running=1)
    out = cli("status", "plain", check=0).stdout
    assert "pilots:" not in out and "\npilot " not in out


def _row(**kw) -> PilotRow:
    base = dict(id=1, job_name="j", job_id="7", state="running", nodes="node[1-2]",
                leaves="leaf1", submitted=900.0, started=1000.0, ended=None, reason=None)
    return PilotRow(**{**base, **kw})


def test_pilot_line_from_its_heartbeat():
    now = 1100.0
    line = pilot_line(_row(), [4], {"state": "running", "remaining": 50, "time": 1090}, now)
    assert (line.state, line.age, line.remaining, line.trials, line.live) == \
        ("running", 100.0, 40.0, (4,), True)
    draining = pilot_line(_row(), [], {"state": "draining", "remaining": 5, "time": 1095}, now)
    assert (draining.state, draining.remaining) == ("draining", 0.0)
    # it left while no driver recorded its end: held until its last heartbeat
    left = pilot_line(_row(), [], {"state": "exited", "remaining": 9, "time": 1030,
                                   "reason": "idle for 20 s"}, now)
    assert (left.state, left.age, left.remaining, left.reason, left.live) == \
        ("exited", 30.0, None, "idle for 20 s", False)
    assert pilot_line(_row(), [], None, now).remaining is None  # no heartbeat read
    waiting = pilot_line(_row(state="pending", started=None, nodes=None), [], None, now)
    assert (waiting.state, waiting.age, waiting.live) == ("pending", 200.0, True)
    never = pilot_line(_row(state="ended", started=None, ended=1050.0), [], None, now)
    assert (never.age, never.live) == (0.0, False)


def test_busy_node_seconds_counts_a_node_once_while_trials_share_it():
    spans = [(("node1",), 0.0, 10.0), (("node1",), 5.0, 12.0),   # side by side on node1
             (("node1",), 20.0, 25.0),                            # after a gap
             (("node2", "node3"), 0.0, 4.0)]                      # a 2-node trial
    assert busy_node_seconds(spans) == pytest.approx(12 + 5 + 2 * 4)
    assert busy_node_seconds([]) == 0.0


class _FakeSlurm:
    def __init__(self, records):
        self.records = records
        self.asked: list[str] = []

    def sacct_usage(self, job_ids):
        self.asked = list(job_ids)
        return self.records


def test_report_counts_pilot_attempts_from_the_store_and_pilots_from_sacct(tmp_path: Path):
    exp = build_pilot_store(tmp_path / "pil")
    reader = Reader(exp / STORE_FILE)
    try:
        attempts = {a["trial"]: a for t in range(4) for a in reader.attempts(t)}
    finally:
        reader.close()
    # sacct: the pilots' jobs (a whole hour on 2 nodes for the running one)
    slurm = _FakeSlurm([JobUsage("5001", "RUNNING", 3600.0, 2, 0, 8),
                        JobUsage("5000", "TIMEOUT", 300.0, 2, 0, 8)])
    got = report_data.collect(exp, slurm=slurm)
    assert sorted(slurm.asked) == ["5000", "5001", "5002"]
    by_trial = {u.trial: u for u in got.usage}
    for trial in range(4):  # never the pilot job's 3600 s
        u = by_trial[trial]
        assert (u.source, u.nodes) == ("pilot", 1)
        assert u.seconds < 60
    assert by_trial[3].seconds == pytest.approx(attempts[3]["finished"] -
                                                attempts[3]["started"])
    pilots = {p.pilot: p for p in got.pilots}
    assert (pilots[1].source, pilots[1].nodes, pilots[1].seconds, pilots[1].attempts) == \
        ("sacct", 2, 3600.0, 3)
    assert pilots[1].held_node_hours == pytest.approx(2.0)
    # trials 0 and 1 side by side on node1: node1 counted once, node2 once (trial 2)
    t0, t1, t2 = (by_trial[t] for t in range(3))
    assert pilots[1].busy_node_seconds == pytest.approx(
        max(t0.seconds, t1.seconds) + t2.seconds, abs=1.0)
    assert pilots[1].idle_node_hours == pytest.approx(2.0 - pilots[1].busy_node_hours)
    assert (pilots[3].state, pilots[3].held_node_hours, pilots[3].attempts) == \
        ("ended", pytest.approx(600 / 3600), 1)
    assert (pilots[2].nodes, pilots[2].held_node_hours, pilots[2].attempts) == (0, 0.0, 0)


def test_report_without_sacct_holds_pilots_for_their_store_times(tmp_path: Path):
    now = time.time()
    exp = build_pilot_store(tmp_path / "pil", now=now)
    got = report_data.collect(exp, slurm=_FakeSlurm(None))  # no accounting
    pilots = {p.pilot: p for p in got.pilots}
    assert pilots[3].source == "store"
    assert pilots[3].held_node_hours == pytest.approx(2 * 300 / 3600)   # node[3-4], 300 s
    assert pilots[1].seconds == pytest.approx(time.time() - (now - 120), abs=5)  # still up
    assert pilots[2].held_node_hours == 0.0


def test_report_html_has_the_pilot_table_and_figure(tmp_path: Path):
    from hpsearch.report import html
    exp = build_pilot_store(tmp_path / "pil")
    got = report_data.collect(exp, slurm=_FakeSlurm([JobUsage("5001", "RUNNING", 3600.0, 2,
                                                              0, 8)]))
    out = html.write(got, tmp_path / "rep")
    page = out.read_text()
    assert "<h2 id='pilot-usage'>Pilots</h2>" in page
    assert "3 pilot job(s) held" in page and "idle" in page
    assert "<td class='l'>Slurm job 5000 TIMEOUT</td>" in page
    assert (tmp_path / "rep" / "pilots.png").read_bytes()[:4] == b"\x89PNG"
    assert "ran in a pilot (they share the pilot's job" in page


def test_every_id_in_report_html_is_unique(cli):
    """The pilots figure and the pilot table each had id 'pilots': a link to #pilots went to
    whichever came first (issue 24). Every section of the page, parsed, has an id of its
    own."""
    from collections import Counter
    from html.parser import HTMLParser

    ids: list[str] = []

    class Ids(HTMLParser):
        def handle_starttag(self, tag, attrs):
            ids.extend(value for name, value in attrs if name == "id" and value)

    build_pilot_store(cli.runs / "pil")
    cli("report", "pil", "--no-sacct", "--out", cli.cwd / "rep", check=0)
    Ids().feed((cli.cwd / "rep" / "report.html").read_text())
    assert {"pilots", "pilot-usage", "budget"} <= set(ids), ids
    assert [i for i, n in Counter(ids).items() if n > 1] == [], ids


def test_exited_pilot_without_a_recorded_end_is_held_until_its_last_heartbeat(tmp_path):
    now = time.time()
    exp = build_pilot_store(tmp_path / "pil", now=now)
    (exp / "pilots" / "1" / "heartbeat.json").write_text(json.dumps(
        {"state": "exited", "remaining": 100.0, "time": now - 60, "seq": 9,
         "reason": "the driver asked it to stop"}))
    got = report_data.collect(exp, use_sacct=False)
    pilot = {p.pilot: p for p in got.pilots}[1]
    assert (pilot.state, pilot.reason) == ("exited", "the driver asked it to stop")
    assert pilot.seconds == pytest.approx(60.0, abs=1)  # from now-120 to now-60


def test_report_charges_a_pilot_attempt_the_share_of_its_node_it_held(tmp_path: Path):
    """Issue 37 item 7, the report: a trial in one of a pilot node's 4 slots is a quarter
    of a node-hour an hour, as the cost objectives charge it (before: a whole node)."""
    import sqlite3

    from tests.tui.conftest import SPEC
    exp = build_pilot_store(tmp_path / "pil")
    spec = SPEC.format(name="pil", trials=6, executor="slurm").replace(
        "executor: {type: slurm, timeout: 2m}",
        'executor: {type: slurm, pilots: {nodes: 2, time: "01:00:00", slots_per_node: 4}}')
    with sqlite3.connect(exp / STORE_FILE) as db:
        assert db.execute("update experiment set spec_yaml = ?", (spec,)).rowcount == 1
    got = report_data.collect(exp, slurm=_FakeSlurm(None))
    assert got.usage and {u.share for u in got.usage} == {0.25}
    for u in got.usage:
        assert u.node_hours == pytest.approx(u.nodes * u.seconds / 3600 / 4)


def test_a_pilot_is_never_more_than_all_busy(tmp_path: Path):
    """sacct's elapsed is whole seconds and the store's attempt times are the driver's
    sightings: a pilot whose attempts the store saw a moment longer than sacct held it was
    reported 103% busy (issue 38's walkthrough); busy is at most what it held."""
    exp = build_pilot_store(tmp_path / "pil")
    # Its three trials run from their store write until the report: 50 ms each is over the
    # 0.02 node-s below (without the wait, a fast machine read 0.017-0.020).
    time.sleep(0.05)
    slurm = _FakeSlurm([JobUsage("5001", "RUNNING", 0.01, 2, 0, 8),  # held 0.02 node-s
                        JobUsage("5000", "TIMEOUT", 300.0, 2, 0, 8)])
    pilot = {p.pilot: p for p in report_data.collect(exp, slurm=slurm).pilots}[1]
    assert pilot.busy_node_seconds == pytest.approx(0.02)  # its attempts: more than that
    assert pilot.idle_node_hours == 0.0

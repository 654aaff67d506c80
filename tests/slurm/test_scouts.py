"""Scouts (`resources.time: auto CEILING`, issue 40 item 3; hpsearch.driver.scouts) on the
emulated cluster: the first trials ask Slurm for the ceiling, the later ones for what the
first ones took (sacct's run times, the 95th percentile x 1.5, in whole minutes); a trial
killed at that tighter limit runs again at the ceiling, not counted as a failure, and the
trials after it ask for more."""

from __future__ import annotations

import json
import re
import sys
import time
import uuid

import pytest

from hpsearch.store.reader import Reader
from hpsearch.store.runs import STORE_FILE
from tests.helpers import read_store, wait_for_trials

RUN = uuid.uuid4().hex[:6]

SPEC = """
name: {name}
command: 'sleep $((HPSEARCH_ATTEMPT > 1 ? 1 : {{d}})); echo "@hpsearch step=0 loss={{d}}"'
search:
  strategy: random
  trials: {trials}
  parallel: 1
  seed: 1
  enqueue: [{points}]
  space:
    d: {{low: 1, high: 70}}
objective: {{metric: loss}}
resources: {{nodes: 1, time: "auto 00:30:00", scouts: 2}}
executor: {{type: slurm, poll_interval: 0.5, array: false}}
retries: 0
"""


def _limits(cluster, runs, name):
    """[(trial, attempt, Slurm's time limit of its job, the attempt's stored overrides)]."""
    with Reader(runs / name / STORE_FILE) as reader:
        attempts = list(reader.db.query("select trial, attempt, job_id, overrides, failure "
                                        "from attempts order by trial, attempt"))
    for _ in range(20):  # slurmdbd writes a short job's record just after its end
        out = cluster.run("sacct", "-n", "-P", "-X", "-o", "JobID,Timelimit", "-j",
                          ",".join(a["job_id"] for a in attempts)).stdout
        limit = dict(line.split("|") for line in out.split())
        if all(limit.get(a["job_id"]) for a in attempts):
            break
        time.sleep(0.5)
    return [(a["trial"], a["attempt"], limit.get(a["job_id"]), a["overrides"], a["failure"])
            for a in attempts]


def _in_pilots(text: str, ceiling: str, pilot_time: str, max_pilots: int) -> str:
    """SPEC with time and memory `auto` (ceilings `ceiling` and 2000M), its trials in pilots
    of one node and one slot."""
    return text.replace('time: "auto 00:30:00"', f'time: "auto {ceiling}", mem: "auto 2000M"'
                        ).replace("array: false}", "array: false,\n  pilots: {nodes: 1, "
                                  f"time: '{pilot_time}', max: {max_pilots}, idle_timeout: 5, "
                                  "heartbeat: 1}}")


def test_trials_after_the_scouts_ask_for_what_the_scouts_took(cli, slurm_cluster):
    name = f"scouts-{RUN}"
    spec = cli.write_spec(SPEC.format(name=name, trials=4,
                                      points="{d: 1}, {d: 2}, {d: 1}, {d: 1}"))
    proc = cli("submit", spec, "--no-tui", env=slurm_cluster.env, check=0, timeout=240)
    exp, trials = read_store(cli.runs, name)
    assert [t.state for t in trials] == ["completed"] * 4, proc.stdout
    limits = _limits(slurm_cluster, cli.runs, name)
    assert [(t, a, lim) for t, a, lim, _, _ in limits] == [
        (0, 1, "00:30:00"), (1, 1, "00:30:00"), (2, 1, "00:01:00"), (3, 1, "00:01:00")]
    assert [o for *_, o, _ in limits][:2] == [None, None]
    note = limits[2][3]
    assert note.startswith("scouts: time 0-00:01:00 (p95 ") and "of 2 runs x 1.5, ceiling " \
        "00:30:00)" in note, note
    events = cli("events", name, check=0).stdout
    assert "scouts: time 0-00:01:00" in events, events
    status = cli("status", name, check=0).stdout
    assert re.search(r"\nscouts: trials from 3 on ask for scouts: time 0-00:01:00 \(p95 \d+ s "
                     r"of 3 runs x 1.5, ceiling 00:30:00\); 2 sizings, 0 attempts killed at a "
                     r"scouted limit ran again at the ceiling", status), status
    # the report says what the scouts resized and why (hpsearch.report.brokerage)
    cli("report", name, "--out", cli.cwd / "report", env=slurm_cluster.env, check=0)
    page = (cli.cwd / "report" / "report.html").read_text()
    scouts = page.split("<h2 id='scouts'>Scouts</h2>")[1].split("<h2")[0]
    assert "trials from 2 on ask for scouts: time 0-00:01:00 (p95 " in scouts, scouts


@pytest.mark.slurm_clock  # a trial runs into a one-minute limit: on the clock cluster
@pytest.mark.timeout(400)
def test_a_trial_killed_at_the_scouts_limit_runs_again_at_the_ceiling(cli, slurm_cluster):
    """Trial 2 takes 70 s, past the 1-minute limit the two 1-second scouts earned: Slurm
    ends it TIMEOUT, it runs again at the 30-minute ceiling (with `retries: 0`: not counted;
    not the timeout rule's doubled limit either) and completes (in 1 s: the command sleeps
    1 s in a second attempt); trial 3 then asks for 1.5 x more than the runs took."""
    name = f"scouts-limit-{RUN}"
    spec = cli.write_spec(SPEC.format(name=name, trials=4,
                                      points="{d: 1}, {d: 1}, {d: 70}, {d: 1}"))
    proc = cli("submit", spec, "--no-tui", env=slurm_cluster.env, check=0, timeout=360)
    exp, trials = read_store(cli.runs, name)
    assert [(t.state, t.attempt) for t in trials] == [
        ("completed", 1), ("completed", 1), ("completed", 2), ("completed", 1)], proc.stdout
    limits = _limits(slurm_cluster, cli.runs, name)
    assert [(t, a, lim, f) for t, a, lim, _, f in limits] == [
        (0, 1, "00:30:00", None), (1, 1, "00:30:00", None), (2, 1, "00:01:00", "timeout"),
        (2, 2, "00:30:00", None), (3, 1, "00:01:00", None)], limits
    # 1 s (the completed runs' 95th percentile; sacct said 2 s for `sleep 1` under CI's
    # load) x 1.5 margin x 1.5 growth, at least a minute
    assert re.search(r"\(p95 [12] s of 3 runs x 2\.25, ceiling 00:30:00\)", limits[4][3]), \
        limits[4][3]
    events = cli("events", name, check=0).stdout
    assert "attempt 2: at the ceiling after timeout at the scouts' limit (not counted)" \
        in events, events
    status = cli("status", name, check=0).stdout  # the sizing in force, and the kill
    assert "; 2 sizings, 1 attempt killed at a scouted limit ran again at the ceiling" \
        in status and re.search(r"scouts: trials from 3 on ask for scouts: time 0-00:01:00 "
                                r"\(p95 [12] s of 3 runs x 2\.25", status), status


def test_promotion_segments_are_sized_per_rung(cli, slurm_cluster):
    """ASHA in promotion mode (budgets 1, 2, 4): each segment is a job, and a segment to
    budget B asks for what the segments to B took, once 2 of them completed; a rung's
    sizing never counts another rung's runs."""
    import sys

    from tests.slurm.test_pruning_slurm import PROMOTION
    from tests.test_promotion import SEGMENTED
    name = f"scouts-rungs-{RUN}"
    script = cli.cwd / "segmented.py"
    script.write_text(SEGMENTED)
    text = PROMOTION.format(name=name, python=sys.executable, script=script, pilots="")
    spec = cli.write_spec(text.replace('resources: {nodes: 1, time: "00:02:00"}',
                                       'resources: {nodes: 1, time: "auto 00:30:00", scouts: 2}'))
    proc = cli("submit", spec, "--no-tui", env=slurm_cluster.env, check=0, timeout=300)
    with Reader(cli.runs / name / STORE_FILE) as reader:
        attempts = list(reader.db.query("select trial, attempt, budget, state, overrides, "
                                        "started from attempts order by started"))
    assert all(a["state"] in ("completed", "paused") for a in attempts), proc.stdout
    for budget in (1, 2):
        segments = [a for a in attempts if a["budget"] == budget]
        assert len(segments) >= 3, attempts
        # the first two of a rung run at the ceiling; a later one starting after two of its
        # rung completed asks for what those took, counted over that rung's runs only
        assert [a["overrides"] for a in segments[:2]] == [None, None], segments
        sized = [a["overrides"] for a in segments if a["overrides"]]
        assert sized, segments
        for note in sized:
            assert note.startswith(f"scouts: segments to step {budget}: time 0-00:01:00 "
                                   "(p95 "), note
            runs = int(note.split(" of ")[1].split()[0])
            assert 2 <= runs <= len(segments), (note, segments)
    events = cli("events", name, check=0).stdout
    for budget in (1, 2):
        assert re.search(rf"trial \d+'s segment and later ones ask for scouts: segments to "
                         rf"step {budget}: time 0-00:01:00 \(p95 ", events), events


def test_in_pilots_later_trials_get_the_time_limit_the_scouts_took(cli, slurm_cluster):
    """Pilots: the run time of an attempt is its own (the store's start and end), its peak
    memory what its pilot measured; the sized time is the trial's own limit in its
    assignment, which its pilot enforces, and the sized memory its own `mem` there."""
    name = f"scouts-pilots-{RUN}"
    points = "{d: 1}, {d: 2}, {d: 1}, {d: 1}"
    text = _in_pilots(SPEC.format(name=name, trials=4, points=points), ceiling="00:04:00",
                      pilot_time="00:06:00", max_pilots=1)
    proc = cli("submit", cli.write_spec(text), "--no-tui", env=slurm_cluster.env, check=0,
               timeout=240)
    exp, trials = read_store(cli.runs, name)
    assert [t.state for t in trials] == ["completed"] * 4, proc.stdout
    with Reader(cli.runs / name / STORE_FILE) as reader:
        rows = list(reader.db.query(
            "select overrides, max_rss_mb from attempts order by trial, attempt"))
    notes = [a["overrides"] for a in rows]
    assert notes[:2] == [None, None], notes
    for note in notes[2:]:
        assert note.startswith("scouts: time 0-00:01:00 (p95 ") and "ceiling 00:04:00)" in note
        # the shells' peaks are a few MiB: the floor, 100M
        assert "; mem 100M (p95 " in note and "ceiling 2000M)" in note, note
    assert all(0 < a["max_rss_mb"] < 100 for a in rows), rows  # measured by the pilot
    # each trial's time limit and memory as its pilot was told (claimed/: the assignments
    # it took): the ceiling for the two scouts, the scouted minute and 100M after
    told = {}
    for path in (cli.runs / name / "pilots").glob("[0-9]*/claimed/*.json"):
        data = json.loads(path.read_text())
        told[data["trial_id"]] = (data.get("time"), data.get("mem_mb"))
    assert told == {0: (240.0, 2000), 1: (240.0, 2000), 2: (60.0, 100), 3: (60.0, 100)}, told


def test_a_pilot_submitted_after_the_scouts_asks_for_their_time_and_memory(cli, slurm_cluster):
    """Pilots of 21 minutes for trials of at most 20 (the ceiling); the trials take 3 s. Once
    the scouts have run, the first pilot (at the ceiling) is cancelled, as a preemption
    would end it; the pilot submitted in its place for the sized trials asks Slurm for ten
    of them (10 x 1 min + 30 s: 11 minutes) and slots of their 100M, not 21 minutes and
    2000M, and the sized trials run there."""
    name = f"scouts-cut-{RUN}"
    text = _in_pilots(SPEC.format(name=name, trials=7, points=", ".join(["{d: 3}"] * 7)),
                      ceiling="00:20:00", pilot_time="00:21:00", max_pilots=2)
    driver = cli.popen("submit", cli.write_spec(text), "--no-tui", env=slurm_cluster.env)
    try:
        wait_for_trials(cli, name, lambda rows: sum(t.state == "completed" for t in rows) >= 3,
                        timeout=120)
        with Reader(cli.runs / name / STORE_FILE) as reader:
            first = reader.db.execute("select job_id from pilots where id = 1").fetchone()[0]
        slurm_cluster.run("scancel", first)
        out = driver.communicate(timeout=300)[0]
    finally:
        if driver.poll() is None:
            driver.kill()
    exp, trials = read_store(cli.runs, name)
    assert [t.state for t in trials] == ["completed"] * 7, out
    with Reader(cli.runs / name / STORE_FILE) as reader:
        pilots = list(reader.db.query("select id, job_id, slot_mem_mb from pilots order by id"))
        ran = {a["job_id"] for a in reader.db.query("select job_id from attempts")}
    assert len(pilots) >= 2 and pilots[0]["slot_mem_mb"] is None, pilots
    later = [p for p in pilots[1:] if p["job_id"] in ran]
    assert later and all(p["slot_mem_mb"] == 100 for p in later), pilots
    for _ in range(20):  # slurmdbd writes a record just after its job's end
        out = slurm_cluster.run("sacct", "-n", "-P", "-X", "-o", "JobID,Timelimit,ReqMem",
                                "-j", ",".join(p["job_id"] for p in pilots)).stdout
        asked = {f[0]: (f[1], f[2]) for f in (line.split("|") for line in out.split())}
        if len(asked) == len(pilots):
            break
        time.sleep(0.5)
    assert asked[pilots[0]["job_id"]] == ("00:21:00", "2000M"), asked
    for p in later:
        assert asked[p["job_id"]] == ("00:11:00", "100M"), asked
    events = cli("events", name, check=0).stdout
    assert re.search(r"pilot \d+ asks for what the scouts measured: slots of 100M, time "
                     r"00:11:00", events), events


HOLD = """\
import sys, time
x = b"\\x01" * (150 << 20)  # resident: written, not just reserved
time.sleep(2)
print(f"@hpsearch step=0 loss={sys.argv[1]}")
"""


def test_in_pilots_a_trial_on_the_pilot_s_other_node_has_its_memory_measured(cli,
                                                                             slurm_cluster):
    """Memory sized by the scouts (`mem: auto`), a pilot of 2 nodes of one slot each: the
    two trials run one on each node, the second through `srun --overlap`, whose process the
    pilot sees is srun's. Both have their 150 MiB measured (hpsearch.pilot.tree_watch
    measures the other node's trial there); before, that one had none."""
    name = f"scouts-remote-{RUN}"
    (cli.cwd / "hold.py").write_text(HOLD)
    spec = cli.write_spec(f"""
name: {name}
command: "{sys.executable} hold.py {{d}}"
search: {{strategy: random, trials: 2, parallel: 2, seed: 1, space: {{d: {{low: 1, high: 2}}}}}}
objective: {{metric: loss}}
resources: {{nodes: 1, time: "00:05:00", mem: "auto 2000M", scouts: 2}}
executor:
  type: slurm
  poll_interval: 0.5
  array: false
  pilots: {{nodes: 2, slots_per_node: 1, time: "00:06:00", max: 1, idle_timeout: 5,
           heartbeat: 1}}
""")
    proc = cli("submit", spec, "--no-tui", env=slurm_cluster.env, check=0, timeout=240)
    exp, trials = read_store(cli.runs, name)
    assert [t.state for t in trials] == ["completed"] * 2, proc.stdout
    with Reader(cli.runs / name / STORE_FILE) as reader:
        attempts = list(reader.db.query("select trial, nodes, max_rss_mb from attempts"))
    assert len({a["nodes"] for a in attempts}) == 2, attempts  # one on each node
    assert all(a["max_rss_mb"] and 150 <= a["max_rss_mb"] < 600 for a in attempts), attempts

"""Start-up apart from run (issue 38 item 11; docs/spec.md#cost-as-an-objective): each
attempt's code notes its first call of hpsearch.trial (first_call.<attempt>), the driver
stores the seconds before it with the attempt (attempts.startup_s), and the cost objectives
charge from that call on, while the report's accounting still counts all that was held."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import hpsearch
from hpsearch.accounting.usage import attempt_usage, trial_cost
from hpsearch.ingest.first_call import first_call
from hpsearch.report.data import collect
from hpsearch.slurm.sacct import JobUsage
from hpsearch.store.reader import Reader
from tests.helpers import read_store

# Sleeps before its first call of hpsearch.trial (a slow import, a wait for a warm server),
# then runs briefly and reports.
TRAIN = """
import sys, time
time.sleep(float(sys.argv[1]))
from hpsearch import trial
p = trial.params()
time.sleep(0.3)
trial.report(0, loss=p["wait"])
"""


def _attempts(runs, name: str) -> list[dict]:
    reader = Reader(runs / name / "store.sqlite")
    try:
        return reader.all_attempts()
    finally:
        reader.close()


@pytest.mark.slow  # 4.1-5.9 s in the quick tier (2026-11-29): over its 5 s rule
@pytest.mark.parametrize("metric", ["wall_s", "node_hours"])
def test_the_cost_objective_leaves_out_the_wait_before_the_first_call(cli, metric):
    (cli.cwd / "train.py").write_text(TRAIN)
    spec = cli.write_spec(f"""
        name: slow-start
        command: "{{python}} train.py {{wait}}"
        search:
          strategy: grid
          space:
            wait: {{choices: [2.0]}}
        objective: {{metric: {metric}, direction: minimize}}
        executor: {{type: local}}
        """)
    cli("submit", spec, "--no-tui", "-q", check=0)
    _, trials = read_store(cli.runs, "slow-start")
    [trial] = trials
    assert trial.state == "completed"
    [attempt] = _attempts(cli.runs, "slow-start")
    held = attempt["finished"] - attempt["started"]
    startup = attempt["startup_s"]
    # the sleep, and the interpreter's start (a loaded machine: up to a few seconds more)
    assert 1.9 <= startup <= 2.0 + 5.0 and startup < held
    run = held - startup
    [value] = trial.objective_values
    hours = 1 if metric == "wall_s" else 3600
    assert value * hours == pytest.approx(run, rel=1e-6, abs=1e-6)
    assert value * hours < held - 1.9  # the 2-second wait is not charged
    path = cli.runs / "slow-start" / "trials" / "00000" / "first_call.1"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text())["time"] == pytest.approx(attempt["started"] + startup)
    # shown apart from the run: status's start-up column, export's startup_s, the report
    status = cli("status", "slow-start", check=0).stdout.splitlines()
    header = next(line.split() for line in status if line.startswith("id "))
    row = next(line.split() for line in status if line.startswith("0 "))
    assert header[:5] == ["id", "state", "try", "time", "start-up"]
    assert row[3] == f"{held:.1f}s" and row[4] == f"{startup:.1f}s"
    [exported] = csv.DictReader(io.StringIO(cli("export", "slow-start", check=0).stdout))
    assert float(exported["startup_s"]) == pytest.approx(startup)
    assert float(exported["run_seconds"]) == pytest.approx(held)  # what was held
    frame = hpsearch.load("slow-start", cli.runs).trials_dataframe()
    assert frame["user_attrs_hpsearch_startup_s"][0] == pytest.approx(startup)
    used = collect(cli.runs / "slow-start").usage
    assert trial_cost(used)["wall_s"] == pytest.approx(held)  # the report's: all it held
    assert trial_cost(used, startup=False)["wall_s"] == pytest.approx(run)
    if metric == "wall_s":
        cli("report", "slow-start", "--out", cli.cwd / "rep", check=0)
        page = (cli.cwd / "rep" / "report.html").read_text()
        assert (f"Of these, {startup / 3600:.3f} node-h / 0.000 GPU-h were start-up (1 "
                "attempt: ") in page


def _call_trial(tmp_path, env: dict) -> None:
    code = "from hpsearch import trial; trial.params()"
    subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, check=True,
                   cwd=tmp_path, capture_output=True)


def test_the_first_process_of_an_attempt_writes_its_first_call_once(tmp_path):
    env = {"HPSEARCH_TRIAL_DIR": str(tmp_path), "HPSEARCH_ATTEMPT": "2",
           "HPSEARCH_PARAMS": "{}"}
    _call_trial(tmp_path, env)
    first, refused = first_call(tmp_path, 2)
    assert first is not None and refused is None
    _call_trial(tmp_path, env)  # a second rank, later: the first one's time stays
    assert first_call(tmp_path, 2) == (first, None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["first_call.2"]  # no temp file left
    assert first_call(tmp_path, 1) == (None, None)


def test_a_link_planted_as_first_call_is_neither_followed_nor_read(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("untouched")
    (tmp_path / "first_call.1").symlink_to(target)
    _call_trial(tmp_path, {"HPSEARCH_TRIAL_DIR": str(tmp_path), "HPSEARCH_ATTEMPT": "1",
                           "HPSEARCH_PARAMS": "{}"})
    assert target.read_text() == "untouched"
    first, refused = first_call(tmp_path, 1)
    assert first is None and refused and "symbolic link" in refused


def test_a_script_run_by_hand_writes_no_first_call(tmp_path):
    folder = tmp_path / "trial"
    folder.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HPSEARCH_")}
    subprocess.run([sys.executable, "-c", "from hpsearch import trial; trial.params()"],
                   env={**env, "HPSEARCH_TRIAL_DIR": str(folder)}, check=True,
                   capture_output=True)
    assert list(folder.iterdir()) == []


def test_start_up_is_held_but_not_charged_from_the_store_and_from_sacct():
    # from the store: 10 s held, of which 4 before the first call
    used = attempt_usage(1, 1, "completed", 100.0, 110.0, 200.0, 2, 1, startup_s=4.0)
    assert used is not None
    assert trial_cost([used]) == {"node_hours": 2 * 10 / 3600, "gpu_hours": 10 / 3600,
                                  "wall_s": 10.0}
    assert trial_cost([used], startup=False) == pytest.approx(
        {"node_hours": 2 * 6 / 3600, "gpu_hours": 6 / 3600, "wall_s": 6.0})
    # a Slurm job of its own: stored from its submission (100), queued 30 s, sacct says it
    # ran 20 s to the end the store recorded (150); its code first called at 100 + 35
    record = JobUsage("7", "COMPLETED", 20.0, 1, 0, 1)
    used = attempt_usage(1, 1, "completed", 100.0, 150.0, 200.0, 1, 0, record, startup_s=35.0)
    assert used is not None and used.seconds == 20.0 and used.startup == pytest.approx(5.0)
    assert trial_cost([used], startup=False)["wall_s"] == pytest.approx(15.0)
    # no first call: all of it is charged
    used = attempt_usage(1, 1, "completed", 100.0, 110.0, 200.0, 1, 0)
    assert used is not None and trial_cost([used], startup=False)["wall_s"] == 10.0


# The case: the first trial of a fresh warm server runs cold and waits for a slow
# import (a stand-in for torch) before its first call; the later ones are forked warm.
SLOW_IMPORT = """
import sys, time
warm = "slowmod" in sys.modules
import slowmod
from hpsearch import trial
p = trial.params()
print(f"warm={warm}", flush=True)
time.sleep(0.3)
trial.report(0, loss=p["x"])
"""


@pytest.fixture
def socket_dir():
    """A short folder for the warm server's socket; the server started there is ended at
    the end, by its pid (found by this folder in its command line)."""
    path = tempfile.mkdtemp(prefix="hs", dir="/tmp")
    yield path
    for entry in Path("/proc").iterdir():
        try:
            mine = entry.name.isdigit() and entry.stat().st_uid == os.geteuid()
            if mine and f"{path}/".encode() in (entry / "cmdline").read_bytes():
                os.kill(int(entry.name), signal.SIGTERM)
        except OSError:
            continue
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.slow  # 3.9 s in the quick tier (2026-11-30): over its 3 s rule
def test_a_cold_first_trial_waiting_for_its_imports_costs_what_the_warm_ones_do(
        cli, socket_dir):
    (cli.cwd / "slowmod.py").write_text("import time\ntime.sleep(2.0)\n")
    (cli.cwd / "probe.py").write_text(SLOW_IMPORT)
    spec = cli.write_spec("""
        name: cold-first
        command: "{python} probe.py {x}"
        search:
          strategy: grid
          space: {x: {choices: [0, 1, 2]}}
        objective: {metric: wall_s, direction: minimize}
        executor: {type: local, warm: [slowmod]}
        """)
    path = os.pathsep.join(filter(None, [str(cli.cwd), os.environ.get("PYTHONPATH")]))
    cli("submit", spec, "--no-tui", "-q", check=0,  # the server imports slowmod from cwd
        env={"XDG_RUNTIME_DIR": socket_dir, "PYTHONPATH": path})
    _, trials = read_store(cli.runs, "cold-first")
    attempts = {a["trial"]: a for a in _attempts(cli.runs, "cold-first")}
    out = {t.id: (cli.runs / "cold-first" / "trials" / f"{t.id:05d}" / "stdout.log")
           .read_text() for t in trials}
    assert "warm=False" in out[0] and "warm=True" in out[2], out
    held = {tid: a["finished"] - a["started"] for tid, a in attempts.items()}
    assert attempts[0]["startup_s"] >= 1.9 and held[0] >= 2.2  # it waited for slowmod
    assert attempts[2]["startup_s"] < 1.5
    wall = {t.id: t.objective_values[0] for t in trials}
    for tid in wall:
        assert wall[tid] == pytest.approx(held[tid] - attempts[tid]["startup_s"], abs=1e-6)
    assert held[0] > 2 * held[2]  # charged all it held, the cold trial would be an outlier
    assert wall[0] < 2 * wall[2] + 0.5  # charged from the first call, it is not

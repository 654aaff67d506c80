"""Early stopping that reacts at once (issue 24): a trial's report is read as it is written,
not at the driver's next read of every trial, and the trial is told at once; where that
cannot work (a runs dir shared between hosts, HPSEARCH_INOTIFY=off) the driver reads every
INGEST_INTERVAL as before, and says so.

The driver runs in this process (as `hpsearch submit` runs it: session.drive, the real
store and local executor; the pilot executor with a real pilot program on this host) so
that INGEST_INTERVAL can be made 60 s: a trial that reports a hopeless value and then
blocks for 60 s without looking at should_stop() is stopped long before either the
periodic read or its own end could have told the driver. Only the read on inotify's word
can. Bounds are tens of seconds against a 60-second block: a loaded machine slows
everything, but not by that much."""

from __future__ import annotations

import sys
import textwrap
import time
from pathlib import Path

import pytest

from hpsearch.driver import loop, session
from tests.helpers import read_store

BLOCK = 60.0  # seconds a condemned trial blocks: the driver must not wait for it
BENCH = Path(__file__).resolve().parent.parent / "benchmarks"

# x = 0: three good reports, then done. x > 0: one hopeless report, then it blocks without
# looking at should_stop(): only SIGTERM (the executor's stop) ends it early.
TRIAL = textwrap.dedent("""
    import sys, time
    from hpsearch import trial
    x = float(sys.argv[1])
    for step in range(3 if x == 0 else 1):
        trial.report(step, loss=x + 1.0 / (step + 1))
    if x == 0:
        trial.result(loss=x + 1.0 / 3)
    else:
        time.sleep({block})
""").format(block=BLOCK)

SPEC = """\
name: {name}
command: "{python} {script} {{x}}"
search:
  strategy: grid
  parallel: 1
  space: {{x: {{choices: [0, 5]}}}}
  pruner: {{type: median, n_startup_trials: 1}}
objective: {{metric: loss, direction: minimize}}
executor: {executor}
"""
LOCAL = "{type: local, grace: 1}"
PILOT = ("{type: slurm, grace: 1, pilots: {max: 1, nodes: 1, slots_per_node: 1, "
         "heartbeat: 0.5}}")


def _spec(tmp_path: Path, name: str, executor: str) -> Path:
    script = tmp_path / "trial.py"
    script.write_text(TRIAL)
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(SPEC.format(name=name, python=sys.executable, script=script,
                                executor=executor))
    return spec


def _drive(spec_path: Path, runs: Path) -> tuple[float, list[str]]:
    said: list[str] = []
    spec, _ = session.new_experiment(spec_path, runs, None, False)
    began = time.monotonic()
    session.drive(spec, True, said.append)
    return time.monotonic() - began, said


def _condemned(runs: Path, name: str):
    _, trials = read_store(runs, name)
    assert [t.state for t in trials] == ["completed", "pruned"], [(t.state, t.error)
                                                                    for t in trials]
    return trials[1]


@pytest.fixture
def clean_env(monkeypatch):
    for key in ("HPSEARCH_INOTIFY", "HPSEARCH_STORAGE"):
        monkeypatch.delenv(key, raising=False)
    return monkeypatch


def test_a_local_trial_is_stopped_on_its_report_without_waiting_for_the_next_read(
        tmp_path, clean_env):
    clean_env.setattr(loop, "INGEST_INTERVAL", BLOCK)  # the periodic read cannot do it
    seconds, said = _drive(_spec(tmp_path, "now", LOCAL), tmp_path / "runs")
    assert any("reports are read as they are written (inotify on" in line
               for line in said), said
    pruned = _condemned(tmp_path / "runs", "now")
    assert pruned.stop_request["step"] == 0
    assert seconds < BLOCK / 2, (seconds, said)  # it did not block the search
    assert "pruned by median" in pruned.error


@pytest.mark.parametrize("env, why", [
    ({"HPSEARCH_INOTIFY": "off"}, "HPSEARCH_INOTIFY=off"),
    ({"HPSEARCH_STORAGE": "network"}, "HPSEARCH_STORAGE=network: shared between hosts"),
])
def test_without_inotify_the_driver_reads_every_interval_and_still_stops_the_trial(
        tmp_path, clean_env, env, why):
    for key, value in env.items():
        clean_env.setenv(key, value)
    clean_env.setattr(loop, "INGEST_INTERVAL", 0.5)
    seconds, said = _drive(_spec(tmp_path, "poll", LOCAL), tmp_path / "runs")
    assert any(f"reports are read every 0.5 s ({why}" in line for line in said), said
    pruned = _condemned(tmp_path / "runs", "poll")
    assert pruned.stop_request["step"] == 0
    assert seconds < BLOCK / 2, (seconds, said)


def test_a_pilot_trial_is_stopped_on_its_report_without_waiting_for_the_next_read(
        tmp_path, clean_env):
    """The pilot executor's wait wakes for the report too; the pilot (a real pilot program
    on this host, benchmarks/_pilot_local.py) reads its cancel file and stops the trial."""
    sys.path.insert(0, str(BENCH))
    try:
        import _pilot_local
    finally:
        sys.path.remove(str(BENCH))
    clean_env.setattr(loop, "INGEST_INTERVAL", BLOCK)
    runs = tmp_path / "runs"
    runs.mkdir()
    began = time.monotonic()
    assert _pilot_local.run(_spec(tmp_path, "pilot", PILOT), runs) == 0
    seconds = time.monotonic() - began
    pruned = _condemned(runs, "pilot")
    assert pruned.stop_request["step"] == 0
    assert seconds < BLOCK / 2, seconds

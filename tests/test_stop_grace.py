"""A stopped trial gets executor.grace to save and exit, on the local executor and in pilots
(issue: the shell wrapping the trial died on SIGTERM at once, and the executor then killed
the trial's process group, its SIGTERM handler half-way through saving).

The driver runs in this process as `hpsearch submit` runs it (session.drive: the real store
and local executor; the pilot executor with a real pilot program on this host,
benchmarks/_pilot_local.py), and the median pruner stops the second trial after its first
report: SIGTERM to its processes, SIGKILL `grace` seconds later. A trial that catches
SIGTERM, takes 1 s to save a checkpoint and exits, has saved it by the time the search
ends; one that ignores SIGTERM is killed after the grace, not waited for."""

from __future__ import annotations

import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

from hpsearch import procs
from hpsearch.driver import loop, session
from hpsearch.executors.base import Ended
from hpsearch.executors.local import LocalExecutor
from hpsearch.launch.attempt import Launch
from tests.helpers import read_store

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"

# x = 0: three good reports, then done. x > 0: one hopeless report, then it blocks until
# stopped. On SIGTERM: `save` takes 1 s, writes checkpoints/saved, exits 0; `ignore` ignores
# it (only SIGKILL ends it).
TRIAL = textwrap.dedent("""
    import os, signal, sys, time
    from pathlib import Path
    from hpsearch import trial
    x, mode = float(sys.argv[1]), sys.argv[2]

    def save(signum, frame):
        began = time.time()
        time.sleep(1.0)  # a checkpoint that takes a while to write
        Path(os.environ["HPSEARCH_CHECKPOINT_DIR"], "saved").write_text(
            f"{began} {time.time()}")
        sys.exit(0)

    signal.signal(signal.SIGTERM, save if mode == "save" else signal.SIG_IGN)
    for step in range(3 if x == 0 else 1):
        trial.report(step, loss=x + 1.0 / (step + 1))
    if x == 0:
        trial.result(loss=x + 1.0 / 3)
    else:
        Path(os.environ["HPSEARCH_TRIAL_DIR"], "blocking").write_text(str(time.time()))
        time.sleep(120)
""")

SPEC = """\
name: {name}
command: "{python} {script} {{x}} {mode}"
search:
  strategy: grid
  parallel: 1
  space: {{x: {{choices: [0, 5]}}}}
  pruner: {{type: median, n_startup_trials: 1}}
objective: {{metric: loss, direction: minimize}}
executor: {executor}
"""
EXECUTORS = {
    "local": "{{type: local, grace: {grace}}}",
    "pilot": ("{{type: slurm, grace: {grace}, pilots: {{max: 1, nodes: 1, slots_per_node: 1, "
              "heartbeat: 0.5}}}}"),
}


def _spec(tmp_path: Path, name: str, executor: str, mode: str, grace: float) -> Path:
    script = tmp_path / "trial.py"
    script.write_text(TRIAL)
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(SPEC.format(name=name, python=sys.executable, script=script, mode=mode,
                                executor=EXECUTORS[executor].format(grace=grace)))
    return spec


def _search(tmp_path: Path, executor: str, mode: str, grace: float) -> float:
    """Run the search to its end; the seconds it took."""
    name = f"{executor}-{mode}"
    spec_path, runs = _spec(tmp_path, name, executor, mode, grace), tmp_path / "runs"
    runs.mkdir(exist_ok=True)
    began = time.monotonic()
    if executor == "local":
        spec, _ = session.new_experiment(spec_path, runs, None, False)
        session.drive(spec, True, lambda line: None)
    else:
        sys.path.insert(0, str(BENCH))
        try:
            import _pilot_local
        finally:
            sys.path.remove(str(BENCH))
        assert _pilot_local.run(spec_path, runs) == 0
    return time.monotonic() - began


@pytest.fixture
def inotify(monkeypatch):
    for key in ("HPSEARCH_INOTIFY", "HPSEARCH_STORAGE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setattr(loop, "INGEST_INTERVAL", 0.5)


def _stopped(runs: Path, name: str):
    _, trials = read_store(runs, name)
    assert [t.state for t in trials] == ["completed", "pruned"], [(t.state, t.error)
                                                                    for t in trials]
    return trials[1]


@pytest.mark.parametrize("executor", ["local", "pilot"])
def test_a_stopped_trial_saves_its_checkpoint_within_the_grace(tmp_path, inotify, executor):
    seconds = _search(tmp_path, executor, "save", grace=20)
    stopped = _stopped(tmp_path / "runs", f"{executor}-save")
    saved = Path(stopped.trial_dir) / "checkpoints" / "saved"
    assert saved.exists(), "SIGKILL came before the trial's SIGTERM handler was done"
    # its handler ran to its end (the stop may come before the trial writes `blocking`:
    # reports are read within milliseconds)
    began, ended = map(float, saved.read_text().split())
    assert ended - began >= 1.0
    # it exited by itself: the stop did not wait for the whole grace
    assert seconds < 20, seconds


@pytest.mark.parametrize("executor", ["local", "pilot"])
def test_a_trial_that_ignores_sigterm_is_killed_after_the_grace(tmp_path, inotify, executor):
    seconds = _search(tmp_path, executor, "ignore", grace=1)
    stopped = _stopped(tmp_path / "runs", f"{executor}-ignore")
    assert not (Path(stopped.trial_dir) / "checkpoints" / "saved").exists()
    assert seconds < 60, seconds  # killed after its grace, not waited for (it blocks 120 s)


# One process of a trial: on SIGTERM it takes 1 s to write its part of the checkpoint.
PART = textwrap.dedent("""
    import os, signal, sys, time
    from pathlib import Path
    part = Path(os.environ["HPSEARCH_TRIAL_DIR"], sys.argv[1])

    def save(signum, frame):
        time.sleep(1.0)
        part.write_text("saved")
        sys.exit(0)

    signal.signal(signal.SIGTERM, save)
    part.with_suffix(".ready").write_text("")
    time.sleep(120)
""")


def test_a_stopped_trials_other_processes_get_the_grace_after_its_shell_has_ended(tmp_path):
    """`a & b & wait`: SIGTERM ends the shell's wait at once, and the shell exits; the two
    processes saving their parts still get the rest of the grace, not SIGKILL."""
    script, tdir = tmp_path / "part.py", tmp_path / "trial"
    script.write_text(PART)
    command = f"{sys.executable} {script} a & {sys.executable} {script} b & wait"
    runner = LocalExecutor(1, grace=20)
    runner.submit(Launch(0, 1, command, {"HPSEARCH_TRIAL_DIR": str(tdir),
                                         "HPSEARCH_ATTEMPT": "1"}, tdir, tmp_path))
    deadline = time.monotonic() + 30
    while not all((tdir / f"{part}.ready").exists() for part in "ab"):
        assert time.monotonic() < deadline, "the trial did not start"
        runner.poll(0.05)
    asked = time.monotonic()
    runner.cancel(0)
    ended: list = []
    while not ended:
        assert time.monotonic() < deadline, "the trial was not stopped"
        ended = [e for e in runner.poll(0.1) if isinstance(e, Ended)]
    runner.close()
    assert ended[0].reason == "cancelled"
    assert [(tdir / part).read_text() if (tdir / part).exists() else None
            for part in "ab"] == ["saved", "saved"]
    assert time.monotonic() - asked < 20  # it ended when they did, not after the grace


def test_a_stopped_trials_workers_in_sessions_of_their_own_are_killed_after_the_grace(
        tmp_path):
    """torchrun starts its workers in sessions of their own: SIGTERM and SIGKILL to the
    trial's process group never reach them. One that ignores SIGTERM (as an NCCL rank stuck
    in a collective its peers left) must not outlive its trial, holding its GPU: it is found
    by its environment and killed once the grace is up (seen on 2 H200s: four Lightning ranks
    of pruned trials were left running after the search ended)."""
    tdir = tmp_path / "trial"
    tdir.mkdir()
    command = ("setsid sh -c 'trap \"\" TERM; echo $$ > worker.pid; "
               "exec sleep 60' & wait")
    runner = LocalExecutor(1, grace=1)
    runner.submit(Launch(0, 1, command, {"HPSEARCH_TRIAL_DIR": str(tdir),
                                         "HPSEARCH_ATTEMPT": "1"}, tdir, tdir))
    deadline = time.monotonic() + 30
    while not (tdir / "worker.pid").exists() or not (tdir / "worker.pid").read_text():
        assert time.monotonic() < deadline, "the trial did not start"
        runner.poll(0.05)
    worker = int((tdir / "worker.pid").read_text())
    assert os.getsid(worker) != os.getsid(0)  # a session of its own, as torchrun's workers
    asked = time.monotonic()
    runner.cancel(0)
    ended: list = []
    while not ended:
        assert time.monotonic() < deadline, "the trial was not stopped"
        ended = [e for e in runner.poll(0.1) if isinstance(e, Ended)]
    runner.close()
    assert time.monotonic() - asked >= 1.0  # it was given the grace
    for _ in range(50):  # SIGKILL is sent; the kernel takes a moment
        if procs.start_time(worker) is None:
            break
        time.sleep(0.02)
    assert procs.start_time(worker) is None, "the worker outlived its stopped trial"

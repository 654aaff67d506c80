"""hpsearch.driver.checkpoint_keeper, alone: which checkpoints a trial keeps (by default the
newest 2 and the best 1; `keep_last: all` every one), that the store marks a checkpoint
deleted before its file goes, and that a resumed driver finishes what a killed one marked,
on a real store and real files (tests/policy_setup.py wires it as the driver does).
tests/test_checkpoints.py and tests/test_checkpoint_default.py run whole searches."""

from __future__ import annotations

import pytest

from hpsearch.ingest.checkpoints import CheckpointScan
from hpsearch.store import rows
from tests.policy_setup import experiment

SPEC = """
name: keep
command: "echo {{x}}"
search:
  strategy: grid
  space:
    x: {{choices: [0, 1, 2]}}
objective: {{metric: loss, direction: {direction}}}
executor: {{type: local}}
{checkpoints}
"""
# loss at steps 0..5: best at step 1, then worse, so that the best is not among the newest
LOSSES = (5.0, 1.0, 3.0, 4.0, 4.5, 4.8)


@pytest.fixture
def make(tmp_path):
    made = []

    def make(checkpoints: str = "", direction: str = "minimize"):
        made.append(experiment(tmp_path, SPEC.format(checkpoints=checkpoints,
                                                     direction=direction)))
        return made[-1]

    yield make
    for e in made:
        e.close()


def _train(e, losses=LOSSES, state: str = rows.COMPLETED) -> int:
    """A trial that reports `losses` (one a step) and saves a checkpoint at each step, read
    as the driver reads them (CheckpointScan), then ends in `state`; returns its id."""
    tid = e.trial()
    tdir = e.spec.experiment_dir / "trials" / f"{tid:05d}"
    (tdir / "checkpoints").mkdir()
    for step, loss in enumerate(losses):
        (tdir / "checkpoints" / f"step-{step}.pt").write_bytes(b"w" * 8)
        e.store.add_metrics(tid, 1, [{"step": step, "loss": loss}])
    e.store.add_checkpoints(tid, 1, CheckpointScan(tdir).new())
    e.store.fill_checkpoint_metrics(tid, "loss", exact=True)
    if state != rows.RUNNING:
        e.store.finish_attempt(tid, 1, state, 0 if state == rows.COMPLETED else 1, None,
                               values=[min(losses)] if state == rows.COMPLETED else None)
    return tid


def _keep(e, tid: int | None) -> None:
    """The driver after a trial's end (or, None, after any, for keep_trials): mark, commit,
    then remove the files."""
    e.policies.checkpoints.remove(e.policies.checkpoints.mark(tid))


def _on_disk(e, tid: int) -> list[int]:
    folder = e.spec.experiment_dir / "trials" / f"{tid:05d}" / "checkpoints"
    return sorted(int(p.stem.split("-")[1]) for p in folder.iterdir())


def _in_store(e, tid: int) -> list[int]:
    return [c.step for c in e.store.checkpoints(tid)]


def test_by_default_a_trial_keeps_its_newest_2_and_its_best_1(make):
    e = make()
    tid = _train(e)
    _keep(e, tid)
    assert _on_disk(e, tid) == [1, 4, 5]  # best loss at step 1; the newest 4 and 5
    assert _in_store(e, tid) == [1, 4, 5]
    gone = [c.step for c in e.store.checkpoints(tid, include_deleted=True) if c.deleted]
    assert gone == [0, 2, 3]


def test_keep_last_all_keeps_every_checkpoint(make):
    e = make("checkpoints: {keep_last: all}")
    tid = _train(e)
    _keep(e, tid)
    assert _on_disk(e, tid) == [0, 1, 2, 3, 4, 5]
    assert _in_store(e, tid) == [0, 1, 2, 3, 4, 5]


def test_keep_last_written_alone_keeps_only_the_newest(make):
    e = make("checkpoints: {keep_last: 3}")  # no default keep_best beside it
    tid = _train(e)
    _keep(e, tid)
    assert _on_disk(e, tid) == [3, 4, 5]


def test_keep_best_follows_the_objectives_direction(make):
    e = make("checkpoints: {keep_best: 2}", direction="maximize")
    tid = _train(e)
    _keep(e, tid)
    assert _on_disk(e, tid) == [0, 5]  # the highest losses: 5.0 and 4.8


def test_a_trial_that_may_run_again_keeps_the_checkpoint_it_would_resume_from(make):
    e = make("checkpoints: {keep_best: 1}")
    running, failed = _train(e, state=rows.RUNNING), _train(e, state=rows.FAILED)
    _keep(e, running)
    _keep(e, failed)
    assert _on_disk(e, running) == [1, 5]  # the best, and the newest: it may resume
    assert _on_disk(e, failed) == [1]  # failed for good: the best only


def test_keep_trials_leaves_checkpoints_only_to_the_best_finished_trials(make):
    e = make("checkpoints: {keep_trials: 1, keep_last: all}")
    worse = _train(e, losses=(3.0, 2.0))
    better = _train(e, losses=(2.0, 0.5))
    running = _train(e, losses=(9.0,), state=rows.RUNNING)
    _keep(e, worse)  # per trial: keep_trials is judged over the experiment only
    assert _on_disk(e, worse) == [0, 1]
    _keep(e, None)
    assert (_on_disk(e, worse), _on_disk(e, better), _on_disk(e, running)) == ([], [0, 1],
                                                                               [0])


def test_the_store_marks_checkpoints_deleted_before_their_files_go(make):
    """Write-ahead: after mark() (and its commit) the store no longer lists them, while the
    files are still there until remove()."""
    e = make()
    tid = _train(e)
    e.policies.checkpoints.doomed += e.policies.checkpoints.mark(tid)
    assert _in_store(e, tid) == [1, 4, 5]
    assert _on_disk(e, tid) == [0, 1, 2, 3, 4, 5]
    e.policies.checkpoints.remove_marked()
    assert _on_disk(e, tid) == [1, 4, 5]
    assert e.policies.checkpoints.doomed == []


def test_a_resumed_driver_removes_what_a_killed_one_marked_but_did_not_remove(make):
    e = make()
    tid = _train(e)
    e.policies.checkpoints.mark(tid)  # the driver is killed here, before remove()
    assert _on_disk(e, tid) == [0, 1, 2, 3, 4, 5]
    e.restart()
    assert _on_disk(e, tid) == [1, 4, 5]


def test_a_checkpoints_folder_replaced_by_a_link_is_not_deleted_through(make, tmp_path):
    e = make()
    tid = _train(e)
    elsewhere = tmp_path / "elsewhere"
    folder = e.spec.experiment_dir / "trials" / f"{tid:05d}" / "checkpoints"
    folder.rename(elsewhere)
    folder.symlink_to(elsewhere)
    _keep(e, tid)
    assert sorted(p.name for p in elsewhere.iterdir()) == [f"step-{s}.pt" for s in range(6)]
    warnings = [ev["message"] for ev in e.store.events(tid, limit=None)
                if ev["kind"] == "warning"]
    assert len(warnings) == 3 and all(w.startswith("not deleting ") for w in warnings)
    assert f"trial {tid}: {warnings[0]}" in e.events

"""Checkpoint tracking: the driver registers what trials save, keeps what the policy says,
never deletes what a trial resumes from, and `checkpoints` / `best` show them."""

from __future__ import annotations

import json
import sqlite3

import pytest

from hpsearch.ingest.checkpoints import doomed
from hpsearch.spec.model import Checkpoints
from hpsearch.store import rows
from hpsearch.store.reader import Reader
from hpsearch.store.store import Store
from tests.helpers import read_store

# loss at step s: lowest at step 2 (x shifts it), then rising: keep_best differs from keep_last.
TRAIN = '''
import sys
from hpsearch import trial
x = float(sys.argv[1])
steps = int(sys.argv[2])
stop_at = int(sys.argv[3]) if len(sys.argv) > 3 else -1   # exit 75 after this step, once
latest = trial.latest_checkpoint()
start = int(latest.read_text()) + 1 if latest is not None else 0
trial.report(start, resumed_from=start)
for step in range(start, steps):
    trial.report(step, loss=(step - 2) ** 2 + x)
    with trial.checkpoint(step, ".txt") as path:
        path.write_text(str(step))
    if step == stop_at and trial.attempt() == 1:
        trial.resume_later()
'''


def _spec(cli, name, policy, steps=6, trials=3, stop_at=-1, extra=""):
    (cli.cwd / "train.py").write_text(TRAIN)
    return cli.write_spec(f"""
        name: {name}
        command: "{{python}} train.py {{x}} {steps} {stop_at}"
        search:
          strategy: grid
          space:
            x: {{choices: {[round(0.5 * i, 1) for i in range(trials)]}}}
        objective: {{metric: loss}}
        checkpoints: {policy}
        {extra}
        """, f"{name}.yaml")


def _on_disk(cli, name, trial):
    folder = cli.runs / name / "trials" / f"{trial:05d}" / "checkpoints"
    return sorted(int(p.read_text()) for p in folder.iterdir() if not p.name.startswith("."))


def _kept(cli, name, trial):
    reader = Reader(cli.runs / name / "store.sqlite")
    try:
        return sorted(c.step for c in reader.checkpoints(trial))
    finally:
        reader.close()


@pytest.mark.slow  # long end-to-end run, 10 to 200 s (docs/testing.md#tiers)
def test_policy_keeps_last_and_best_and_commands_show_them(cli):
    spec = _spec(cli, "keep", "{keep_last: 2, keep_best: 1}")
    cli("submit", spec, check=0)
    for trial in range(3):  # steps 4, 5 (last two) and 2 (best loss)
        assert _on_disk(cli, "keep", trial) == [2, 4, 5]
        assert _kept(cli, "keep", trial) == [2, 4, 5]
    reader = Reader(cli.runs / "keep" / "store.sqlite")
    every = reader.checkpoints(0, include_deleted=True)
    reader.close()
    assert [c.step for c in every] == [0, 1, 2, 3, 4, 5]
    assert all(c.attempt == 1 and c.bytes == 1 for c in every)
    assert {c.step: c.metric for c in every} == {s: (s - 2) ** 2 for s in range(6)}
    assert [c.step for c in every if c.deleted] == [0, 1, 3]

    listing = cli("checkpoints", "keep", check=0).stdout
    assert listing.splitlines()[0].split() == ["trial", "step", "loss", "size", "try", "path"]
    assert "00000/checkpoints/step-00000005.txt" in listing and "latest" in listing
    assert "step-00000003.txt" not in listing
    assert "step-00000003.txt" in cli("checkpoints", "keep", "--all", check=0).stdout
    data = json.loads(cli("checkpoints", "keep", "--trial", "1", "--json", check=0).stdout)
    assert [(c["step"], c["loss"]) for c in data] == [(2, 0.5), (4, 4.5), (5, 9.5)]
    best = cli("best", "keep", check=0).stdout  # trial 0 (x=0), its best checkpoint: step 2
    assert "trial 0: loss=9" in best  # the objective is the last report
    assert f"checkpoint: {cli.runs}/keep/trials/00000/checkpoints/step-00000002.txt " \
           "(step 2, loss=0)" in best
    best_json = json.loads(cli("best", "keep", "--json", check=0).stdout)
    assert best_json[0]["checkpoint"].endswith("00000/checkpoints/step-00000002.txt")


def test_a_requeued_trial_keeps_and_resumes_from_its_latest_checkpoint(cli):
    # Attempt 1 stops after step 4 (exit 75); keep_best: 1 alone would keep only step 2, but
    # step 4 is what attempt 2 resumes from, so it stays until the trial has finished.
    spec = _spec(cli, "resume", "{keep_best: 1}", steps=7, trials=1, stop_at=4,
                 extra="retries: {interrupted: 0}")
    cli("submit", spec, check=0)
    _, (t,) = read_store(cli.runs, "resume")
    assert t.state == "completed" and t.attempt == 2
    reader = Reader(cli.runs / "resume" / "store.sqlite")
    metrics = {(m["step"], m["name"]): m["value"] for m in reader.metrics(0)}
    every = reader.checkpoints(0, include_deleted=True)
    attempts = reader.attempts(0)
    reader.close()
    assert metrics[(5, "resumed_from")] == 5  # attempt 2 started after step 4's checkpoint
    assert [(a["failure"], a["exit_code"]) for a in attempts] == [("interrupted", 75),
                                                                   (None, 0)]
    assert {c.step: c.attempt for c in every} == {0: 1, 1: 1, 2: 1, 3: 1, 4: 1, 5: 2, 6: 2}
    assert _on_disk(cli, "resume", 0) == [2]


def test_policy_never_deletes_the_latest_of_a_trial_that_may_run_again():
    def row(trial, step, metric):
        return rows.CheckpointRow(trial, step, f"/t{trial}/checkpoints/{step}", 1, float(step), 1,
                                  metric, None)

    def trial(tid, state):
        return rows.TrialRow(tid, state, {}, [float(tid)] if state == rows.COMPLETED else None, 1,
                             0.0, None, None, None, None, None, None, None, None, f"/t{tid}", None,
                             {})

    present = [row(t, s, m) for t in (0, 1, 2, 3) for s, m in ((0, 5.0), (1, 1.0), (2, 3.0))]
    trials = [trial(0, rows.RUNNING), trial(1, rows.QUEUED), trial(2, rows.COMPLETED),
              trial(3, rows.CANCELLED)]
    gone = doomed(Checkpoints(keep_best=1), present, trials, ["minimize"])
    kept = {(c.trial, c.step) for c in present} - {(c.trial, c.step) for c in gone}
    # best (step 1) everywhere; the highest step (2) too unless the trial has finished
    assert kept == {(0, 1), (0, 2), (1, 1), (1, 2), (2, 1), (3, 1), (3, 2)}
    gone = doomed(Checkpoints(keep_trials=1), present, trials + [trial(4, rows.COMPLETED)],
                  ["minimize"])
    assert {c.trial for c in gone} == set()  # trial 2 is the best finished one
    gone = doomed(Checkpoints(keep_trials=1), present + [row(4, 0, 1.0)],
                  trials[:2] + [trial(2, rows.COMPLETED), trial(3, rows.FAILED),
                                trial(4, rows.COMPLETED)],
                  ["maximize"])
    assert {c.trial for c in gone} == {2, 3}  # 4 is best when maximizing; 0 and 1 may run


def test_keep_trials_deletes_all_checkpoints_of_trials_outside_the_best(cli):
    spec = _spec(cli, "few", "{keep_trials: 2}", steps=3, trials=4)
    cli("submit", spec, check=0)
    on_disk = {t: _on_disk(cli, "few", t) for t in range(4)}
    # loss grows with x; the two best keep what the default keeps: the newest 2 and the best
    assert on_disk == {0: [1, 2], 1: [1, 2], 2: [], 3: []}


def test_a_deletion_cut_short_by_a_crash_is_finished_on_resume(cli):
    spec = _spec(cli, "crash", "{keep_last: 5}", steps=3, trials=1)
    cli("submit", spec, check=0)
    store = Store(cli.runs / "crash" / "store.sqlite")
    first = store.checkpoints(0)[0]
    store.mark_checkpoints_deleted([first])  # as a driver killed before it removed the file
    store.close()
    assert _on_disk(cli, "crash", 0) == [0, 1, 2]
    cli("resume", "crash", check=0)
    assert _on_disk(cli, "crash", 0) == [1, 2]


def test_bad_manifest_lines_are_warned_and_nothing_outside_is_touched(cli):
    outside = cli.cwd / "precious.txt"
    outside.write_text("keep me")
    spec = cli.write_spec(f"""
        name: bad-manifest
        command: >-
          printf '%s\\n' '{{"step": 1, "path": "../../../../precious.txt"}}' 'garbage'
          '{{"step": -1, "path": "a"}}' >> "$HPSEARCH_TRIAL_DIR/checkpoints.jsonl";
          mkdir -p "$HPSEARCH_CHECKPOINT_DIR"; echo 1 > "$HPSEARCH_CHECKPOINT_DIR/model.bin";
          ln -s {outside} "$HPSEARCH_CHECKPOINT_DIR/link-9";
          echo 0 > "$HPSEARCH_CHECKPOINT_DIR/epoch-3"; echo 0 > "$HPSEARCH_CHECKPOINT_DIR/epoch-4";
          echo "@hpsearch step=0 loss={{x}}"
        search: {{strategy: grid, space: {{x: {{choices: [1]}}}}}}
        objective: {{metric: loss}}
        checkpoints: {{keep_last: 1}}
        """)
    cli("submit", spec, check=0)
    assert outside.read_text() == "keep me"
    assert _kept(cli, "bad-manifest", 0) == [4]  # epoch-4 by its name; model.bin untracked
    folder = cli.runs / "bad-manifest" / "trials" / "00000" / "checkpoints"
    assert sorted(p.name for p in folder.iterdir()) == ["epoch-4", "link-9", "model.bin"]
    reader = Reader(cli.runs / "bad-manifest" / "store.sqlite")
    warnings = [e["message"] for e in reader.events(0, limit=100) if e["kind"] == "warning"]
    reader.close()
    assert sum("checkpoints.jsonl: skipped malformed line" in w for w in warnings) == 3
    assert any("checkpoints/model.bin: no step in its name" in w for w in warnings)
    con = sqlite3.connect(cli.runs / "bad-manifest" / "store.sqlite")
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()


def test_an_unchanged_checkpoint_folder_is_not_walked_again(tmp_path, monkeypatch):
    """The driver scans a running trial's checkpoints/ every second. A checkpoint that is a
    folder (sharded state, thousands of files) was walked in full on every scan, though
    only its mtime decides whether it is new; now it is walked once, and again only when
    it changes."""
    import os

    from hpsearch.ingest import checkpoints as ck

    shards = tmp_path / "checkpoints" / "step_100"
    shards.mkdir(parents=True)
    for i in range(500):
        (shards / f"shard{i}.pt").write_bytes(b"x" * 10)
    scan = ck.CheckpointScan(tmp_path)
    walked = []
    real_walk = os.walk
    monkeypatch.setattr(ck.os, "walk", lambda path: walked.append(path) or real_walk(path))
    (found,) = scan.new()
    assert found["step"] == 100 and found["bytes"] == 5000 and len(walked) == 1
    for _ in range(5):
        assert scan.new() == []
    assert len(walked) == 1  # not walked again while unchanged
    (shards / "shard500.pt").write_bytes(b"x" * 10)
    os.utime(shards, (1, 1))  # a changed folder (its mtime) is walked again
    (again,) = scan.new()
    assert again["bytes"] == 5010 and len(walked) == 2

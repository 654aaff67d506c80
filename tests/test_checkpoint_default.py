"""Issue 38 item 6: with no `checkpoints.keep_last`/`keep_best` written, each trial keeps its
newest 2 checkpoints and its best 1 (by the objective at the checkpoint's step), not every
one; `keep_last` overrides, `keep_last: all` keeps every one; promotion still resumes each
segment from the latest. Through the CLI."""

from __future__ import annotations

import pytest

from hpsearch.store.reader import Reader
from tests.helpers import read_store

# loss at step s: lowest at step 2 (x shifts it), then rising: the best is not the newest
TRAIN = '''
import sys
from hpsearch import trial
x, steps = float(sys.argv[1]), int(sys.argv[2])
latest = trial.latest_checkpoint()
start = int(latest.read_text()) + 1 if latest is not None else 0
trial.report(start, resumed_from=start)
for step in range(start, min(steps, trial.budget() or steps)):
    trial.report(step, loss=(step - 2) ** 2 + x)
    with trial.checkpoint(step, ".txt") as path:
        path.write_text(str(step))
'''


def _submit(cli, name: str, checkpoints: str = "", pruner: str = "", steps: int = 6,
            trials: int = 2) -> None:
    (cli.cwd / "train.py").write_text(TRAIN)
    cli.write_spec(f"""
        name: {name}
        command: "{{python}} train.py {{x}} {steps}"
        search:
          strategy: grid
          space: {{x: {{choices: {[round(0.5 * i, 1) for i in range(trials)]}}}}}
          {pruner}
        objective: {{metric: loss}}
        {checkpoints}
        """, f"{name}.yaml")
    cli("submit", f"{name}.yaml", check=0)


def _on_disk(cli, name: str, trial: int) -> list[int]:
    folder = cli.runs / name / "trials" / f"{trial:05d}" / "checkpoints"
    return sorted(int(p.read_text()) for p in folder.iterdir() if not p.name.startswith("."))


def test_by_default_a_trial_keeps_its_last_two_checkpoints_and_its_best(cli):
    _submit(cli, "default")
    for trial in range(2):  # steps 4, 5 (the newest two) and 2 (the lowest loss)
        assert _on_disk(cli, "default", trial) == [2, 4, 5]
    reader = Reader(cli.runs / "default" / "store.sqlite")
    try:
        every = reader.checkpoints(0, include_deleted=True)
    finally:
        reader.close()
    assert [c.step for c in every if c.deleted] == [0, 1, 3]  # registered, then deleted


@pytest.mark.parametrize("policy, kept", [
    ("checkpoints: {keep_last: all}", [0, 1, 2, 3, 4, 5]),  # the old default
    ("checkpoints: {keep_last: 3}", [3, 4, 5]),              # written: only what it says
    ("checkpoints: {keep_best: 2}", [2, 3]),                 # (a tie: the later step)
])
def test_keep_last_and_keep_best_override_the_default(cli, policy, kept):
    _submit(cli, "written", policy, trials=1)
    assert _on_disk(cli, "written", 0) == kept


def test_promotion_resumes_each_segment_from_the_latest_checkpoint(cli):
    _submit(cli, "promo", pruner="pruner: {type: asha, mode: promotion, min_resource: 1, "
            "reduction_factor: 3, max_resource: 9}", steps=9, trials=3)
    exp, trials = read_store(cli.runs, "promo")
    done = [t for t in trials if t.state == "completed"]
    assert done, [(t.id, t.state) for t in trials]
    reader = Reader(cli.runs / "promo" / "store.sqlite")
    try:
        for t in done:  # segments to rungs 1, 3 and 9, each starting where the last ended
            starts = sorted(m["value"] for m in reader.metrics(t.id)
                            if m["name"] == "resumed_from")
            assert starts == [0, 1, 3], (t.id, starts)
            assert _on_disk(cli, "promo", t.id) == [2, 7, 8]
        assert not [e for e in reader.events() if e["kind"] == "not_resumed"]
    finally:
        reader.close()

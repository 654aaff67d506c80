"""A promotion search whose command runs fewer steps than max_resource (a fixed `epochs: 5`
below `max_resource: 9`, which `validate` warns of): each segment to budget 9 ends at step 4
on its own. It used to pause there at rung 1 and be promoted again at the end of the search,
attempt after attempt, for ever (300 attempts of one trial in a minute); a segment that ends
before its budget on its own completes the trial, and its bracket has a fully trained trial
(issue 38, found with item 4)."""

from __future__ import annotations

from hpsearch.store.reader import Reader
from hpsearch.store.runs import STORE_FILE
from tests.helpers import read_store

TRAIN = """\
import json, sys
from hpsearch import trial
epochs, lr = int(sys.argv[2]), float(sys.argv[4])
latest = trial.latest_checkpoint()
start = json.loads(latest.read_text())["next"] if latest else 0
for step in range(start, min(epochs, trial.budget() or epochs)):
    trial.report(step, loss=lr / (step + 1))
    with trial.checkpoint(step, ".json") as c:
        c.write_text(json.dumps({"next": step + 1}))
"""
SPEC = """
name: short
command: "{python} train.py --epochs {epochs} --lr {lr}"
search:
  strategy: random
  trials: 6
  parallel: 2
  seed: 1
  space:
    lr: {low: 0.01, high: 1.0}
    epochs: 5
  pruner: {type: asha, mode: promotion, min_resource: 1, max_resource: 9,
           reduction_factor: 3}
objective: {metric: loss}
executor: {type: local}
"""


def test_a_segment_that_ends_before_its_budget_completes_the_trial(cli):
    (cli.cwd / "train.py").write_text(TRAIN)
    proc = cli("submit", cli.write_spec(SPEC), "--no-tui", check=0, timeout=90)
    assert "ended at step 4 of its budget 9 on its own: it completes there" in proc.stdout, \
        proc.stdout
    exp, trials = read_store(cli.runs, "short")
    assert exp.status == "completed", exp
    reader = Reader(cli.runs / "short" / STORE_FILE)
    try:
        attempts = reader.all_attempts()
    finally:
        reader.close()
    assert len(attempts) <= 6 * 3, len(attempts)  # at most one segment a rung a trial
    # ASHA still saves: the one that completed short ends its bracket's end game, so the
    # trials paused below it stay paused (the end game used to train every one of them)
    done = [t for t in trials if t.state == "completed"]
    assert 1 <= len(done) < 6 and all(t.state in ("completed", "paused") for t in trials), \
        [(t.id, t.state) for t in trials]

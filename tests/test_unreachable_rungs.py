"""Issue 38 item 4: rungs no trial can reach (`max_resource: 9` with a fixed `epochs: 5` the
command passes) are warned about on stderr by validate, plan and submit, with the file, line
and key; not an error (exit 0). Through the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpsearch.preflight import parse_spec
from hpsearch.preflight.rungs import unreachable_rungs

SPEC = """\
name: rungs
command: "{{python}} train.py --lr {{lr}} {option} {{{param}}}"
search:
  strategy: random
  trials: 2
  parallel: 2
  space:
    lr: {{low: 0.1, high: 1.0}}
    {param}: {value}
  pruner: {pruner}
objective: {{metric: loss}}
"""
PROMOTION = "{type: asha, mode: promotion, min_resource: 1, reduction_factor: 3, max_resource: 9}"
TRAIN = """\
import argparse
from hpsearch import trial
a = argparse.ArgumentParser()
a.add_argument("--lr", type=float)
a.add_argument("--epochs", type=int)
args = a.parse_args()
start = int(open(trial.latest_checkpoint()).read()) + 1 if trial.latest_checkpoint() else 0
loss = args.lr / (start + 1)
for epoch in range(start, min(args.epochs, trial.budget() or args.epochs)):
    loss = args.lr / (epoch + 1)
    trial.report(epoch, loss=loss)
    with trial.checkpoint(epoch, ".txt") as path:
        path.write_text(str(epoch))
trial.result(loss=loss)
"""


def _text(param="epochs", value=5, option="--epochs", pruner=PROMOTION) -> str:
    return SPEC.format(param=param, value=value, option=option, pruner=pruner)


@pytest.mark.slow  # 3.9 s in the quick tier (2026-11-30): over its 3 s rule
def test_validate_plan_and_submit_warn_of_rungs_a_fixed_epochs_keeps_out_of_reach(cli):
    (cli.cwd / "train.py").write_text(TRAIN)
    cli.write_spec(_text())
    want = ("hpsearch: warning: spec.yaml:9: search.space.epochs: the command passes --epochs "
            "{epochs} = 5, the steps a trial runs, but search.pruner's max_resource is 9: "
            "rung 9 (of 1, 3, 9) can never be reached; set max_resource to 5 or epochs to 9")
    for command in ("validate", "plan"):
        proc = cli(command, "spec.yaml", check=0)
        assert want in proc.stderr, (command, proc.stderr)
    # submit: stopping trials (such a promotion search re-promotes its trials to rung 9 without
    # end, each segment stopping at step 4, which is why this warning matters)
    cli.write_spec(_text(pruner="{type: hyperband, max_resource: 27}"))
    proc = cli("submit", "spec.yaml", check=0)
    assert "spec.yaml:9: search.space.epochs: the command passes --epochs {epochs} = 5" in \
        proc.stderr and "max_resource is 27: rung 27 (of 27)" in proc.stderr, proc.stderr
    cli.write_spec(_text(value=9))
    for command in ("validate", "plan"):
        assert "warning" not in cli(command, "spec.yaml", check=0).stderr


@pytest.mark.parametrize("param, value, option, pruner, warned", [
    ("n", 2, "--max-epochs", PROMOTION, "rungs 3, 9 (of 1, 3, 9)"),  # named by its option
    ("max_steps", 4, "trainer.max_steps=", PROMOTION, "rung 9"),     # Hydra style
    ("epochs", 5, "--epochs", "{type: hyperband, max_resource: 27}", "max_resource is 27"),
    ("epochs", 3, "--epochs", "{type: successive_halving, min_resource: 4}",
     "its first rung is 4 steps (min_resource)"),
    ("batch", 5, "--batch", PROMOTION, None),       # not a count of steps
    ("epochs", 5, "--epochs", "median", None),      # no rungs
    ("epochs", 9, "--epochs", PROMOTION, None),     # reaches every rung
])
def test_which_parameters_feed_the_resource(param, value, option, pruner, warned):
    spec = parse_spec(_text(param, value, option, pruner), "spec.yaml", Path("."))
    found = unreachable_rungs(spec)
    if warned is None:
        assert found is None
    else:
        assert found is not None and found[0] == f"search.space.{param}", found
        assert warned in found[1], found

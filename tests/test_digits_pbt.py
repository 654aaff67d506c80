"""PBT of the digits example's learning rate (examples/digits_ddp/pbt.yaml, train.py --pbt):
a member that takes another member's checkpoint loads a model and optimizer saved with
another lr and trains on with its own, as the schedule the store keeps says; and the same with
2 ranks a member under torchrun, every rank alike (tests/pbt_segments.py)."""

from __future__ import annotations

import re

import pytest

from tests.conftest import EXAMPLES
from tests.helpers import read_store
from tests.pbt_segments import WARM, check_segments, digits_spec


@pytest.mark.slow  # torch's imports: 29 s in the quick tier under load (docs/testing.md#tiers)
def test_digits_members_take_checkpoints_of_another_lr_and_train_on_with_theirs(cli):
    spec = (EXAMPLES / "digits_ddp" / "pbt.yaml").read_text()
    spec = spec.replace("population: 4", "population: 3").replace(
        "max_resource: 8", "max_resource: 6").replace("epochs: 8", "epochs: 6")
    (cli.cwd / "train.py").write_text((EXAMPLES / "digits_ddp" / "train.py").read_text())
    proc = cli("submit", cli.write_spec(spec), "--no-tui", check=0, timeout=300)
    _, trials = read_store(cli.runs, "digits-pbt")
    assert [t.state for t in trials] == ["completed"] * 3, proc.stdout
    taken = [(t, e, after) for t in trials for e, after in zip(
        t.pruner_attrs["pbt"]["lineage"],
        [s for s in t.pruner_attrs["pbt"]["schedule"] if s.get("donor") is not None],
        strict=True)]
    assert taken, proc.stdout  # the bottom third takes the top third's at a boundary
    for t, e, after in taken:  # each exploit, and the schedule entry it began
        assert after["donor"] == e["donor"] and after["from_step"] == e["donor_step"] + 1
        logs = "".join(p.read_text() for p in
                       (cli.runs / "digits-pbt" / "trials" / f"{t.id:05d}").glob("stdout*.log"))
        assert re.search(rf"resuming from epoch-0*{e['donor_step']}\.pt: epoch "
                         rf"{e['donor_step'] + 1}\n", logs), logs
    for t in trials:  # the parameters the store ends with are the last segment's
        assert t.pruner_attrs["pbt"]["schedule"][-1]["params"]["lr"] == t.params["lr"]


@pytest.mark.slow  # torch's imports, 15 to 31 s on a loaded machine (docs/testing.md#tiers)
def test_both_ranks_of_a_torchrun_member_train_each_segment_with_its_scheduled_lr(cli):
    """2 gloo ranks a member (launcher torchrun, warm): each segment's ranks all load the
    same checkpoint, the donor's copy after an exploit, and train with the lr the store's
    schedule has for that segment."""
    (cli.cwd / "train.py").write_text((EXAMPLES / "digits_ddp" / "train.py").read_text())
    spec = digits_spec("digits-pbt-ranks", "torchrun", "{tasks_per_node: 2, cpus_per_task: 1}",
                       f"{{type: local, timeout: 2m, warm: {WARM}}}")
    # the warm server test_digits_members... started, if it is still up (same preload list)
    proc = cli("submit", cli.write_spec(spec), "--no-tui", check=0, timeout=120)
    check_segments(cli.runs, "digits-pbt-ranks", ranks=2, output=proc.stdout)

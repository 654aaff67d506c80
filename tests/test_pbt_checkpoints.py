"""The files of a pbt exploit (hpsearch.pruning.pbt_checkpoints): the donor's checkpoint is
staged into the member's folder under a hidden name, then swapped in under the trial's own
name, the member's own set aside. Without a driver: plain files in tmp_path."""

from __future__ import annotations

import json
import os

from hpsearch.pruning.pbt_checkpoints import STAGED, clear_old, stage, swap
from hpsearch.trial import CHECKPOINT_MANIFEST


def _checkpoint(folder, name, data):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(data)
    return folder / name


def test_a_taken_checkpoint_replaces_the_member_s_own_under_its_own_name(tmp_path):
    donor = _checkpoint(tmp_path / "donor" / "checkpoints", "epoch-0003.pt", b"donor's")
    member = tmp_path / "member"
    _checkpoint(member / "checkpoints", "epoch-0005.pt", b"member's")
    name = stage(donor, member)
    assert name == "epoch-0003.pt"
    assert sorted(os.listdir(member / "checkpoints")) == [STAGED + name, "epoch-0005.pt"]
    swap(member, name, 3)
    clear_old(member)
    assert os.listdir(member / "checkpoints") == ["epoch-0003.pt"]
    assert (member / "checkpoints" / name).read_bytes() == b"donor's"
    line = json.loads((member / CHECKPOINT_MANIFEST).read_text().splitlines()[-1])
    assert (line["step"], line["path"], line["pbt"]) == (3, name, "exploited")


def test_a_donor_s_own_staged_copy_is_taken_under_the_trial_s_name(tmp_path):
    """A chained exploit: the donor itself took a checkpoint at that boundary, staged and not
    swapped in yet, so the member copies the donor's `.pbt-next-` file. The fresh-clone run
    of 6a59a37 found it arriving as `pbt-next-epoch-0001.pt`, a name the trial resumed from
    and logged (tests/test_digits_pbt.py)."""
    donor = _checkpoint(tmp_path / "donor" / "checkpoints", STAGED + "epoch-0001.pt", b"x")
    member = tmp_path / "member"
    member.mkdir()  # a trial dir with no checkpoint of its own yet
    name = stage(donor, member)
    assert name == "epoch-0001.pt"
    swap(member, name, 1)
    assert os.listdir(member / "checkpoints") == ["epoch-0001.pt"]

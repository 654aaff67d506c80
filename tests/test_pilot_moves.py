"""A move of the pilot protocol (a rename between state folders) on a file system that may
lose a reply (NFS sends a rename again when its first reply was lost; the second finds the
source gone): the move that happened is a success, the other side's move is not."""

from __future__ import annotations

import os

from hpsearch.pilot import protocol


def test_a_rename_whose_reply_was_lost_counts_as_done_and_the_other_sides_does_not(tmp_path):
    paths = protocol.PilotPaths(tmp_path / "pilots" / "1")
    paths.make()
    name = protocol.name_of(3, 1)
    protocol.write_json(paths.file("inbox", name), {"trial_id": 3})
    # the pilot's claim went through but its reply was lost: the retried rename finds
    # no source. The claim happened, so the pilot must run the trial.
    os.rename(paths.file("inbox", name), paths.file("claimed", name))
    assert protocol.move(paths, name, "inbox", "claimed") is True
    # the driver's withdraw of the same assignment now fails: the pilot has it
    assert protocol.move(paths, name, "inbox", "withdrawn") is False
    assert protocol.where(paths, name) == "claimed"


def test_an_attempt_withdrawn_then_assigned_again_and_claimed_is_not_withdrawn_twice(tmp_path):
    """Withdrawn from a pilot, assigned to it again (the driver discards the old withdrawn/
    file first, as PilotExecutor._bind does), then claimed: a later withdraw fails, so the
    attempt runs once, in that pilot."""
    paths = protocol.PilotPaths(tmp_path / "pilots" / "1")
    paths.make()
    name = protocol.name_of(4, 1)
    protocol.write_json(paths.file("inbox", name), {"trial_id": 4})
    assert protocol.move(paths, name, "inbox", "withdrawn") is True
    protocol.discard(paths, name, "withdrawn")  # assigned again
    protocol.write_json(paths.file("inbox", name), {"trial_id": 4})
    assert protocol.move(paths, name, "inbox", "claimed") is True
    assert protocol.move(paths, name, "inbox", "withdrawn") is False

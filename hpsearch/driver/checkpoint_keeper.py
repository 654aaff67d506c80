"""The driver's side of the checkpoint policy (spec `checkpoints`): which checkpoints to
delete, marked in the store first, their files removed only after that commit."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from hpsearch.ingest.checkpoints import doomed, remove
from hpsearch.store import runs

if TYPE_CHECKING:
    from pathlib import Path

    from hpsearch.spec.model import Checkpoints
    from hpsearch.store import rows
    from hpsearch.store.store import Store


class CheckpointKeeper:
    def __init__(self, policy: Checkpoints, directions: list[str], exp_dir: Path, store: Store,
                 on_event: Callable[[str], None]) -> None:
        """policy: the spec's `checkpoints`; directions: each objective's, for keep_best."""
        self.policy, self.directions, self.exp_dir = policy, directions, exp_dir
        self.store, self.on_event = store, on_event
        self.doomed: list[rows.CheckpointRow] = []  # marked deleted; files go once committed

    def mark(self, trial_id: int | None) -> list[rows.CheckpointRow]:
        """Mark what the checkpoint policy deletes, of one trial (None: every trial, as the
        experiment-wide keep_trials needs); the files go after the commit (remove)."""
        policy = self.policy
        if trial_id is not None:
            policy = dataclasses.replace(policy, keep_trials=None)
        if policy.keep_last is None and policy.keep_best is None and policy.keep_trials is None:
            return []
        present = self.store.checkpoints(trial_id)
        if not present:
            return []
        trials = self.store.trials() if trial_id is None else [self.store.trial(trial_id)]
        gone = doomed(policy, present, trials, self.directions)
        if gone:
            self.store.mark_checkpoints_deleted(gone)
        return gone

    def remove(self, gone: list[rows.CheckpointRow]) -> None:
        for checkpoint in gone:
            warning = remove(checkpoint, runs.trial_dir(self.exp_dir,
                                                        checkpoint.trial))
            if warning:
                self.store.add_event("warning", warning, checkpoint.trial)
                self.on_event(f"trial {checkpoint.trial}: {warning}")

    def remove_marked(self) -> None:
        """Remove the files of what was marked since the last call (its commit is done)."""
        gone, self.doomed = self.doomed, []
        self.remove(gone)

    def recover(self) -> None:
        """Remove what an earlier driver marked deleted but did not remove before it died."""
        self.remove([c for c in self.store.checkpoints(include_deleted=True)
                     if c.deleted is not None and os.path.lexists(c.path)])

"""A later attempt that did not resume from its trial's checkpoint (docs/early-stopping.md).

Each promotion segment, retry or requeue is a new attempt that should go on from the
trial's latest checkpoint (hpsearch.trial.latest_checkpoint). A script that ignores it (a
Lightning script calling trainer.fit() instead of hpsearch.integrations.lightning.fit) trains
from step 0 again in every segment, and its metrics alone do not show it: the new attempt's
lines replace the old ones step for step. The driver sees it in the attempt's first report:
a step below the one the latest checkpoint of the earlier attempts holds. It says so once per
attempt, as an event of kind KIND, which `status` and the report sum up (summary).

Which attempt was checked is kept with the trial's read cursors (source SOURCE), in the
commit that stores the report, so a resumed driver neither checks an attempt again on a later
line nor misses one.
"""

from __future__ import annotations

import re

KIND = "not_resumed"
SOURCE = "resume"
_ATTEMPT = re.compile(r"^attempt (\d+) ")


class ResumeCheck:
    """The last attempt of one trial whose first report was checked."""

    def __init__(self, saved: object = None) -> None:
        checked = saved.get("checked") if isinstance(saved, dict) else None
        self.checked = checked if isinstance(checked, int) else 0
        self._unsaved = False

    def due(self, attempt: int) -> bool:
        """Whether `attempt`'s first report is still to be checked."""
        return attempt > 1 and attempt > self.checked

    def check(self, attempt: int, first_step: int, held: int | None) -> str | None:
        """The warning for `attempt`, whose first report is at first_step, started with a
        checkpoint of step `held` (None: no earlier attempt saved one), or None if it
        resumed (or had nothing to resume from). Marks the attempt checked."""
        self.checked, self._unsaved = attempt, True
        if held is None or first_step >= held:
            return None
        return (f"attempt {attempt} did not resume from its checkpoint: its first report is "
                f"step {first_step}, below step {held} of the latest checkpoint it started "
                "with, so it trains again what earlier attempts trained. Resume from "
                "hpsearch.trial.latest_checkpoint() (Lightning: hpsearch.integrations."
                "lightning.fit(), not trainer.fit()); docs/early-stopping.md")

    def unsaved(self) -> dict | None:
        """What to store with the read cursors: the state if it changed since, else None."""
        if not self._unsaved:
            return None
        self._unsaved = False
        return {"checked": self.checked}


def summary(events: list[dict], name: str) -> str | None:
    """One line for `status` and the report from the KIND events (trial, message), oldest
    first; None when there are none."""
    attempts: dict[int, list[str]] = {}
    for event in events:
        found = _ATTEMPT.match(event["message"] or "")
        attempts.setdefault(event["trial"], []).append(found.group(1) if found else "?")
    if not attempts:
        return None
    which = "; ".join(f"trial {trial} attempt{'s' if len(numbers) > 1 else ''} "
                      f"{', '.join(numbers)}" for trial, numbers in sorted(attempts.items()))
    return (f"warning: segments that did not resume from their trial's checkpoint (their "
            f"first step was below it: they trained again from the start): {which}. The "
            "script must resume from hpsearch.trial.latest_checkpoint() (Lightning: the "
            f"integration's fit(), not trainer.fit()); `hpsearch events {name} --kind {KIND}`")

"""How many pilots to have: a small policy, as Harvester keeps its worker count apart from
how a worker is submitted.

The number of pilots follows the trials ready to run: a pilot is submitted for the ready
trials that the free slots of the live pilots (pending ones included) cannot take, never more
than `max` live at once. Pilots with nothing to do leave by themselves (idle_timeout), and
a pending pilot that no ready trial has needed for as long is cancelled (`surplus`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Supply:
    max_pilots: int
    trials_per_pilot: int  # how many trials one pilot runs side by side

    def to_submit(self, ready: int, free_slots: int, live: int) -> int:
        """Pilots to submit now. ready: trials waiting for a slot; free_slots: unbound slots
        of the live pilots that still take work; live: pilots pending or running."""
        short = ready - free_slots
        if short <= 0:
            return 0
        return max(0, min(math.ceil(short / self.trials_per_pilot), self.max_pilots - live))

    def surplus(self, ready: int, free_running: int, pending: int) -> int:
        """Pending pilots no ready trial needs: those beyond what the trials that the free
        slots of the running pilots cannot take would fill (ready, free_running: slots)."""
        needed = math.ceil(max(0, ready - free_running) / self.trials_per_pilot)
        return max(0, pending - needed)

    def capacity(self, accepting: int, live: int) -> int:
        """Trials the search may have in flight: the slots of the live pilots that take work
        (`accepting`: their slots; the `live` others are winding down), and of the pilots
        it may still submit (each of trials_per_pilot: the smallest a site's pilots are)."""
        return accepting + self.trials_per_pilot * max(0, self.max_pilots - live)

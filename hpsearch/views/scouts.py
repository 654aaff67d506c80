"""What the scouts resized (resources.time or mem `auto`, docs/brokerage.md#scouts), as the
store's events say it: each new sizing (`scouts` events, the driver's words with the measure
it came from) and each attempt killed at a scouted limit and run again at the ceiling (its
`attempt` event). What `hpsearch status` prints under the trials and the report lists
(hpsearch.report.brokerage)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hpsearch.store.reader import Reader

# The words of the attempt event hpsearch.driver.attempts stores for such a run.
AT_THE_CEILING = "at the scouts' limit"


@dataclass(frozen=True)
class Resize:
    """A scouts' decision: when, the trial it is about (None: every later trial) and the
    driver's words."""

    time: float
    trial: int | None
    message: str


def read_resizes(reader: Reader) -> list[Resize]:
    """Every sizing and every run at the ceiling, oldest first."""
    return [Resize(*row) for row in reader.db.execute(
        "select time, trial, message from events where kind = 'scouts' or (kind = 'attempt'"
        " and message like ?) order by id", (f"%{AT_THE_CEILING}%",))]


def summary(resizes: list[Resize]) -> str | None:
    """status's line: the sizing in force and how many attempts ran again at the ceiling;
    None where the scouts resized nothing."""
    sizings = [r for r in resizes if AT_THE_CEILING not in r.message]
    if not resizes:
        return None
    again = len(resizes) - len(sizings)
    latest = sizings[-1].message if sizings else "trials ask for the ceiling"
    return (f"scouts: {latest}; {len(sizings)} sizing{'s' * (len(sizings) != 1)}, {again} "
            f"attempt{'s' * (again != 1)} killed at a scouted limit ran again at the ceiling"
            " (hpsearch events NAME --kind scouts)")

"""When an attempt's code first called hpsearch.trial: the end of its start-up.

An attempt's start-up is the time from its recorded start (the store's `started`: when the
driver saw it start; for a Slurm job of its own, its submission) to the moment its code
first called hpsearch.trial (params(), trial_dir(), report(), ...): launching it, the
interpreter's imports, a wait for a warm server's. The trial writes that moment, once per
attempt, in first_call.<attempt> (hpsearch.trial._first_call); the driver reads it here
(only a regular file of the experiment's owner, opened without following a link or
blocking, a few bytes: hpsearch.store.trusted) and stores the seconds with the attempt.
The cost objectives leave them out (hpsearch.accounting.usage); the report's accounting of what
was held does not (docs/spec.md#cost-as-an-objective, docs/report.md).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from hpsearch.store.trusted import Untrusted, read_trusted
from hpsearch.trial import FIRST_CALL_FILE

LIMIT = 256  # bytes: {"time": ..., "pid": ...}


def first_call(trial_dir: Path, attempt: int) -> tuple[float | None, str | None]:
    """(the time the attempt's code first called hpsearch.trial, or None; why its file was
    refused, or None). None and no reason while there is none yet, or a part of one."""
    path = trial_dir / FIRST_CALL_FILE.format(attempt=attempt)
    try:
        data = read_trusted(path, LIMIT)
    except Untrusted as exc:
        return None, f"refused {path}: {exc}"
    except OSError:
        return None, None
    if data is None:
        return None, None
    try:
        when = json.loads(data)["time"]
    except (ValueError, KeyError, TypeError):
        return None, None
    if isinstance(when, bool) or not isinstance(when, (int, float)) or not math.isfinite(when):
        return None, None
    return float(when), None


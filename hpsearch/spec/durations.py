"""Durations as a spec writes them: seconds or "10m" (parse_duration), and Slurm time limits
("90" minutes, "01:30:00", "2-00:00:00": parse_time_limit), which users write in resources.time,
executor.pilots.time and search.timeout, and which sbatch, squeue and sacct print back (the
Slurm package reads those with parse_time_limit too).
"""

from __future__ import annotations

import math
import re
from typing import Any

DURATION_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|h|d)?$")


def parse_duration(value: Any) -> float:
    """90 | '90s' | '10m' | '2h' | '1d' | 'HH:MM:SS' -> seconds. Raises ValueError."""
    if isinstance(value, bool):
        raise ValueError
    if isinstance(value, (int, float)):
        if not 0 < value < math.inf:  # NaN and infinity too: no limit is written so
            raise ValueError
        return float(value)
    text = str(value).strip()
    if ":" in text:
        parts = [float(p) for p in text.split(":")]
        seconds = 0.0
        for p in parts:
            if not 0 <= p < math.inf:  # '1:nan', '1:-30', '1:inf'
                raise ValueError
            seconds = seconds * 60 + p
        if not 0 < seconds < math.inf:
            raise ValueError
        return seconds
    match = DURATION_RE.fullmatch(text)
    if not match:
        raise ValueError
    scale = {"s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2) or "s"]
    seconds = float(match.group(1)) * scale
    if not 0 < seconds < math.inf:
        raise ValueError
    return seconds


def parse_time_limit(text: str) -> float | None:
    """A Slurm time limit as sbatch --time takes it ("30" minutes, "MM:SS", "HH:MM:SS",
    "D-HH", "D-HH:MM", "D-HH:MM:SS") -> seconds; None for "UNLIMITED" or what it cannot read."""
    text = text.strip()
    if not re.fullmatch(r"(?:[0-9]+-)?[0-9]+(?::[0-9]+){0,2}", text):
        return None
    days, _, rest = text.rpartition("-") if "-" in text else ("", "", text)
    try:
        parts = [int(p) for p in rest.split(":")]
        day_count = int(days) if days else 0
    except ValueError:
        return None
    if days:  # D-HH[:MM[:SS]]
        parts += [0] * (3 - len(parts))
        hours, minutes, seconds = parts[:3]
    elif len(parts) == 1:
        hours, minutes, seconds = 0, parts[0], 0
    elif len(parts) == 2:
        hours, minutes, seconds = 0, parts[0], parts[1]
    else:
        hours, minutes, seconds = parts[:3]
    return float(((day_count * 24 + hours) * 60 + minutes) * 60 + seconds)


def time_limit_seconds(text: str) -> float | None:
    """The seconds of a Slurm time limit as sbatch --time takes it ("90" minutes,
    "01:30:00", "2-00:00:00"), or None for "UNLIMITED", zero, or what is not one."""
    try:
        seconds = parse_time_limit(text)
    except OverflowError:  # more digits than a float holds
        return None
    return seconds if seconds and seconds < math.inf else None

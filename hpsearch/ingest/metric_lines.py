"""Parsing one report line a trial wrote, which may hold anything: a metric record, or the
reason it is not one.

A record is {'step': int, 'time': float | None, name: float, ...}, and 'attempt': int where
the line says which attempt wrote it (`attempt` is not a metric name). Everything in it can be
stored as is: the step fits SQLite's 64-bit integer, every value is a float, every name is
short printable text. Number literals too long or too large for that (a 400-digit integer,
1e400) make the line malformed. NaN and infinity written as such (`NaN`, `Infinity` in
JSON, `nan`, `inf` in key=value pairs) are kept: that is how a diverged loss is reported,
and it fails the trial when it is the objective (docs/trial.md).
"""

from __future__ import annotations

import json
import math
import unicodedata
from typing import TypeGuard

STEP_MIN, STEP_MAX = -(1 << 63), (1 << 63) - 1
MAX_NUMBER_CHARS = 100  # a number literal longer than this is out of range
MAX_NAME_CHARS = 200
_SPELLED = {"nan", "inf", "infinity"}  # non-finite values written on purpose


class Malformed(ValueError):
    """Not a report line; str() is the reason."""


class OutOfRange:
    """A number literal a float or a 64-bit step cannot hold, as the parser saw it."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        return self.text if len(self.text) <= 24 else f"{self.text[:12]}...({len(self.text)} chars)"


def _json_int(text: str) -> int | OutOfRange:
    return OutOfRange(text) if len(text) > MAX_NUMBER_CHARS else int(text)


def _json_float(text: str) -> float | OutOfRange:
    value = float(text) if len(text) <= MAX_NUMBER_CHARS else math.inf
    return value if math.isfinite(value) else OutOfRange(text)


def loads(text: str) -> object:
    """json.loads that keeps NaN/Infinity and turns out-of-range literals into markers."""
    try:
        return json.loads(text, parse_int=_json_int, parse_float=_json_float)
    except RecursionError:
        raise Malformed("nested too deeply") from None
    except ValueError:
        raise Malformed("not JSON") from None


def json_record(text: str) -> dict:
    """The record of a JSON report line, or Malformed."""
    return record(loads(text))


def pairs_record(text: str) -> dict:
    """The record of `step=3 loss=0.25 ...` (the @hpsearch stdout form), or Malformed."""
    values = pairs(text, step_key="step")
    return record(values)


def pairs(text: str, step_key: str | None = None) -> dict:
    """{key: number} of `key=value ...`; the value of step_key parsed as an integer."""
    out: dict = {}
    for pair in text.split():
        key, sep, value = pair.partition("=")
        if not sep:
            raise Malformed(f"expected key=value pairs, got {pair[:40]!r}")
        out[key] = _pair_int(key, value) if key == step_key else _pair_float(key, value)
    return out


def _pair_int(key: str, text: str) -> int | OutOfRange:
    if len(text) > MAX_NUMBER_CHARS:
        return OutOfRange(text)
    try:
        return int(text)
    except ValueError:
        raise Malformed(f"{key}: expected an integer, got {text[:40]!r}") from None


def _pair_float(key: str, text: str) -> float | OutOfRange:
    if len(text) > MAX_NUMBER_CHARS:
        return OutOfRange(text)
    try:
        value = float(text)
    except ValueError:
        raise Malformed(f"{_name(key)}: expected a number, got {text[:40]!r}") from None
    if not math.isfinite(value) and text.strip().lstrip("+-").lower() not in _SPELLED:
        return OutOfRange(text)
    return value


def record(obj: object) -> dict:
    """A storable metric record from a parsed report, or Malformed: an integer step within
    64 bits, at least one metric, every metric a number a float holds, under a valid name."""
    if not isinstance(obj, dict):
        raise Malformed("expected a JSON object with an integer step")
    step = obj.get("step")
    if isinstance(step, OutOfRange) or (isinstance(step, int) and not isinstance(step, bool)
                                         and not STEP_MIN <= step <= STEP_MAX):
        raise Malformed(f"step {OutOfRange(str(step))} is out of the 64-bit range")
    if not isinstance(step, int) or isinstance(step, bool):
        raise Malformed("no integer step")
    when = obj.get("time")
    rec = {"step": step, "time": float(when) if _finite_number(when) else None}
    for key, value in obj.items():
        if key in ("step", "time", "attempt"):
            continue
        rec[_checked_name(key)] = number(key, value)
    if len(rec) == 2:
        raise Malformed("no metric values")
    if "attempt" in obj:  # the attempt that wrote it (trial.report); the reader credits it
        rec["attempt"] = _attempt(obj["attempt"])
    return rec


def _attempt(value: object) -> int:
    """The `attempt` of a report: a whole number from 1 (a JSON integer, or 2.0 from a
    key=value line), or Malformed."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not 1 <= value <= STEP_MAX or value != int(value):
        raise Malformed(f"attempt: expected a whole number from 1, got {str(value)[:40]!r}")
    return int(value)


def number(key: str, value: object) -> float:
    """A metric value as a float, or Malformed."""
    if isinstance(value, OutOfRange):
        raise Malformed(f"{_name(key)}: number out of range: {value}")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Malformed(f"{_name(key)}: expected a number, got {type(value).__name__}")
    return float(value)


def _finite_number(value: object) -> TypeGuard[int | float]:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


def _checked_name(key: str) -> str:
    if (not key or len(key) > MAX_NAME_CHARS
            or any(unicodedata.category(ch) in ("Cc", "Cs") for ch in key)):
        raise Malformed(f"metric name {_name(key)}: expected 1 to {MAX_NAME_CHARS} printable "
                        "characters")
    return key


def _name(key: str) -> str:
    """A name as a message shows it: short, escaped."""
    return ascii(key[:40]) + ("..." if len(key) > 40 else "")

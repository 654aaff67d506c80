"""Read what a trial wrote in its trial dir: metric reports, stdout report lines, result.json.

The driver calls TrialFiles.read_new() while the trial runs and once after it ends; only
whole lines are consumed, so a line being written is picked up on the next read.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

STDOUT_PREFIX = "@hpsearch "


@dataclass
class TrialFiles:
    trial_dir: Path
    offsets: dict[str, int] = field(default_factory=dict)
    result_from_stdout: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def read_new(self, final: bool = False) -> list[dict]:
        """New metric records since the last call: [{'step': n, 'time': t, name: value}].
        With final (the trial has ended), a last line without its newline is read too: a
        complete report is kept, a line cut short is skipped with a warning."""
        records = []
        for line in self._new_lines("metrics.jsonl", final):
            rec = self._parse_json(line, "metrics.jsonl")
            if rec is not None:
                records.append(rec)
        for line in self._new_lines("stdout.log", final):
            if not line.startswith(STDOUT_PREFIX):
                continue
            body = line[len(STDOUT_PREFIX):].strip()
            if body.startswith("result"):
                values = _parse_pairs(body[len("result"):])
                if values is None:
                    self._warn("stdout.log", line)
                else:
                    self.result_from_stdout.update(values)
                continue
            rec = self._parse_json(body, "stdout.log") if body.startswith("{") else \
                _record(_parse_pairs(body))
            if rec is None and not body.startswith("{"):
                self._warn("stdout.log", line)
            elif rec is not None:
                records.append(rec)
        return records

    def result(self) -> dict[str, float] | None:
        """Final metrics: result.json if the trial wrote one, else `@hpsearch result` lines."""
        path = self.trial_dir / "result.json"
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            return dict(self.result_from_stdout) or None
        except (OSError, ValueError):
            self._warn("result.json", "unreadable or not JSON")
            return None
        if not isinstance(data, dict):
            self._warn("result.json", "expected a JSON object of metric: number")
            return None
        return {k: float(v) for k, v in data.items()
                if isinstance(v, (int, float)) and not isinstance(v, bool)}

    def _new_lines(self, name: str, final: bool = False) -> list[str]:
        path = self.trial_dir / name
        offset = self.offsets.get(name, 0)
        try:
            with open(path, "rb") as fh:
                fh.seek(offset)
                data = fh.read()
        except FileNotFoundError:
            return []
        end = len(data) - 1 if final and data else data.rfind(b"\n")
        if end < 0:
            return []
        self.offsets[name] = offset + end + 1
        return data[:end + 1].decode("utf-8", errors="replace").splitlines()

    def _parse_json(self, line: str, source: str) -> dict | None:
        if not line.strip():
            return None
        try:
            rec = _record(json.loads(line))
        except ValueError:
            rec = None
        if rec is None:
            self._warn(source, line)
        return rec

    def _warn(self, source: str, line: str) -> None:
        self.warnings.append(f"{source}: skipped malformed report line: {line[:200]!r}")


def _parse_pairs(text: str) -> dict | None:
    out = {}
    for pair in text.split():
        key, sep, value = pair.partition("=")
        if not sep:
            return None
        try:
            out[key] = int(value) if key == "step" else float(value)
        except ValueError:
            return None
    return out


def _record(obj: object) -> dict | None:
    """A valid metric record, or None: needs an int step and numeric values."""
    if not isinstance(obj, dict):
        return None
    step = obj.get("step")
    if not isinstance(step, int) or isinstance(step, bool):
        return None
    rec = {"step": step, "time": obj.get("time") if isinstance(obj.get("time"), (int, float))
           else None}
    for key, value in obj.items():
        if key in ("step", "time"):
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        rec[str(key)] = float(value)
    return rec if len(rec) > 2 else None


def objective_values(result: dict[str, float] | None, last: dict[str, float],
                     metrics: list[str]) -> tuple[list[float] | None, str | None]:
    """The objective values from result (or else the last reported values), or an error."""
    values = []
    for name in metrics:
        value = (result or {}).get(name, last.get(name))
        if value is None:
            return None, f"objective metric '{name}' was never reported"
        if not math.isfinite(value):
            return None, f"objective metric '{name}' is {value}"
        values.append(value)
    return values, None


def rotate_logs(trial_dir: Path, previous_attempt: int) -> None:
    """Keep an earlier attempt's stdout/stderr as stdout.attempt<N>.log before a new one."""
    for name in ("stdout", "stderr"):
        path = trial_dir / f"{name}.log"
        if path.exists():
            os.replace(path, trial_dir / f"{name}.attempt{previous_attempt}.log")
    for name in ("exit_code", "result.json", "STOP"):
        try:
            (trial_dir / name).unlink()
        except FileNotFoundError:
            pass

"""Read what a trial wrote in its trial dir: metric reports (metrics.jsonl and `@hpsearch`
stdout lines) and result.json.

The driver calls TrialFiles.read_new() while the trial runs and once after it ends (final).
Each file is read on from where the last read stopped, in bounded memory (hpsearch.ingest.lines);
state() is stored in the same commit as the records it produced, and TrialFiles(dir, state)
continues from there after a resume, so every byte is read once. A line that is not a
report is skipped with a warning naming its file, line and reason (at most MAX_WARNINGS per
file and trial, then one saying that the rest are skipped without one).
"""

from __future__ import annotations

import math
import os
import stat
from pathlib import Path

from hpsearch.ingest.lines import (
    MAX_LINE,
    AppendedFile,
    Cursor,
    Line,
    excerpt,
    limited,
    read_small,
)
from hpsearch.ingest.metric_lines import (
    Malformed,
    OutOfRange,
    json_record,
    loads,
    number,
    pairs,
    pairs_record,
)
from hpsearch.ingest.not_found import NOT_FOUND_EXIT, missing_program

STDOUT_PREFIX = "@hpsearch "
_PREFIX = STDOUT_PREFIX.encode()
SAVE_EVERY = MAX_LINE  # bytes read without a report before the read position is saved anyway
_SOURCES = ("metrics.jsonl", "stdout.log")


class TrialFiles:
    """The report files of one trial, and where reading them stands."""

    def __init__(self, trial_dir: Path, state: object = None) -> None:
        """`state`: what state() returned when it was last stored (None: read from the start)."""
        saved = state if isinstance(state, dict) else {}
        cursors = _dict(saved.get("cursors"))
        self.trial_dir = Path(trial_dir)
        self.files = {name: AppendedFile(self.trial_dir / name, Cursor.from_json(cursors.get(name)),
                                         _PREFIX if name == "stdout.log" else b"")
                      for name in _SOURCES}
        self.result_from_stdout = {k: float(v) for k, v in _dict(saved.get("result")).items()
                                   if isinstance(v, (int, float)) and not isinstance(v, bool)}
        self.warned = {k: v for k, v in _dict(saved.get("warned")).items()
                       if isinstance(v, int) and not isinstance(v, bool)}
        stdout = self.files["stdout.log"]
        if not stdout.same_file():  # rotated for a new attempt: its result lines went with it
            stdout.cursor, self.result_from_stdout = Cursor(), {}
        self.warnings: list[str] = []
        self._final_result: tuple[dict[str, float] | None] | None = None
        self._saved, self._saved_bytes = self.state(), self._consumed()
        self._reported = False

    def state(self) -> dict:
        """Where reading stands, as JSON-able values: each file's cursor, the `@hpsearch result`
        values read, and the warnings given per file."""
        return {"cursors": {name: f.cursor.to_json() for name, f in self.files.items()},
                "result": dict(self.result_from_stdout), "warned": dict(self.warned)}

    def unsaved(self) -> dict | None:
        """state() if the store must get it with this read's records, else None: after a read
        that gave only non-report bytes, saving waits until SAVE_EVERY of them (a resumed
        driver reads those again, and they give nothing)."""
        now, consumed = self.state(), self._consumed()
        if now == self._saved or (not self._reported and now["result"] == self._saved["result"]
                                  and now["warned"] == self._saved["warned"]
                                  and abs(consumed - self._saved_bytes) < SAVE_EVERY):
            return None
        self._saved, self._saved_bytes, self._reported = now, consumed, False
        return now

    def read_new(self, final: bool = False) -> list[dict]:
        """New metric records since the last call: [{'step': n, 'time': t, name: value}].
        With final (the trial has ended), a last line without its newline is read too (a
        complete report is kept, a line cut short is skipped with a warning), and so is
        result.json."""
        records = []
        for line in self._lines("metrics.jsonl", final):
            if line.data.strip():
                records.append(self._parse("metrics.jsonl", line, line.data, json_record))
        stdout = self.files["stdout.log"]
        lines = self._lines("stdout.log", final)
        if stdout.restarted:  # a new attempt's stdout: the last one's result lines are gone
            self.result_from_stdout.clear()
        for line in lines:
            if line.data.startswith(_PREFIX):
                records.append(self._stdout_line(line))
        if final:
            self._final_result = (self._read_result(),)
        parsed = [rec for rec in records if rec is not None]
        self._reported = self._reported or bool(parsed) or final
        return parsed

    def result(self) -> dict[str, float] | None:
        """Final metrics: result.json if the trial wrote one, else `@hpsearch result` lines.
        After a final read_new(), what that read found."""
        if self._final_result is not None:
            return self._final_result[0]
        return self._read_result()

    def _lines(self, name: str, final: bool):
        source = self.files[name]
        lines = source.lines(final)
        if source.refused and self.warned.get(name, 0) == 0:
            self._warn(name, None, f"{source.refused}; not read")
        return lines

    def _stdout_line(self, line: Line) -> dict | None:
        body = line.data[len(_PREFIX):].strip()
        if body.startswith(b"result"):
            values = self._parse("stdout.log", line, body[len(b"result"):], _result_pairs)
            self.result_from_stdout.update(values or {})
            return None
        return self._parse("stdout.log", line, body,
                           json_record if body.startswith(b"{") else pairs_record)

    def _parse(self, source: str, line: Line, data: bytes, parse) -> dict | None:
        try:
            if line.too_long:
                raise Malformed(f"longer than {MAX_LINE} bytes; skipped to its end")
            return parse(data.decode("utf-8"))
        except UnicodeDecodeError:
            reason = "not UTF-8"
        except Malformed as exc:
            reason = str(exc)
        self._warn(source, line, reason)
        return None

    def _read_result(self) -> dict[str, float] | None:
        try:
            data = read_small(self.trial_dir / "result.json")
            if data is None:
                return dict(self.result_from_stdout) or None
            found = loads(data.decode("utf-8"))
        except (OSError, ValueError) as exc:  # Malformed and UnicodeDecodeError included
            self._warn("result.json", None, "not UTF-8" if isinstance(exc, UnicodeDecodeError)
                       else str(exc) if isinstance(exc, ValueError) else "unreadable")
            return None
        if not isinstance(found, dict):
            self._warn("result.json", None, "expected a JSON object of metric: number")
            return None
        out = {}
        for key, value in found.items():
            if isinstance(value, OutOfRange):
                self._warn("result.json", None, f"{key[:40]!r}: number out of range: {value}")
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                out[key] = float(value)
        return out

    def _warn(self, source: str, line: Line | None, reason: str) -> None:
        message = (f"{source}: ignored: {reason}" if line is None else
                   f"{source} line {line.number}: skipped malformed report line: "
                   f"{excerpt(line)} ({reason})")
        shown = limited(self.warned, source, message)
        if shown:
            self.warnings.append(shown)

    def _consumed(self) -> int:
        return sum(f.cursor.offset for f in self.files.values())


def _result_pairs(text: str) -> dict[str, float]:
    return {key: number(key, value) for key, value in pairs(text).items()}


def _dict(value: object) -> dict:
    return value if isinstance(value, dict) else {}


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


def with_stderr_tail(error: str, trial_dir: Path, lines: int = 5) -> str:
    """The error plus the last lines of the attempt's stderr, so `status` shows the cause.
    After exit code 127, the first line names the program not found, and where
    (hpsearch.ingest.not_found): srun's lines at the end would hide it."""
    try:  # never a blocking open (a FIFO) nor an endless read (a link to /dev/zero)
        fd = os.open(trial_dir / "stderr.log", os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return error
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return error
        fh.seek(0, 2)
        fh.seek(max(0, fh.tell() - 4096))
        read = fh.read(4096).decode("utf-8", "replace").splitlines()
    first, newline, rest = error.partition("\n")
    if first.split(" (")[0] == f"exit code {NOT_FOUND_EXIT}" and (
            missing := missing_program(read)):
        error = f"{first}: {missing}{newline}{rest}"
    tail = read[-lines:]
    return error + ("\n" + "\n".join(tail) if tail else "")


def exit_time(trial_dir: Path) -> float | None:
    """When the attempt's process ended: the time of the exit_code file its wrapper shell
    writes on exit (rotated away before each attempt), None if there is none."""
    try:
        return (Path(trial_dir) / "exit_code").stat().st_mtime
    except OSError:
        return None

"""Files a trial writes one per rank or node (timing.0.jsonl, timing.1.jsonl, ...; gpu.0.jsonl,
...), each read on from where the last read stopped (hpsearch.ingest.lines.AppendedFile and
its Cursor). The cursors are stored with what the lines added up to, in one commit, so a
resumed driver reads no line twice: state() is what to store, unsaved() says when it moved."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from hpsearch.ingest.lines import AppendedFile, Cursor


class NumberedFiles:
    """The files `pattern` (with one `{}` field: the number) names in `trial_dir`, numbered
    from 0 to below `limit`, and their cursors."""

    def __init__(self, trial_dir: Path, pattern: str, limit: int, cursors: object) -> None:
        """`cursors`: what cursors() returned when it was last stored (else from the start)."""
        self.trial_dir = Path(trial_dir)
        self.pattern = pattern
        self.limit = limit
        saved = cursors if isinstance(cursors, dict) else {}
        self.files = {int(n): AppendedFile(self.path(int(n)), Cursor.from_json(c))
                      for n, c in saved.items() if str(n).isdigit() and int(n) < limit}

    def path(self, number: int) -> Path:
        return self.trial_dir / self.pattern.format(number)

    def cursors(self) -> dict:
        return {str(n): f.cursor.to_json() for n, f in sorted(self.files.items())}

    def sources(self) -> Iterator[tuple[int, AppendedFile]]:
        """Each file from number 0 up to the first that is not there."""
        for number in range(self.limit):
            source = self.files.get(number)
            if source is None:
                if not os.path.lexists(self.path(number)):
                    return
                source = self.files[number] = AppendedFile(self.path(number))
            yield number, source


class SavedState:
    """unsaved() for a reader whose state() is stored: the state if it moved since it was
    last handed out (or since the reader was made), else None."""

    _saved: object = None

    def state(self) -> object:
        raise NotImplementedError

    def mark_saved(self) -> None:
        self._saved = self.state()

    def unsaved(self) -> dict | None:
        """state() if it moved since it was last stored, else None."""
        now = self.state()
        if now == self._saved:
            return None
        self._saved = now
        return now  # type: ignore[return-value]

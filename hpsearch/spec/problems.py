"""Every problem of a spec, in file order, as a compiler reports them (issue 38).

The validator stops at the first problem of a key, not of the file: each section, optional
key, objective and parameter is checked on its own (`recover`), an unknown key is noted and
left out, a missing required key is noted, and the rest goes on. What would only repeat an
earlier problem is not reported:
- a key that failed counts as failed, and checks that read it are skipped by their callers
  (`broken`): a parameter whose type is wrong is not then "named by no placeholder";
- once something inside a section failed, a later problem that section raises (most often a
  check between its keys, fed a default) is dropped;
- "missing required key 'x'" is dropped in a mapping where an unknown key was reported (it
  may be 'x' misspelt: `lwo: 0.2` beside `low: 0.1` is likely the missing `high`);
- checks of the spec as a whole (the launcher, pilots, cost objectives) run once its parts
  are valid.
YAML syntax errors stop at the first, as the file cannot be read past it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from hpsearch.errors import BadInput, BadInputs
from hpsearch.spec.yamlpos import KeyPath, dotted


class _Failed:
    def __repr__(self) -> str:
        return "FAILED"


FAILED: Any = _Failed()  # what `recover` gives for a value that had a problem
_MISSING = re.compile(r"^missing required key '([^']+)'")


class Problems:
    def __init__(self) -> None:
        self.found: list[BadInput] = []
        self.failed: list[KeyPath] = []   # keys whose value had a problem, in order
        self.unknown_in: set[str | None] = set()  # mappings with an unknown key

    def note(self, exc: BadInput) -> None:
        """Report `exc` (each of a BadInputs), unless it is already reported or is a
        missing key of a mapping that has an unknown one."""
        if isinstance(exc, BadInputs):
            for one in exc.errors:
                self.note(one)
            return
        if _MISSING.match(exc.detail) and exc.key in self.unknown_in:
            return
        if all(str(exc) != str(seen) for seen in self.found):
            self.found.append(exc)

    def skip(self, path: KeyPath) -> None:
        """`path` is failed because of a problem already reported (nothing new to say)."""
        self.failed.append(path)

    def recover(self, path: KeyPath, check: Callable[..., Any], *args: Any,
                fallback: Any = FAILED) -> Any:
        """check(*args), or `fallback` once its BadInput is noted and `path` marked failed.
        A problem raised after one inside it was noted is taken as a consequence of it."""
        before = len(self.failed)
        try:
            return check(*args)
        except BadInput as exc:
            if len(self.failed) == before:
                self.note(exc)
            self.failed.append(path)
            return fallback

    def broken(self, *paths: KeyPath) -> bool:
        """Whether any of `paths`, or a key inside one, failed."""
        return any(f[:len(p)] == p for f in self.failed for p in paths)

    def unknown_key(self, path: KeyPath, exc: BadInput) -> None:
        """Report an unknown key of the mapping at `path`."""
        self.unknown_in.add(dotted(path) or None)
        self.note(exc)

    def raise_found(self) -> None:
        """Raise what was found, in file order: one BadInput, or BadInputs for several."""
        if not self.found:
            return
        ordered = sorted(self.found, key=lambda e: e.line or 0)  # stable: same line, in order
        raise ordered[0] if len(ordered) == 1 else BadInputs(ordered)

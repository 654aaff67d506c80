"""One registry per seam (docs/architecture.md#seams): the names a spec may write, each with
the facts the rest of hpsearch asks about it and the implementation behind it.

A seam's package owns its registry (search/registry.py, executors/registry.py,
launch/registry.py) and lists its built-in pieces there; the spec schema, `validate`, `plan`
and the docs take their names from it, so adding a piece is one module and one entry in its
own package, never a branch on its name elsewhere (../shared/SEAMS.md). An entry may name its
implementation as "package.module:attribute", imported the first time it is used: an
executor that lives above the executors package (the pilots, in hpsearch.pilot) is then listed
without an import that would tie the packages into a cycle, as submitit and snakemake find
their plugins. Other packages add entries through the seam's entry-point group
(`[project.entry-points."hpsearch.executors"]`), read the first time names are listed.
"""

from __future__ import annotations

import difflib
import functools
import importlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Generic, TypeVar, cast

if TYPE_CHECKING:
    from importlib.metadata import EntryPoints

T = TypeVar("T")


class UnknownName(LookupError):
    """A name no entry of the registry has; the message lists the known ones."""


class Registry(Generic[T]):
    """Entries of one seam by name, in the order they were added (the order docs and error
    messages list them in)."""

    def __init__(self, seam: str, group: str | None = None) -> None:
        self.seam = seam          # what one entry is, for messages: "strategy", "executor"
        self.group = group        # entry-point group of plugins, or None
        self._entries: dict[str, T] = {}
        self._plugins_read = group is None

    def add(self, name: str, entry: T) -> T:
        if name in self._entries:
            raise ValueError(f"{self.seam} {name!r} is registered twice")
        self._entries[name] = entry
        return entry

    def names(self) -> tuple[str, ...]:
        self._read_plugins()
        return tuple(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self.names()

    def __iter__(self) -> Iterator[T]:
        return iter([self._entries[n] for n in self.names()])

    def get(self, name: str) -> T:
        if name not in self.names():
            close = difflib.get_close_matches(str(name), self.names(), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise UnknownName(f"unknown {self.seam} {name!r}; expected one of "
                              f"{', '.join(self.names())}{hint}")
        return self._entries[name]

    def _read_plugins(self) -> None:
        if self._plugins_read:
            return
        self._plugins_read = True
        for point in _entry_points().select(group=self.group or ""):
            if point.name not in self._entries:
                self._entries[point.name] = point.load()


@functools.cache
def _entry_points() -> EntryPoints:
    """Every installed distribution's entry points, read once: each registry's own
    entry_points(group=...) read every distribution's metadata again (four registries,
    about 0.04 s of each `hpsearch` command, as benchmarks/scale.py's watch profile saw;
    here 0.015 s read once against 0.040 s four times). Before Python 3.12 this is
    SelectableGroups (typeshed for 3.10 says so): its select(group=...), as EntryPoints',
    picks from what was read."""
    # imported here: importlib.metadata costs 39 ms at every start of a process that only
    # imports a registry (a pilot's node agent, hpsearch.pilot.node_agent), not looks in it
    from importlib.metadata import entry_points

    return cast("EntryPoints", entry_points())


def load(target: str) -> object:
    """The object "package.module:attribute" names, importing its module."""
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)

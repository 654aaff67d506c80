"""Read an untrusted spec file: bounded size, UTF-8 only, and a YAML node tree whose depth and
alias expansion are bounded before anything is expanded.

A spec describes a search in a few dozen lines; these limits are far above any real spec and
far below what would hang or crash the process ("billion laughs" aliases, 100,000 nested
brackets, a 50 MB file passed by mistake). Each refusal is a BadInput naming the file and line.
"""

from __future__ import annotations

import codecs
import os
import stat
from pathlib import Path

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.resolver import Resolver

from hpsearch.errors import BadInput

MAX_SPEC_BYTES = 1 << 20  # 1 MiB
MAX_DEPTH = 64            # nested mappings/lists, counting what aliases bring in
MAX_NODES = 100_000       # YAML nodes once every alias is expanded

_WIDE_BOMS = ((codecs.BOM_UTF32_LE, "UTF-32"), (codecs.BOM_UTF32_BE, "UTF-32"),
              (codecs.BOM_UTF16_LE, "UTF-16"), (codecs.BOM_UTF16_BE, "UTF-16"))


def read_spec_text(path: Path) -> str:
    """The text of the spec file at `path`, read once and at most MAX_SPEC_BYTES of it."""
    file = str(path)
    try:
        # O_NONBLOCK: a FIFO with no writer must not hang the command (it reads as empty);
        # a pipe that has a writer, as from `<(envsubst < spec.yaml)`, is read to its end.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with open(fd, "rb") as stream:
            info = os.fstat(fd)
            size = info.st_size if stat.S_ISREG(info.st_mode) else 0
            if not stat.S_ISREG(info.st_mode):
                os.set_blocking(fd, True)
            data = b"" if size > MAX_SPEC_BYTES else stream.read(MAX_SPEC_BYTES + 1)
    except OSError as exc:
        raise BadInput(f"cannot read spec: {exc.strerror or exc}", file) from None
    if size > MAX_SPEC_BYTES or len(data) > MAX_SPEC_BYTES:
        shown = f"{size:,} bytes" if size > MAX_SPEC_BYTES else "more than that"
        raise BadInput(f"the spec is too large ({shown}); a spec may be at most "
                       f"{MAX_SPEC_BYTES:,} bytes (1 MiB): is this the right file?", file)
    return decode_spec(data, file)


def decode_spec(data: bytes, file: str) -> str:
    """UTF-8 text from the file's bytes; a UTF-8 byte order mark is dropped (as YAML
    parsers do), any other encoding is refused with the offset and line of the first bad
    byte."""
    for bom, encoding in _WIDE_BOMS:
        if data.startswith(bom):
            raise BadInput(f"the file is {encoding} (it starts with a {encoding} byte order "
                           f"mark); a spec must be UTF-8: convert it, e.g. `iconv -f "
                           f"{encoding} -t UTF-8 {file} > {_utf8_name(file)}`", file, 1)
    skipped = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        text = data[skipped:].decode("utf-8")
    except UnicodeDecodeError as exc:
        at = skipped + exc.start
        raise _bad_byte(data, at, f"byte 0x{data[at]:02x} is not UTF-8", file) from None
    nul = text.find("\0")
    if nul >= 0:
        at = skipped + len(text[:nul].encode())
        raise _bad_byte(data, at, "a NUL byte is not allowed (is this file UTF-16 without a "
                        "byte order mark, or not text?)", file)
    return text


def _utf8_name(file: str) -> str:
    path = Path(file)
    return str(path.with_name(f"{path.stem}-utf8{path.suffix}"))


def _bad_byte(data: bytes, at: int, what: str, file: str) -> BadInput:
    line_start = data.rfind(b"\n", 0, at) + 1
    return BadInput(f"{what} (byte offset {at}, column {at - line_start + 1}); a spec must be "
                    "UTF-8 text", file, data.count(b"\n", 0, at) + 1)


def compose(text: str, file: str) -> yaml.Node | None:
    """The YAML node tree of `text` (None if it holds no document). Aliases stay shared
    nodes, so nothing is expanded here; raises BadInput past MAX_DEPTH or MAX_NODES, and
    yaml.YAMLError on bad syntax.

    libyaml's parser (where PyYAML has it) makes the events, 7x faster than PyYAML's own
    (a spec of 10,000 parameters: 0.66 s against 4.8 s); the nodes are composed here either
    way, with the bounds. Bad syntax is parsed again by PyYAML's parser, whose messages and
    positions (characters, not bytes) the error messages are written against."""
    if _FastLoader is not None:
        fast = _FastLoader(text, file)
        try:
            return fast.get_single_node()
        except yaml.YAMLError:
            pass  # PyYAML's own parser says what is wrong, below
        finally:
            fast.dispose()
    loader = _BoundedLoader(text, file)
    try:
        return loader.get_single_node()
    finally:
        loader.dispose()


class _Bounded(Composer):
    """A composer that counts, for every node, how many nodes and how many levels it expands
    to (memoized per node, so an alias costs one lookup), and stops at a limit. PyYAML's
    composer recurses once per level: the depth check also keeps it far from Python's
    recursion limit."""

    file: str

    def _bounds(self, file: str) -> None:
        self.file = file
        self.depth = 0     # levels of the node being composed
        self.deepest = 0   # deepest level reached inside it, aliases expanded
        self.count = 0     # nodes so far, aliases expanded
        self.sizes: dict[int, tuple[int, int]] = {}  # id(node) -> (nodes, levels) expanded

    def compose_node(self, parent, index):
        mark = self.peek_event().start_mark
        if self.check_event(yaml.AliasEvent):
            anchor = self.peek_event().anchor
            node = super().compose_node(parent, index)
            if id(node) not in self.sizes:
                raise BadInput(f"alias *{anchor} refers to a node that contains it (a cycle "
                               "has no end when expanded)", self.file, mark.line + 1)
            nodes, levels = self.sizes[id(node)]
            self._grow(nodes, self.depth + levels, mark, f"alias *{anchor}")
            return node
        self.depth += 1
        outer, before = self.deepest, self.count
        self.deepest = 0
        self._grow(1, self.depth, mark, "this value")
        node = super().compose_node(parent, index)
        self.sizes[id(node)] = (self.count - before, self.deepest - self.depth + 1)
        self.deepest = max(outer, self.deepest)
        self.depth -= 1
        return node

    def _grow(self, nodes: int, depth: int, mark, what: str) -> None:
        self.count += nodes
        self.deepest = max(self.deepest, depth)
        if depth > MAX_DEPTH:
            raise BadInput(f"{what} nests mappings and lists deeper than {MAX_DEPTH} levels; "
                           "a spec needs only a few", self.file, mark.line + 1)
        if self.count > MAX_NODES:
            grown = f" (it adds {nodes:,})" if nodes > 1 else ""
            raise BadInput(f"the spec expands to more than {MAX_NODES:,} YAML nodes at {what}"
                           f"{grown}; anchors and aliases that multiply (\"billion laughs\") "
                           "are refused", self.file, mark.line + 1)


class _BoundedLoader(_Bounded, yaml.SafeLoader):
    """PyYAML's own parser, in Python."""

    def __init__(self, text: str, file: str) -> None:
        yaml.SafeLoader.__init__(self, text)
        self._bounds(file)


_FastLoader: type | None = None
if yaml.__with_libyaml__:
    from yaml._yaml import CParser

    class _CBoundedLoader(_Bounded, CParser, SafeConstructor, Resolver):
        """libyaml's parser under the same composer (CParser's own composer, in C, is
        not used: _Bounded's comes first)."""

        def __init__(self, text: str, file: str) -> None:
            CParser.__init__(self, text)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)
            Composer.__init__(self)
            self._bounds(file)

    _FastLoader = _CBoundedLoader

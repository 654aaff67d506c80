"""Load YAML into plain Python values while remembering the line of every key.

PyYAML's safe loader drops positions and silently keeps the last of two equal keys;
composing the node tree ourselves keeps both the line numbers (for error messages) and
lets us reject duplicate keys.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from hpsearch.errors import BadInput
from hpsearch.spec.loading import compose

KeyPath = tuple  # e.g. ("search", "space", "lr", "low")

_MAP_TAG, _SEQ_TAG = "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"
_INT_TAG, _FLOAT_TAG, _STR_TAG, _MERGE_TAG = (f"tag:yaml.org,2002:{t}"
                                              for t in ("int", "float", "str", "merge"))
_EXPONENT_FLOAT = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)[eE][-+]?[0-9]+$")


def dotted(path: KeyPath) -> str:
    """('search', 'space', 0) -> 'search.space[0]'"""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def nearest_line(lines: dict[KeyPath, int], path: KeyPath) -> int | None:
    """The line of `path`, or of the nearest key enclosing it that has one."""
    for n in range(len(path), -1, -1):
        if path[:n] in lines:
            return lines[path[:n]]
    return None


def load_yaml_with_lines(text: str, file: str) -> tuple[Any, dict[KeyPath, int]]:
    """Parse `text`; return (value, {key path: 1-based line}). Raises BadInput on bad YAML."""
    try:
        root = compose(text, file)
    except yaml.reader.ReaderError as exc:  # a control character in the text itself
        raise BadInput(f"control character U+{exc.character:04X} is not allowed in a spec "
                       f"(column {exc.position - text.rfind(chr(10), 0, exc.position)})",
                       file, text.count("\n", 0, exc.position) + 1) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        context, start = getattr(exc, "context", None), getattr(exc, "context_mark", None)
        if context and start is not None and start.line + 1 != line:
            # An unclosed quote or bracket is found only at the end: say where it opened.
            problem += f" ({context} that starts on line {start.line + 1})"
        raise BadInput(f"YAML syntax error: {problem}", file, line) from None
    lines: dict[KeyPath, int] = {}
    if root is None:
        return None, lines
    constructor = yaml.SafeLoader("")
    value = _convert(root, (), lines, constructor, file)
    return value, lines


def _convert(node: yaml.Node, path: KeyPath, lines: dict, constructor: Any, file: str) -> Any:
    lines[path] = node.start_mark.line + 1
    if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)) \
            and node.tag not in (_MAP_TAG, _SEQ_TAG):  # !foo {a: 1}, !!set, !!omap, !!pairs
        raise BadInput(f"bad value: unknown YAML tag {node.tag!r}; a spec holds plain values "
                       "(remove the tag)", file, node.start_mark.line + 1, dotted(path) or None)
    if isinstance(node, yaml.MappingNode):
        out = _merged(node, path, lines, constructor, file)
        own: set = set()
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            key = _construct(key_node, path, constructor, file)
            if not isinstance(key, (str, int, float)):  # bool is an int
                raise BadInput(f"expected a name as key; got {_key_kind(key)} (a key is "
                               "a plain word or quoted text)", file,
                               key_node.start_mark.line + 1, dotted(path) or None)
            if key in own:
                raise BadInput(f"duplicate key '{key}' (each name may appear once)", file,
                               key_node.start_mark.line + 1, dotted(path + (key,)))
            own.add(key)
            out[key] = _convert(value_node, path + (key,), lines, constructor, file)
            lines[path + (key,)] = key_node.start_mark.line + 1
        lines[path] = node.start_mark.line + 1
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_convert(child, path + (i,), lines, constructor, file)
                for i, child in enumerate(node.value)]
    # a plain scalar (style None from PyYAML, "" from libyaml): numbers as YAML 1.2 reads them
    if not node.style:
        if node.tag in (_INT_TAG, _FLOAT_TAG) and ":" in node.value:
            return node.value  # 2:00:00 is a time, not the base-60 integer 7200
        if node.tag == _STR_TAG and _EXPONENT_FLOAT.match(node.value):
            return float(node.value)  # 1e-5 is a number, not a string
    return _construct(node, path, constructor, file)


def _merged(node: yaml.MappingNode, path: KeyPath, lines: dict, constructor: Any,
            file: str) -> dict:
    """The keys a mapping takes from `<<: *anchor` (or `<<: [*a, *b]`, the first one winning),
    as YAML's merge key gives them; the mapping's own keys then override these."""
    out: dict = {}
    for key_node, value_node in node.value:
        if key_node.tag != _MERGE_TAG:
            continue
        sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
        for source in reversed(sources):
            if not isinstance(source, yaml.MappingNode):
                raise BadInput("the merge key '<<' takes a mapping (an alias such as *defaults) "
                               "or a list of them", file, source.start_mark.line + 1,
                               dotted(path) or None)
            out.update(_convert(source, path, lines, constructor, file))
    return out


def _construct(node: yaml.Node, path: KeyPath, constructor: Any, file: str) -> Any:
    try:
        return constructor.construct_object(node, deep=True)
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        if node.tag.startswith("!") or "constructor for the tag" in problem:
            problem = (f"unknown YAML tag {node.tag!r}; a spec holds plain values (remove the "
                       "tag, or quote the value)")
        raise BadInput(f"bad value: {problem}", file, node.start_mark.line + 1,
                       dotted(path) or None) from None


def _key_kind(key: Any) -> str:
    return "nothing (null)" if key is None else f"a {type(key).__name__} {str(key)[:40]!r}"

"""Slurm hostlists: `node[01-03,7],gpu5` <-> ['node01', 'node02', 'node03', 'node7', 'gpu5'].

Handles zero padding, several bracket groups in one name (`rack[1-2]-n[01-02]`), and
comma-separated mixes of prefixes. Malformed input raises ValueError naming the problem.
"""

from __future__ import annotations

import re

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def _split_top(text: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
            if depth > 1:
                raise ValueError(f"nested '[' in hostlist {text!r}")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unmatched ']' in hostlist {text!r}")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError(f"unmatched '[' in hostlist {text!r}")
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _expand_ranges(body: str, whole: str) -> list[str]:
    out: list[str] = []
    for item in body.split(","):
        match = _RANGE.match(item.strip())
        if not match:
            raise ValueError(f"bad range {item!r} in hostlist {whole!r}")
        lo, hi = match.group(1), match.group(2) or match.group(1)
        if int(hi) < int(lo):
            raise ValueError(f"descending range {item!r} in hostlist {whole!r}")
        width = len(lo) if lo.startswith("0") or len(lo) == len(hi) else 0
        out.extend(str(n).zfill(width) for n in range(int(lo), int(hi) + 1))
    return out


def expand(hostlist: str) -> list[str]:
    """All host names of a hostlist expression, in order, duplicates kept out."""
    names: list[str] = []
    for part in _split_top(hostlist):
        pieces = re.split(r"(\[[^\]]*\])", part)
        combos = [""]
        for piece in pieces:
            if piece.startswith("["):
                combos = [c + v for c in combos for v in _expand_ranges(piece[1:-1], hostlist)]
            elif piece:
                combos = [c + piece for c in combos]
        names.extend(combos)
    return list(dict.fromkeys(names))


def compress(names: list[str]) -> str:
    """A compact hostlist for names (one trailing number range per prefix)."""
    groups: dict[tuple[str, int], list[int]] = {}
    plain: list[str] = []
    split = []
    for name in dict.fromkeys(names):
        match = re.match(r"^(.*?)(\d+)$", name)
        if match:
            split.append(match.groups())
        else:
            plain.append(name)
    # n09 is zero-padded to width 2, so n10 belongs with it; node9 and node10 are unpadded.
    padded = {(prefix, len(d)) for prefix, d in split if d.startswith("0") and len(d) > 1}
    for prefix, digits in split:
        width = len(digits) if (prefix, len(digits)) in padded else 0
        groups.setdefault((prefix, width), []).append(int(digits))
    out = list(plain)
    for (prefix, width), numbers in groups.items():
        numbers = sorted(set(numbers))
        ranges, start, prev = [], numbers[0], numbers[0]
        for n in numbers[1:] + [None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            lo, hi = str(start).zfill(width), str(prev).zfill(width)
            ranges.append(lo if start == prev else f"{lo}-{hi}")
            if n is not None:
                start = prev = n
        if len(numbers) == 1:
            out.append(f"{prefix}{ranges[0]}")
        else:
            out.append(f"{prefix}[{','.join(ranges)}]")
    return ",".join(out)

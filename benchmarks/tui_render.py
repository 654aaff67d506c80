"""Responsiveness of the live view (`hpsearch watch`): one snapshot + render of an 80x24
screen over a store of N trials, against the same over 100 trials.

The view redraws every 0.5 s, so one snapshot + render must take well under that whatever
the store holds. Its queries are bounded (state index, at most one screen of trials, metrics
by primary key, the best value cached per completed count), so the time should barely grow
with N.

Goal: at 10,000 trials, at most 2.0 x the 100-trial time and under 100 ms.

    python benchmarks/tui_render.py                  # N = 10,000
    python benchmarks/tui_render.py --trials 50000 --repeat 30
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console  # noqa: E402

from hpsearch.tui.model import SnapshotSource  # noqa: E402
from hpsearch.tui.view import render  # noqa: E402
from tests.tui.conftest import build_store  # noqa: E402


def _time(exp_dir: Path, repeat: int) -> tuple[float, float]:
    """(median seconds of a first snapshot with a cold best-value cache, median of a
    refresh), each snapshot + render of 80x24."""
    cold, warm = [], []
    for _ in range(repeat):
        source = SnapshotSource(exp_dir)
        for bucket in (cold, warm):
            began = time.perf_counter()
            snap = source.snapshot(rows=24)
            Console(file=io.StringIO(), width=80, height=24).print(render(snap, 80, 24))
            bucket.append(time.perf_counter() - began)
        source.close()
    return statistics.median(cold), statistics.median(warm)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        began = time.perf_counter()
        small = build_store(Path(tmp) / "small", 100)
        big = build_store(Path(tmp) / "big", args.trials)
        print(f"built stores of 100 and {args.trials} trials in "
              f"{time.perf_counter() - began:.1f}s")
        base_cold, base_warm = _time(small, args.repeat)
        big_cold, big_warm = _time(big, args.repeat)
    print(f"{'trials':>8} {'first snapshot ms':>18} {'refresh ms':>11}")
    print(f"{100:>8} {base_cold * 1e3:>18.1f} {base_warm * 1e3:>11.1f}")
    print(f"{args.trials:>8} {big_cold * 1e3:>18.1f} {big_warm * 1e3:>11.1f}")
    ratio = big_warm / base_warm
    print(f"ratio refresh {args.trials} / 100 trials: {ratio:.2f} x "
          f"(first snapshot: {big_cold / base_cold:.2f} x)")
    ok = ratio <= 2.0 and big_warm < 0.1
    print(f"{'ok' if ok else 'MISS'}: goal <= 2.0 x and < 100 ms per refresh")


if __name__ == "__main__":
    main()

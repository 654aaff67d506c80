"""For each pruned trial of a search: seconds from the driver's stop request to the end of the
attempt, and how each rank left (the example prints `exit N after E epochs on rank R`).
    python benchmarks/gpu/stop_latency.py RUNS_DIR NAME"""

from __future__ import annotations

import json
import sqlite3
import statistics
import sys
from pathlib import Path


def main(runs: str, name: str) -> None:
    root = Path(runs) / name
    db = sqlite3.connect(f"file:{root / 'store.sqlite'}?mode=ro", uri=True)
    waits = []
    for tid, request in db.execute("select id, stop_request from trials "
                                   "where state = 'pruned' order by id"):
        asked = json.loads(request)["time"]
        (finished,) = db.execute("select max(finished) from attempts where trial = ?",
                                 (tid,)).fetchone()
        out = (root / "trials" / f"{tid:05d}" / "stdout.log").read_text(errors="replace")
        ranks = [line.split(":")[0] for line in out.splitlines() if line.startswith("exit ")]
        waits.append(finished - asked)
        print(f"trial {tid}: stopped {finished - asked:.2f} s after the stop request; "
              f"ranks that left by themselves: {ranks or 'none'}")
    if waits:
        print(f"pruned trials: {len(waits)}, stop to end median {statistics.median(waits):.2f} s "
              f"(min {min(waits):.2f}, max {max(waits):.2f})")


if __name__ == "__main__":
    main(*sys.argv[1:3])

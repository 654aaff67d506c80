"""Reading trial output costs time in proportion to the new bytes, not to the file's size.

For each size S (default 1 MiB, 64 MiB, 1 GiB), a trial dir gets a stdout.log of S bytes
(log lines, one `@hpsearch step=...` report every 100 lines) and a metrics.jsonl. The
driver's reader (hpsearch.ingest.trial_files.TrialFiles, as the driver uses it every second per running
trial) reads it once (the catch-up, MAX_READ bytes a call while the trial runs), then R
rounds of: the trial appends A bytes (default 64 KiB, with its reports) and the reader
reads what is new. Printed per S: the median wall time of one read of A new bytes, of one
read with nothing new, the bytes each read took from the file, and the catch-up rate. Then
a resumed reader (built from the state the driver stores) reads A appended bytes: the bytes
it read must be the A new ones.

Goals (issue 14): a read of A new bytes at the largest S at most 1.5 x the one at the
smallest; every read reads only new bytes.

    python benchmarks/ingest.py
    python benchmarks/ingest.py --sizes 1 256 --append-kib 1024 --rounds 50
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from hpsearch.ingest.trial_files import TrialFiles  # noqa: E402

NOISE = b"epoch 3 batch 1200/5000 lr 0.001 throughput 5120 samples/s grad_norm 1.73\n"


def block(size: int, step: int) -> tuple[bytes, int]:
    """About `size` bytes of stdout: log lines and a report every 100 lines. Returns the
    bytes and the next step."""
    out, lines = bytearray(), 0
    while len(out) < size:
        lines += 1
        if lines % 100 == 0:
            out += b"@hpsearch step=%d loss=%.6f\n" % (step, 1.0 / (step + 1))
            step += 1
        else:
            out += NOISE
    return bytes(out), step


def grow(trial_dir: Path, size: int) -> int:
    """stdout.log of `size` bytes (written in 4 MiB blocks) and a metrics.jsonl."""
    step = 0
    with open(trial_dir / "stdout.log", "wb") as out, \
            open(trial_dir / "metrics.jsonl", "w") as metrics:
        written = 0
        while written < size:
            data, step = block(min(4 << 20, size - written), step)
            out.write(data)
            written += len(data)
            metrics.write(json.dumps({"step": step, "acc": 0.5}) + "\n")
    return step


def bytes_read(files: TrialFiles) -> int:
    return sum(f.bytes_read for f in files.files.values())


def measure(root: Path, size: int, append: int, rounds: int) -> dict:
    trial_dir = root / f"trial-{size}"
    trial_dir.mkdir()
    step = grow(trial_dir, size)
    files = TrialFiles(trial_dir)
    began = time.perf_counter()
    while bytes_read(files) < (trial_dir / "stdout.log").stat().st_size:
        files.read_new()  # the catch-up: MAX_READ bytes a call
    catch_up = time.perf_counter() - began
    new_reads, idle_reads, read_per_call, reports = [], [], [], 0
    for i in range(rounds):
        data, step = block(append, step)
        with open(trial_dir / "stdout.log", "ab") as out:
            out.write(data)
        with open(trial_dir / "metrics.jsonl", "a") as metrics:
            metrics.write(json.dumps({"step": step, "acc": 0.5}) + "\n")
        before = bytes_read(files)
        began = time.perf_counter()
        reports += len(files.read_new())
        new_reads.append(time.perf_counter() - began)
        read_per_call.append(bytes_read(files) - before)
        files.unsaved()  # what the driver stores with the records
        began = time.perf_counter()
        files.read_new()
        idle_reads.append(time.perf_counter() - began)
    # a resumed driver: a reader from the stored state reads only what was appended since
    state = files.state()
    data, step = block(append, step)
    with open(trial_dir / "stdout.log", "ab") as out:
        out.write(data)
    resumed = TrialFiles(trial_dir, json.loads(json.dumps(state)))
    resumed.read_new()
    shutil.rmtree(trial_dir)
    return {"size": size, "catch_up": catch_up, "new": statistics.median(new_reads),
            "idle": statistics.median(idle_reads), "per_call": max(read_per_call),
            "appended": len(data), "resumed_read": bytes_read(resumed), "reports": reports}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 64, 1024],
                        help="stdout.log sizes in MiB (default 1 64 1024)")
    parser.add_argument("--append-kib", type=int, default=64, help="A, KiB a round (64)")
    parser.add_argument("--rounds", type=int, default=200, help="R (200)")
    parser.add_argument("--dir", type=Path, default=None, help="make the trial dirs here")
    args = parser.parse_args(argv)
    append = args.append_kib << 10
    root = Path(tempfile.mkdtemp(prefix="hpsearch-ingest-", dir=args.dir))
    print(f"{os.cpu_count()} CPUs; {root}; A = {args.append_kib} KiB a round, "
          f"R = {args.rounds} rounds; {time.strftime('%Y-%m-%d')}", flush=True)
    print(f"{'stdout.log':>11} {'catch-up MB/s':>14} {'read A ms':>10} {'idle ms':>8} "
          f"{'max bytes/read':>15} {'resumed read':>13}")
    try:
        rows = []
        for mib in args.sizes:
            row = measure(root, mib << 20, append, args.rounds)
            rows.append(row)
            print(f"{mib:>7} MiB {row['size'] / row['catch_up'] / 1e6:>14.0f} "
                  f"{row['new'] * 1000:>10.3f} {row['idle'] * 1000:>8.3f} "
                  f"{row['per_call']:>15,} {row['resumed_read']:>13,}", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    small, big = rows[0], rows[-1]
    ratio = big["new"] / small["new"]
    only_new = all(r["per_call"] <= append + 4096 and r["resumed_read"] == r["appended"]
                   for r in rows)
    print()
    print(f"{'ok' if ratio <= 1.5 else 'MISS'}: a read of {args.append_kib} KiB new at "
          f"{args.sizes[-1]} MiB takes {ratio:.2f} x the one at {args.sizes[0]} MiB "
          f"(goal <= 1.5 x)")
    print(f"{'ok' if only_new else 'MISS'}: every read took only new bytes from the file, "
          f"a resumed reader too")
    return 0


if __name__ == "__main__":
    sys.exit(main())

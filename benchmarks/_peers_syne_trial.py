"""Syne Tune's training script in benchmarks/peers.py: one learning curve of
benchmarks/_curves.py, reported with syne_tune.Reporter as `epoch` (1-based) and `loss`.

LocalBackend starts it with the config as `--name value` arguments and `--st_checkpoint_dir`;
a promoted (resumed) trial is started again with the same directory and continues from the
step it saved there. It runs until the scheduler pauses or stops it (the backend kills it) or
to the last step. LocalBackend pauses and stops a trial with SIGKILL, so the step log
cannot say that Syne Tune stopped it (no `left` line).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _curves  # noqa: E402


def main() -> None:
    from syne_tune import Reporter

    parser = argparse.ArgumentParser()
    parser.add_argument("--config", type=int, required=True)
    parser.add_argument("--configs", type=int, required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--step_seconds", type=float, required=True)
    parser.add_argument("--log", type=str, required=True)
    parser.add_argument("--row", type=str, required=True)
    parser.add_argument("--st_checkpoint_dir", type=str, default=None)
    args, _ = parser.parse_known_args()
    workload = _curves.Workload(args.configs, args.steps, args.step_seconds)
    saved = Path(args.st_checkpoint_dir) / "next.json" if args.st_checkpoint_dir else None
    start = json.loads(saved.read_text())["next"] if saved and saved.is_file() else 0
    reporter = Reporter()

    def report(step: int, value: float) -> None:
        if saved is not None:
            saved.parent.mkdir(parents=True, exist_ok=True)
            saved.write_text(json.dumps({"next": step + 1}))
        reporter(epoch=step + 1, loss=value)

    _curves.run_steps(workload, args.config, start, workload.steps,
                      _curves.StepLog(args.log, args.row), report)


if __name__ == "__main__":
    main()

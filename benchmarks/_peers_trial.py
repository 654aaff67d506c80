"""hpsearch's trial in benchmarks/peers.py: one learning curve of benchmarks/_curves.py.

    python _peers_trial.py CONFIGS STEPS STEP_SECONDS LOG ROW INDEX

It honours the trial contract as a training script would: it resumes from its latest
checkpoint, stops at trial.budget() steps in promotion mode, and leaves the loop when
trial.should_stop(). The step log says why it left: `pruned` when the driver's STOP file is
there (ASHA rejected it), else the signal that stopped it (a cancel or a pilot's wind-down);
and, while a step runs, when the STOP file came (a `told` line), so that a trial the pilot
then kills outright (srun turns the stop's SIGTERM into SIGKILL on another node) is counted
stopped, not lost.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _curves  # noqa: E402

from hpsearch import trial  # noqa: E402


def main(argv: list[str]) -> None:
    workload = _curves.Workload.from_args(argv[:3])
    log, index = _curves.StepLog(argv[3], argv[4]), int(argv[5])
    trial.should_stop()  # the first call installs the SIGTERM handler
    latest = trial.latest_checkpoint()
    start = json.loads(latest.read_text())["next"] if latest else 0
    end = min(workload.steps, trial.budget() or workload.steps)

    def report(step: int, value: float) -> None:
        trial.report(step, loss=value)
        with trial.checkpoint(step, ".json") as ckpt:
            ckpt.write_text(json.dumps({"next": step + 1}))

    stop_file = trial.trial_dir() / "STOP"

    def told() -> str | None:
        return "pruned" if stop_file.exists() else None

    def stop() -> str | None:
        if not trial.should_stop():
            return None
        return told() or trial.interrupted() or "stopped"

    value = _curves.run_steps(workload, index, start, end, log, report, stop, told)
    if value is not None:
        trial.result(loss=value)


if __name__ == "__main__":
    main(sys.argv[1:])

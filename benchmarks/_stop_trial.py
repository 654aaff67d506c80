"""The trial of benchmarks/stop_latency.py: a learning curve that notes when it was told to stop.

    python _stop_trial.py X STEPS STEP_SECONDS

Step s reports loss = X + 1/(s+1) (the curves never cross: a trial worse than the median
at one step is worse at every step), then waits STEP_SECONDS, looking every millisecond for
the STOP file (trial.should_stop() looks for it, and for SIGTERM). Told either way, it leaves
the loop as a training script does and waits up to WAIT_FOR_BOTH seconds for the other
way, to time both. Each is appended to stop_times.log in its trial dir as it happens
(`stop_file T`, `signal T`; Unix time, the driver's host's clock): the executor may SIGKILL
the trial right after its SIGTERM, and what was written stays. When each report was
written is its own `time` in metrics.jsonl (trial.report takes it just before the write).
"""

from __future__ import annotations

import os
import signal
import sys
import time

from hpsearch import trial

WAIT_FOR_BOTH = 2.0
LOOK_EVERY = 0.001


def main(argv: list[str]) -> None:
    x, steps, pause = float(argv[0]), int(argv[1]), float(argv[2])
    log = os.open(trial.trial_dir() / "stop_times.log",
                  os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    told: set[str] = set()

    def note(what: str) -> None:
        if what not in told:
            told.add(what)
            os.write(log, f"{what} {time.time():.6f}\n".encode())

    signal.signal(signal.SIGTERM, lambda s, f: note("signal"))
    stop_file = trial.trial_dir() / "STOP"

    def look() -> bool:
        if os.path.exists(stop_file):
            note("stop_file")
        return bool(told)

    loss = None
    for step in range(steps):
        loss = x + 1.0 / (step + 1)
        trial.report(step, loss=loss)
        until = time.monotonic() + pause
        while not look() and time.monotonic() < until:
            time.sleep(LOOK_EVERY)
        if told:
            break
    if told:
        until = time.monotonic() + WAIT_FOR_BOTH
        while len(told) < 2 and time.monotonic() < until:
            look()
            time.sleep(LOOK_EVERY)
    elif loss is not None:
        trial.result(loss=loss)


if __name__ == "__main__":
    main(sys.argv[1:])

"""The toy problem of the PBT paper (Jaderberg et al. 2017, section 4.1): maximise
Q(theta) = 1.2 - (theta0^2 + theta1^2) by gradient ascent on the surrogate
Q(theta | h) = 1.2 - (h0 theta0^2 + h1 theta1^2), where h = (h0, h1) are the hyperparameters.
A member with h = (1, 0) only ever moves theta0; PBT's exploit and explore find schedules of h
that move both. Every step reports Q; each segment (up to trial.budget() steps) resumes from
the latest checkpoint and saves one at its end, naming the trial that wrote it.

    hpsearch submit examples/pbt_toy/spec.yaml
"""

from __future__ import annotations

import json
import sys

from hpsearch import trial

LR = 0.01  # the paper's step size


def main() -> None:
    p = trial.params({"h0": 1.0, "h1": 0.0})
    h = (float(p["h0"]), float(p["h1"]))
    latest = trial.latest_checkpoint()
    if latest is not None:
        state = json.loads(latest.read_text())
        theta, start = state["theta"], state["step"] + 1
        print(f"resumed from trial {state['trial']}'s checkpoint of step {state['step']}",
              flush=True)
    else:
        theta, start = [0.9, 0.9], 0
    end = trial.budget() or int(sys.argv[1] if len(sys.argv) > 1 else 40)
    print(f"params {json.dumps(p, sort_keys=True)} from step {start}", flush=True)
    for step in range(start, end):
        theta = [theta[0] + LR * -2 * h[0] * theta[0], theta[1] + LR * -2 * h[1] * theta[1]]
        trial.report(step, Q=1.2 - (theta[0] ** 2 + theta[1] ** 2))
    if end > start:
        with trial.checkpoint(end - 1, ".json") as path:
            path.write_text(json.dumps({"theta": theta, "step": end - 1,
                                        "trial": trial.trial_id()}))


if __name__ == "__main__":
    main()

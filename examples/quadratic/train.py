"""A noisy quadratic "training run": reports a loss each step through hpsearch.trial.

The loss falls toward (x - 1)^2 + (y + 2)^2 + penalty(optimizer) as steps pass, with a little
noise. It checkpoints its step, so a retried or requeued attempt continues where it stopped.
"""

import argparse
import json
import math
import random
import time

from hpsearch import trial

parser = argparse.ArgumentParser()
parser.add_argument("--x", type=float, required=True)
parser.add_argument("--y", type=int, required=True)
parser.add_argument("--optimizer", required=True)
parser.add_argument("--steps", type=int, default=10)
parser.add_argument("--sleep", type=float, default=0.02, help="seconds per step")
args = parser.parse_args()

penalty = {"sgd": 0.5, "adam": 0.0, "rmsprop": 0.2}[args.optimizer]
target = (args.x - 1) ** 2 + (args.y + 2) ** 2 + penalty
rng = random.Random(trial.trial_id())

start = 0
latest = trial.latest_checkpoint()
if latest is not None:
    start = json.loads(latest.read_text())["step"] + 1

loss = math.inf
for step in range(start, args.steps):
    time.sleep(args.sleep)
    loss = target + 5.0 / (step + 1) + rng.gauss(0, 0.01)
    trial.report(step, loss=loss)
    ckpt = trial.checkpoint_dir() / f"step-{step:04d}.json"
    tmp = ckpt.with_suffix(".tmp")
    tmp.write_text(json.dumps({"step": step, "loss": loss}))
    tmp.rename(ckpt)
    if trial.should_stop():
        break

trial.result(loss=loss)

"""A made-up training run whose accuracy and cost both grow with its size.

Accuracy rises with the model's width and the epochs it trains, with a little noise; the
run takes width x epochs milliseconds of "work", done 1.6 times as fast on 2 GPUs as on 1.
So 2 GPUs finish sooner but cost more GPU-hours: a search of val_acc against gpu_hours
(spec.yaml) finds which sizes are worth their GPUs. The trial reports val_acc only; hpsearch
measures gpu_hours (and node_hours, wall_s) itself.
"""

import argparse
import math
import os
import random
import time

from hpsearch import trial

parser = argparse.ArgumentParser()
parser.add_argument("--width", type=int, required=True)
parser.add_argument("--epochs", type=int, required=True)
args = parser.parse_args()

gpus = len([d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d]) or 1
speedup = 1.6 if gpus > 1 else 1.0
rng = random.Random(trial.trial_id())
val_acc = 0.0
for epoch in range(args.epochs):
    time.sleep(args.width / 1000 / speedup)
    seen = args.width * (epoch + 1)
    val_acc = 0.97 - 0.5 * math.exp(-seen / 150) + rng.gauss(0, 0.003)
    trial.report(epoch, val_acc=val_acc)

trial.result(val_acc=val_acc)

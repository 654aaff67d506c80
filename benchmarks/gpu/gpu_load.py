"""A GPU trial for gpu_sampling.sh: `python gpu_load.py MODE SECONDS` keeps its one GPU
busy (busy: back-to-back bf16 matrix multiplies), half busy (half: 0.1 s on, 0.1 s off) or
mostly idle (sleep: one small multiply every 2 s) for SECONDS, then reports how long the
GPU work took and the seconds it was asked to run."""

import sys
import time

import torch

mode, seconds = sys.argv[1], float(sys.argv[2])
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
torch.cuda.synchronize()
began = time.time()
multiplies = 0
while time.time() - began < seconds:
    if mode == "busy":
        for _ in range(20):
            a @ b
        multiplies += 20
        torch.cuda.synchronize()
    elif mode == "half":
        on = time.time()
        while time.time() - on < 0.1:
            a @ b
            multiplies += 1
            torch.cuda.synchronize()
        time.sleep(0.1)
    else:
        a[:256, :256] @ b[:256, :256]
        multiplies += 1
        torch.cuda.synchronize()
        time.sleep(2.0)
print(f"@hpsearch step=0 loss={multiplies} load_s={time.time() - began:.2f}")

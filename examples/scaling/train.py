"""Digits MLP under DistributedDataParallel that reports what `hpsearch scale` reads
(examples/scaling/README.md): val_acc from rank 0, each rank's step timing
(hpsearch.integrations.ddp.DdpTiming), and grad_bytes (the gradient's size, for the ring
all-reduce model). One rank runs without DDP and times its steps with trial.timed_step.
`--batch-size` is the global batch, split across the ranks (strong scaling).
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
from sklearn.datasets import load_digits
from torch import nn

from hpsearch import trial


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--batch-size", type=int, default=64, help="global batch")
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(1)
    world, rank = int(os.environ.get("WORLD_SIZE", "1")), trial.rank()
    device = torch.device("cpu")
    if args.device == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target)
    x_train, y_train, x_val, y_val = x[:1500], y[:1500], x[1500:], y[1500:]
    torch.manual_seed(0)
    model: nn.Module = nn.Sequential(nn.Linear(64, args.width), nn.ReLU(),
                                     nn.Linear(args.width, args.width), nn.ReLU(),
                                     nn.Linear(args.width, 10)).to(device)
    grad_bytes = float(sum(p.numel() * p.element_size() for p in model.parameters()))
    timing = None
    if world > 1:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
        from torch.nn.parallel import DistributedDataParallel

        from hpsearch.integrations.ddp import DdpTiming
        model = DistributedDataParallel(model, device_ids=[device.index]
                                        if device.type == "cuda" else None)
        timing = DdpTiming(model, warmup=1)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    per_rank = max(1, args.batch_size // world)
    sync = torch.cuda.synchronize if device.type == "cuda" else None
    step = 0
    for epoch in range(args.epochs):
        order = torch.randperm(len(x_train), generator=torch.Generator().manual_seed(epoch))
        for start in range(0, len(order) - args.batch_size + 1, args.batch_size):
            mine = order[start + rank * per_rank:start + (rank + 1) * per_rank]
            xb, yb = x_train[mine].to(device), y_train[mine].to(device)
            block = timing.step(step) if timing else trial.timed_step(
                step, sync=sync, report=step >= 1)
            with block as t:
                optimizer.zero_grad()
                nn.functional.cross_entropy(model(xb), yb).backward()
                optimizer.step()
                t.items = per_rank * world
            step += 1
        if rank == 0:
            with torch.no_grad():
                val_acc = (model(x_val.to(device)).argmax(1).cpu() == y_val).float().mean()
            trial.report(epoch, val_acc=float(val_acc), grad_bytes=grad_bytes)
    if world > 1:
        # No rank tears gloo down while another still talks to it (rank 0 evaluates and
        # reports after the others' last step): it would abort that process at exit,
        # "terminate called without an active exception" (as in examples/digits_ddp).
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()

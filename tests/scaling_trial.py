"""A small data-parallel trial reporting per-rank step timing (test_parallel_efficiency.py).

Strong scaling: a fixed global batch split across the ranks (gloo on CPU, one thread a rank).
With one rank it runs without DDP and times its steps with trial.timed_step; with more, under
DistributedDataParallel with hpsearch.integrations.ddp.DdpTiming. `--slow-rank R --slow S`:
rank R computes S seconds longer each step (a load imbalance the metrics must show).
`--device cuda` (benchmarks/gpu/scaling.sh): each rank on GPU LOCAL_RANK over NCCL; with fewer
GPUs than ranks, ranks share them over gloo (CUDA tensors), which says nothing of scaling but
runs DdpTiming's CUDA-event clock.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch import nn

from hpsearch import trial


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--slow-rank", type=int, default=-1)
    parser.add_argument("--slow", type=float, default=0.0)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    args = parser.parse_args()
    torch.set_num_threads(1)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = trial.rank()
    torch.manual_seed(0)
    model: nn.Module = nn.Sequential(nn.Linear(64, args.width), nn.ReLU(),
                                     nn.Linear(args.width, args.width), nn.ReLU(),
                                     nn.Linear(args.width, 10))
    timing = None
    device = torch.device("cpu")
    backend = "gloo"
    if args.device == "cuda":
        local = int(os.environ.get("LOCAL_RANK", "0"))
        count = torch.cuda.device_count()
        device = torch.device("cuda", local % count)
        torch.cuda.set_device(device)
        backend = "nccl" if count >= world else "gloo"
        print(f"rank {rank}: {device} {torch.cuda.get_device_name(device)} backend {backend} "
              f"world {world}", flush=True)
    model = model.to(device)
    if world > 1:
        dist.init_process_group(backend)
        from torch.nn.parallel import DistributedDataParallel

        from hpsearch.integrations.ddp import DdpTiming
        model = DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None)
        timing = DdpTiming(model, warmup=1)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    x = torch.randn(args.batch // world, 64, device=device)
    y = torch.randint(0, 10, (args.batch // world,), device=device)
    sync = torch.cuda.synchronize if device.type == "cuda" else None
    loss = torch.tensor(0.0)
    for step in range(args.steps):
        block = timing.step(step) if timing else trial.timed_step(
            step, sync=sync, report=step >= 1)
        with block as t:
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            if rank == args.slow_rank:
                time.sleep(args.slow)
            loss.backward()
            optimizer.step()
            t.items = args.batch
    if rank == 0:
        grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
        trial.report(args.steps - 1, loss=loss.item(), grad_bytes=float(grad_bytes))
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""An MPI trial for tests/slurm/test_mpirun.py: one gloo all_reduce over the ranks mpirun started.

Each rank reads the variables every launcher sets (RANK, WORLD_SIZE, LOCAL_RANK, NODE_RANK,
MASTER_ADDR, MASTER_PORT; docs/launchers.md), joins a torch.distributed gloo group through
them, and all-reduces (RANK + 1) * SCALE (`--scale`, the trial's parameter), so the sum is
SCALE * WORLD_SIZE * (WORLD_SIZE + 1) / 2 only if every rank took part. Each rank writes where
it ran to $HPSEARCH_TRIAL_DIR/ranks/<RANK>.json; rank 0 then reports the sum as the metric
`sum`.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scale", type=float, default=1.0)
    scale = parser.parse_args().scale
    out = Path(os.environ["HPSEARCH_TRIAL_DIR"])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=60))
    total = torch.tensor([(rank + 1) * scale], dtype=torch.float64)
    dist.all_reduce(total)
    record = {"rank": rank, "world_size": world,
              "node": os.environ.get("SLURMD_NODENAME", socket.gethostname()),
              "local_rank": int(os.environ["LOCAL_RANK"]),
              "node_rank": int(os.environ["NODE_RANK"]),
              "ompi_rank": int(os.environ.get("OMPI_COMM_WORLD_RANK", -1)),
              "sum": total.item()}
    (out / "ranks").mkdir(parents=True, exist_ok=True)
    (out / "ranks" / f"{rank}.json").write_text(json.dumps(record))
    dist.barrier()  # no rank tears gloo down while another still talks to it
    dist.destroy_process_group()
    if rank == 0:
        print(f"@hpsearch step=0 sum={total.item()}", flush=True)


if __name__ == "__main__":
    main()

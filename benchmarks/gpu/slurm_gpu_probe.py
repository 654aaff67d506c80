"""The trial of benchmarks/gpu/slurm_gpu_machine.sh: which GPUs a trial that Slurm and an
hpsearch pilot started can really use.

One-GPU mode (default): prints one `probe ...` line with CUDA_VISIBLE_DEVICES, the Slurm GPU
variables the pilot set, the UUID of every GPU that CUDA shows this process, and the UUIDs of
the GPUs on which NVML lists this process after a small matrix product (the GPU it really
ran on, seen from the driver, not from CUDA_VISIBLE_DEVICES); sleeps `--sleep` seconds so
that two trials in a pilot overlap; prints `probe_end ...` and `@hpsearch step=0 loss=X`.

`--nccl` mode (each rank of a `launcher: torchrun` trial): sets its device from LOCAL_RANK,
all-reduces a tensor holding rank + 1 over NCCL (the sum must be world*(world+1)/2), times a
256 MiB all-reduce, and prints one `rank ...` line; rank 0 reports the metric.

NVLink multicast stays off (NCCL_NVLS_ENABLE=0 and its siblings), as the device tool asks.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time

for _name, _value in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
                      ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ[_name] = _value

BEGAN = time.time()

ENV_SHOWN = ("CUDA_VISIBLE_DEVICES", "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_JOB_GPUS",
             "SLURM_STEP_GPUS", "SLURM_GPUS_ON_NODE", "HPSEARCH_GPU_FIELDS", "HPSEARCH_PILOT",
             "SLURM_JOB_NODELIST")


def say(line: str) -> None:
    """One write(2) per line: the ranks of a trial share one stdout.log, and print() writes
    a line and its newline separately, so two ranks' lines could run together."""
    sys.stdout.flush()
    os.write(1, (line + "\n").encode())


def env_words() -> str:
    return " ".join(f"{k.lower()}={os.environ.get(k, '-') or '-'}" for k in ENV_SHOWN)


def cuda_uuids(torch) -> list[str]:
    """The UUID of each GPU CUDA shows this process, in CUDA's order (CUDA_VISIBLE_DEVICES
    applies): from PyTorch, else from the driver API (cuDeviceGetUuid)."""
    out = []
    try:
        for i in range(torch.cuda.device_count()):
            u = str(torch.cuda.get_device_properties(i).uuid)
            out.append(u if u.startswith("GPU-") else f"GPU-{u}")
        return out
    except AttributeError:
        import ctypes
        cu = ctypes.CDLL("libcuda.so.1")
        cu.cuInit(0)
        count = ctypes.c_int()
        cu.cuDeviceGetCount(ctypes.byref(count))
        for i in range(count.value):
            dev, raw = ctypes.c_int(), ctypes.create_string_buffer(16)
            cu.cuDeviceGet(ctypes.byref(dev), i)
            cu.cuDeviceGetUuid(raw, dev)
            h = raw.raw.hex()
            out.append(f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}")
        return out


def nvml_gpus_with_this_pid() -> str:
    """UUIDs of the GPUs on which NVML lists this process (NVML sees every GPU of the machine,
    whatever CUDA_VISIBLE_DEVICES says)."""
    try:
        import pynvml
        pynvml.nvmlInit()
        found = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            pids = {p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)}
            if os.getpid() in pids:
                u = pynvml.nvmlDeviceGetUUID(h)
                found.append(u.decode() if isinstance(u, bytes) else u)
        pynvml.nvmlShutdown()
        return ",".join(found) or "none"
    except Exception as e:  # noqa: BLE001 - a probe reports, it does not fail on this
        return f"error:{type(e).__name__}"


def one_gpu(args) -> None:
    import torch
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    uuids = cuda_uuids(torch) if n else []
    on = "none"
    if n:
        x = torch.randn(4096, 4096, device="cuda")
        (x @ x).sum().item()
        torch.cuda.synchronize()
        on = nvml_gpus_with_this_pid()
    say(f"probe trial={os.environ.get('HPSEARCH_TRIAL_ID', '-')} host={socket.gethostname()} "
        f"pid={os.getpid()} {env_words()} cuda_count={n} uuids={','.join(uuids) or '-'} "
        f"nvml_pid_on={on} began={BEGAN:.3f}")
    if n and args.busy_if_odd and int(args.x) % 2:  # keep the GPU busy: the sampler sees it
        until = time.time() + args.sleep
        while time.time() < until:
            (x @ x).sum().item()
    else:
        time.sleep(args.sleep)
    say(f"probe_end trial={os.environ.get('HPSEARCH_TRIAL_ID', '-')} ended={time.time():.3f}")
    say(f"@hpsearch step=0 loss={args.x}")


def nccl(args) -> None:
    import torch
    import torch.distributed as dist
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
        dist.init_process_group("nccl", device_id=device)
    else:  # a rehearsal without GPUs: the same steps on the CPU, over gloo
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    t = torch.full((4,), float(rank + 1), device=device)
    dist.all_reduce(t)
    got, expected = t[0].item(), world * (world + 1) / 2
    big = torch.ones(64 * 1024 * 1024, device=device)  # 256 MiB of float32
    dist.all_reduce(big)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    reps = 10 if device.type == "cuda" else 1
    t0 = time.perf_counter()
    for _ in range(reps):
        dist.all_reduce(big)
    sync()
    dt = (time.perf_counter() - t0) / reps
    busbw = 2 * (world - 1) / world * big.numel() * 4 / dt / 1e9
    uuid = cuda_uuids(torch)[local] if device.type == "cuda" else "none"
    on = nvml_gpus_with_this_pid() if device.type == "cuda" else "none"
    say(f"rank={rank} world={world} local_rank={local} host={socket.gethostname()} "
        f"pid={os.getpid()} {env_words()} uuid={uuid} nvml_pid_on={on} allreduce={got:g} "
        f"expected={expected:g} ok={int(got == expected)} "
        f"allreduce_256MiB_ms={dt * 1e3:.3f} busbw_GBps={busbw:.1f} began={BEGAN:.3f}")
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        say(f"@hpsearch step=0 loss={abs(got - expected) + args.x - 1:g}")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--x", type=float, default=1.0)
    p.add_argument("--sleep", type=float, default=6.0)
    p.add_argument("--nccl", action="store_true")
    # trials with an odd --x spend --sleep seconds in matmuls instead (GPU sampling, docs/gpu.md)
    p.add_argument("--busy-if-odd", action="store_true")
    args = p.parse_args()
    (nccl if args.nccl else one_gpu)(args)


if __name__ == "__main__":
    sys.exit(main())

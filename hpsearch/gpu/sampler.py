"""Sample a trial's GPUs on one node while it runs: `python -m hpsearch.gpu.sampler NODE PID`.

Started in the background by the trial's launch text (hpsearch.launch.base.gpu_sampler_line)
on each node of a trial that asked for GPUs: PID is the shell that runs the trial there;
the sampler exits within a moment of it (checked by its start time, so a reused pid does
not keep it alive), and its process group and Slurm step end it too.

Every HPSEARCH_GPU_INTERVAL seconds (default 5; 0 or below: no sampling) it appends one
line to $HPSEARCH_TRIAL_DIR/gpu.NODE.jsonl:

    {"time": 1700000000.0, "attempt": 1, "dt": 5.0, "util": [97, 12], "mem_mib": [20480.0, 512.0]}

util: utilization.gpu (percent of the last NVML sample period in which a kernel ran) and
mem_mib: memory.used, one entry per GPU the trial holds (CUDA_VISIBLE_DEVICES: NVML indices
as nvidia-smi numbers them, or GPU UUIDs); dt: seconds since the previous line (the first:
since the sampler started), the time this line stands for.

It never makes a trial fail and never says anything: without pynvml, without a GPU, with
no CUDA_VISIBLE_DEVICES, or on any NVML or file error it stops (or never starts) sampling.
The file is created private (0600), opened without following a link and without blocking,
and written only if it is a regular file of this user's; each line is one write().
"""

from __future__ import annotations

import json
import os
import signal
import stat
import sys
import time

DEFAULT_INTERVAL = 5.0
FILE = "gpu.{node}.jsonl"
_TICK = 0.25  # seconds between looks at the trial's shell


def interval(env=os.environ) -> float:
    """Seconds between samples (HPSEARCH_GPU_INTERVAL); 0 means off."""
    try:
        value = float(env.get("HPSEARCH_GPU_INTERVAL", DEFAULT_INTERVAL))
    except ValueError:
        return DEFAULT_INTERVAL
    return value if value == value and value > 0 else 0.0


def held_gpus(env=os.environ) -> list[str]:
    """The GPU ids the trial was given on this node (CUDA_VISIBLE_DEVICES), in order."""
    return [g.strip() for g in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()]


def _start_time(pid: int) -> bytes | None:
    """Field 22 of /proc/PID/stat (None: gone or a zombie)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2:].split()
    return None if fields[0] == b"Z" else fields[19]


def _open_output(path: str) -> int | None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                 | os.O_CLOEXEC, 0o600)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
        os.close(fd)
        return None
    return fd


def _handles(pynvml, ids: list[str]) -> list:
    found = []
    for gpu in ids:
        if gpu.isdigit():
            found.append(pynvml.nvmlDeviceGetHandleByIndex(int(gpu)))
        else:
            found.append(pynvml.nvmlDeviceGetHandleByUUID(gpu))
    return found


def sample(pynvml, handles: list) -> tuple[list[int], list[float]]:
    """(utilization.gpu, memory.used in MiB) of each handle, now."""
    util = [int(pynvml.nvmlDeviceGetUtilizationRates(h).gpu) for h in handles]
    mem = [round(pynvml.nvmlDeviceGetMemoryInfo(h).used / 2**20, 1) for h in handles]
    return util, mem


def sample_line(now: float, attempt: int, dt: float, util: list[int], mem: list[float]
                ) -> bytes:
    """One line of the samples file (the format above)."""
    return (json.dumps({"time": round(now, 3), "attempt": attempt, "dt": round(dt, 3),
                        "util": util, "mem_mib": mem}) + "\n").encode()


def run(node: int, watched: int, env=os.environ) -> None:
    """Sample until the watched shell ends or anything fails; raises on failure."""
    every, ids = interval(env), held_gpus(env)
    born = _start_time(watched)
    if every <= 0 or not ids or born is None:
        return
    import pynvml  # the `gpu` extra (nvidia-ml-py); ImportError: no samples

    pynvml.nvmlInit()
    try:
        handles = _handles(pynvml, ids)
        fd = _open_output(os.path.join(env["HPSEARCH_TRIAL_DIR"], FILE.format(node=node)))
        if fd is None:
            return
        attempt = int(env.get("HPSEARCH_ATTEMPT", "0"))
        last = due = time.time()
        while True:
            due += every
            while time.time() < due:
                if _start_time(watched) != born:
                    return
                time.sleep(min(_TICK, max(0.0, due - time.time())))
            util, mem = sample(pynvml, handles)
            now = time.time()
            os.write(fd, sample_line(now, attempt, now - last, util, mem))
            last = now
    finally:
        pynvml.nvmlShutdown()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        # a checkpoint or stop signal sent to the trial's process group is not for it
        # (SIGTERM and SIGKILL still end it)
        for name in ("SIGINT", "SIGHUP", "SIGUSR1", "SIGUSR2"):
            signal.signal(getattr(signal, name), signal.SIG_IGN)
        run(int(args[0]), int(args[1]))
    except BaseException:  # noqa: BLE001 - a sampler never fails a trial, nor says anything
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How long a promoted segment takes from assignment to its first training step: cold (a new
Python process imports torch and scikit-learn, then CUDA and the process group start) against
warm (executor.warm: forked from hpsearch.warm's server, which imported them already).

    python benchmarks/segment_restart.py                  # the digits example, --device auto
    python benchmarks/segment_restart.py --device cpu --repeat 3
    python benchmarks/segment_restart.py --ranks 2        # 2 ranks per segment, torchrun

With --ranks N, each segment is N DDP ranks (NCCL on GPUs, gloo on CPUs) launched as hpsearch
launches a `launcher: torchrun` trial: cold through torchrun, warm through hpsearch.warm.ranks
with every rank forked from the warm server (issue 26 item 6: goal <= 3 s).

Each measured run is the digits example's second segment (HPSEARCH_BUDGET=2, attempt 2),
resuming from a checkpoint the first segment left, in a fresh copy of that trial dir, started
as the local executor starts a trial (/bin/sh -c, the exit-code trap, the command). Time from
the Popen to the `first_step_at=` wall-clock time the script prints after its first
optimizer step (CUDA synchronized). Cold and warm runs alternate. Goal (issue 12): a warm
segment's first step at most 2 s after assignment on the GPU machine.

Needs only torch, numpy and scikit-learn besides hpsearch's own files (it runs on the lent
GPU machine without optuna).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRAIN = ROOT / "examples" / "digits_ddp" / "train.py"
PRELOAD = "numpy,torch,torch.distributed,torch.nn.parallel,torch._dynamo,sklearn.datasets"
GOAL_S = 2.0
GOAL_RANKS_S = 3.0  # issue 26 item 6: a 2-rank segment
PARAMS = {"lr": 0.01, "width": 64, "batch_size": 64, "optimizer": "adam", "epochs": 5}


def command(python_prefix: list[str], device: str) -> str:
    args = ["--lr", "0.01", "--width", "64", "--batch-size", "64", "--optimizer", "adam",
            "--epochs", "5", "--seed", "3", "--device", device]
    return shlex.join(python_prefix + [str(TRAIN)] + args)


def ranks_script(prefix: list[str], device: str, ranks: int, port: int, warm: bool) -> str:
    """The segment as hpsearch's torchrun launcher writes it for a trial of `ranks` ranks."""
    sys.path.insert(0, str(ROOT))
    from hpsearch.launch.base import RankLayout
    from hpsearch.launch.host import HostRuntime
    from hpsearch.launch.torchrun import TorchrunLauncher
    layout = RankLayout(tasks_per_node=ranks, master_port=port,
                        warm_ranks=sys.executable if warm else None)
    return TorchrunLauncher().wrap(command(prefix, device), layout, HostRuntime())


def launch(cmd: str, trial_dir: Path, budget: int, attempt: int) -> tuple[float, str, int]:
    """Start like the local executor; returns (seconds to first step, stdout, exit code)."""
    sys.path.insert(0, str(ROOT))
    from hpsearch.launch.attempt import shell_body
    env = {**os.environ, "HPSEARCH_EXPERIMENT": "bench", "HPSEARCH_TRIAL_ID": "0",
           "HPSEARCH_ATTEMPT": str(attempt), "HPSEARCH_TRIAL_DIR": str(trial_dir),
           "HPSEARCH_CHECKPOINT_DIR": str(trial_dir / "checkpoints"),
           "HPSEARCH_PARAMS": json.dumps(PARAMS), "HPSEARCH_BUDGET": str(budget),
           "PYTHONPATH": str(ROOT),
           # torchrun beside this interpreter (a venv's bin is not always on PATH)
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    began = time.time()
    proc = subprocess.run(["/bin/sh", "-c", shell_body(None, cmd)], env=env, cwd=trial_dir,
                          capture_output=True, text=True, timeout=300)
    found = re.search(r"first_step_at=([\d.]+)", proc.stdout)
    if proc.returncode != 0 or not found:
        raise SystemExit(f"segment failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return float(found.group(1)) - began, proc.stdout, proc.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--ranks", type=int, default=1, help="ranks per segment (torchrun)")
    args = parser.parse_args()
    ports = iter(range(29600, 29900))

    def segment(prefix: list[str], warm: bool) -> str:
        if args.ranks == 1:
            return command(prefix, args.device)
        return ranks_script(prefix, args.device, args.ranks, next(ports), warm)

    import torch  # noqa: F401 - only to print the version
    print(f"python {sys.version.split()[0]}, torch {torch.__version__}, "
          f"cuda {torch.cuda.is_available() and torch.cuda.get_device_name(0)}, "
          f"{os.cpu_count()} CPUs")
    work = Path(tempfile.mkdtemp(prefix="segbench"))
    runtime = Path(tempfile.mkdtemp(prefix="hw", dir="/tmp"))
    os.environ["XDG_RUNTIME_DIR"] = str(runtime)  # its own warm server, stopped at the end
    cold = [sys.executable]
    warm = [sys.executable, "-m", "hpsearch.warm", "run", "--preload", PRELOAD, "--"]
    try:
        first = work / "first"
        (first / "checkpoints").mkdir(parents=True)
        launch(segment(cold, False), first, budget=1, attempt=1)  # segment 1
        _start_server(segment(warm, True), work)
        times: dict[str, list[float]] = {"cold": [], "warm": []}
        for i in range(args.repeat):
            for mode, prefix in (("cold", cold), ("warm", warm))[:: 1 if i % 2 else -1]:
                trial = work / f"{mode}{i}"
                shutil.copytree(first, trial)
                seconds, out, _ = launch(segment(prefix, mode == "warm"), trial, 2, 2)
                assert "resuming from" in out, out
                times[mode].append(seconds)
                print(f"run {i} {mode}: first step {seconds:.3f} s after assignment")
    finally:
        subprocess.run(["pkill", "-f", "--", f"--socket {runtime}/"], check=False)
        shutil.rmtree(work, ignore_errors=True)
    print("\n| start | runs | first step after assignment: median | min | max |")
    print("|---|---|---|---|---|")
    for mode, values in times.items():
        print(f"| {mode} | {len(values)} | {statistics.median(values):.3f} s | "
              f"{min(values):.3f} s | {max(values):.3f} s |")
    ratio = statistics.median(times["cold"]) / statistics.median(times["warm"])
    print(f"\ncold / warm (medians): {ratio:.2f}x")
    median = statistics.median(times["warm"])
    goal = GOAL_S if args.ranks == 1 else GOAL_RANKS_S
    verdict = "ok" if median <= goal else "MISS"
    print(f"{verdict}: a warm {args.ranks}-rank segment's first step {median:.3f} s after "
          f"assignment (goal <= {goal:g} s)")
    return 0


def _start_server(warm_segment: str, work: Path) -> None:
    """The first warm run starts the server (and runs cold itself); wait until the server
    has imported everything and listens."""
    trial = work / "prime"
    shutil.copytree(work / "first", trial)
    launch(warm_segment, trial, 2, 2)
    deadline = time.monotonic() + 120
    runtime = Path(os.environ["XDG_RUNTIME_DIR"])
    while not list(runtime.glob("hpsearch-warm-*/*.sock")):
        if time.monotonic() > deadline:
            raise SystemExit("the warm server did not come up in 120 s")
        time.sleep(0.2)


if __name__ == "__main__":
    sys.exit(main())

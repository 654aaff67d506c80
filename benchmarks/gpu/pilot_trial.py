"""The trial of pilot_loop.py: a short real PyTorch training that writes when each phase began.

It trains a 3-layer MLP on random regression data for `--train-seconds` (after its first
step) on the GPU that CUDA_VISIBLE_DEVICES leaves it (or on the CPU), then writes
$HPSEARCH_TRIAL_DIR/timing.json atomically: wall-clock times (time.time(), the same clock
as the pilot's files on this host) of

    script_start   the first line of this script (the interpreter is up)
    imports_done   torch imported
    device_ready   the CUDA context exists (a first tensor on the device, synchronized)
    model_ready    the model and the data are on the device
    optimizer_ready  its optimizer is built
    first_step     the first optimizer step finished on the device (synchronized)
    last_step      the last one finished
    script_end     just before the file is written (the process exits right after)

and which device it used (CUDA_VISIBLE_DEVICES, the device's name and UUID), so the benchmark
can check that trials running at the same time used different GPUs.
"""

from __future__ import annotations

import time

SCRIPT_START = time.time()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

IMPORTS_DONE = time.time()


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--train-seconds", type=float, default=2.0,
                        help="train this long after the first step")
    parser.add_argument("--width", type=int, default=0,
                        help="hidden units (0: 4096 on CUDA, 256 on the CPU)")
    parser.add_argument("--batch", type=int, default=0,
                        help="batch size (0: 4096 on CUDA, 256 on the CPU)")
    return parser.parse_args()


def device_info(device: torch.device) -> dict:
    """What identifies the device this trial ran on."""
    info = {"cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "device": str(device)}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info["device_name"] = props.name
        info["device_uuid"] = str(getattr(props, "uuid", ""))
    return info


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main() -> None:
    args = parse_args()
    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        raise SystemExit("pilot_trial: --device cuda, but torch sees no GPU "
                         f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r})")
    device = torch.device("cuda" if cuda else "cpu")
    width = args.width or (4096 if cuda else 256)
    batch = args.batch or (4096 if cuda else 256)
    torch.manual_seed(int(os.environ.get("HPSEARCH_TRIAL_ID", "0")))
    torch.zeros(1, device=device)
    sync(device)
    device_ready = time.time()

    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(),
                                torch.nn.Linear(width, width), torch.nn.ReLU(),
                                torch.nn.Linear(width, 1)).to(device)
    x = torch.randn(batch, width, device=device)
    y = x[:, :8].sum(dim=1, keepdim=True)
    sync(device)
    model_ready = time.time()
    # The first optimizer built in a process imports torch._dynamo (and sympy): ~800
    # modules, 1.1 s on a 2-core x86_64 machine with torch 2.13, so it is timed on its own.
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    optimizer_ready = time.time()
    steps, first_step, loss = 0, None, None
    while True:
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        steps += 1
        if first_step is None:
            sync(device)
            first_step = time.time()
        elif steps % 10 == 0:
            sync(device)
            if time.time() - first_step >= args.train_seconds:
                break
    sync(device)
    last_step = time.time()

    record = {"script_start": SCRIPT_START, "imports_done": IMPORTS_DONE,
              "device_ready": device_ready, "model_ready": model_ready,
              "optimizer_ready": optimizer_ready,
              "first_step": first_step, "last_step": last_step,
              "steps": steps, "loss": loss.item(), "pid": os.getpid(), **device_info(device),
              "script_end": time.time()}
    path = Path(os.environ["HPSEARCH_TRIAL_DIR"]) / "timing.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    tmp.replace(path)


if __name__ == "__main__":
    main()

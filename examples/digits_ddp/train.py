"""An MLP on scikit-learn's digits, trained with DistributedDataParallel: the hpsearch DDP example.

One process per rank. Under a launcher (torchrun, srun, ...) RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR and MASTER_PORT come from the environment; without them it runs as one process.
Backend: NCCL on CUDA (LOCAL_RANK picks the device), gloo on CPU.

Each epoch rank 0 evaluates on the validation set, reports val_acc, val_loss and train_loss
through hpsearch.trial, and saves a checkpoint; every rank resumes from the newest checkpoint
at start, so a retried or requeued trial continues and ends exactly as an uninterrupted run
with the same seed would (on CPU; see README.md). The objective is the final epoch's val_acc.
In promotion mode (trial.budget(), $HPSEARCH_BUDGET) the run stops after that many epochs in
all, as if --epochs were the budget, and a promoted trial's next segment resumes from there.

Under population-based training (`--pbt`, strategy pbt: examples/digits_ddp/pbt.yaml) a
segment may resume from another member's checkpoint, and --lr changes between segments: the
checkpoint may hold another --lr, and the optimizer takes this segment's after loading it
(the checkpoint's optimizer state carries the old one).

Exit codes: 0 done, or the budget reached (result.json written, checkpoint saved); 75 stopped
early (STOP file or SIGTERM/SIGUSR1/SIGUSR2) after saving a checkpoint, so a retry resumes;
2 bad arguments, a budget below 1 or a checkpoint from other hyperparameters.
"""

from __future__ import annotations

import argparse
import io
import os
import random
import socket
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

SCRIPT_START = time.perf_counter()  # first_step_s counts from here: torch's import included

# One write per line: a trial's ranks share its stdout, and unbuffered (PYTHONUNBUFFERED)
# print() writes a line's text and its newline apart, where another rank's line can fall
# ("resuming from epoch-0001.pt: epoch 2pbt: rank 1 trains with ...", tests/test_digits_pbt.py).
if isinstance(sys.stdout, io.TextIOWrapper):
    sys.stdout.reconfigure(line_buffering=True, write_through=False)

# cuBLAS is deterministic only with this set before its first use.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402
from torch.utils.data import DistributedSampler  # noqa: E402

from hpsearch import trial  # noqa: E402

IMPORTS_DONE = time.perf_counter()

EXIT_STOPPED = 75        # EX_TEMPFAIL: interrupted, checkpoint saved, run again to continue
SPLIT_SEED = 0           # the train/validation split is the same whatever --seed is
VAL_FRACTION = 0.2       # 1797 digits: 1437 to train on, 360 to validate
# Hyperparameters a checkpoint must share with the run that resumes from it.
RESUME_KEYS = ("lr", "width", "batch_size", "optimizer", "seed")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lr", type=float, default=0.01, help="learning rate")
    parser.add_argument("--width", type=int, default=64, help="units in each of 2 hidden layers")
    parser.add_argument("--batch-size", type=int, default=32,
                        help="global batch size, split evenly across the ranks")
    parser.add_argument("--optimizer", choices=("sgd", "adam", "adamw"), default="adam")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0, help="model init and data order")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="auto: CUDA when available, else CPU")
    parser.add_argument("--epoch-sleep", type=float, default=0.0, metavar="SECONDS",
                        help="wait this long after each epoch's training (cut short by a stop "
                             "request): makes a tiny run outlast a time limit in tests; the "
                             "results are the same")
    parser.add_argument("--pbt", action="store_true",
                        help="population-based training: resume from a checkpoint of another "
                             "--lr, and train on with this one")
    parser.add_argument("--data", default=None, metavar="NPZ",
                        help="train on these digits (arrays x: pixels in [0, 1], y: labels) "
                             "instead of all of scikit-learn's; the split is made as usual")
    args = parser.parse_args(argv)
    for name in ("lr", "width", "batch_size", "epochs"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be positive; got {getattr(args, name)}")
    return args


@dataclass
class Ranks:
    """Where this process sits in the job."""
    rank: int
    world: int
    local_rank: int
    device: torch.device

    @property
    def main(self) -> bool:
        return self.rank == 0


def start_ranks(device_choice: str) -> Ranks:
    """Read the launcher's environment, print the start line, join the process group."""
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = device_choice == "cuda" or (device_choice == "auto" and torch.cuda.is_available())
    if use_cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    master = f"{os.environ.get('MASTER_ADDR', '-')}:{os.environ.get('MASTER_PORT', '-')}"
    print(f"rank {rank}/{world} local {local_rank} on {node} master {master}", flush=True)
    if world > 1:
        dist.init_process_group("nccl" if use_cuda else "gloo",
                                device_id=device if use_cuda else None)
    return Ranks(rank, world, local_rank, device)


def all_sum(values: list[float], ranks: Ranks) -> list[float]:
    """Element-wise sum over the ranks (the values themselves with one rank)."""
    tensor = torch.tensor(values, dtype=torch.float64, device=ranks.device)
    if ranks.world > 1:
        dist.all_reduce(tensor)
    return tensor.tolist()


def load_split(device: torch.device, data: str | None = None) -> tuple[torch.Tensor, ...]:
    """(x_train, y_train, x_val, y_val): the bundled digits, pixels scaled to [0, 1], or
    those of the `data` file (a pipeline's training part, the test part held out)."""
    if data is None:
        digits = load_digits()
        x, y = torch.tensor(digits.data / 16.0), torch.tensor(digits.target)
    else:
        with np.load(data) as arrays:
            x, y = torch.tensor(arrays["x"]), torch.tensor(arrays["y"])
    x, y = x.to(torch.float32), y.to(torch.int64)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(SPLIT_SEED))
    n_val = round(len(y) * VAL_FRACTION)
    val, train = order[:n_val], order[n_val:]
    return tuple(t.to(device) for t in (x[train], y[train], x[val], y[val]))


def make_model(width: int) -> nn.Module:
    return nn.Sequential(nn.Linear(64, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                         nn.Linear(width, 10))


def make_optimizer(name: str, lr: float, model: nn.Module) -> torch.optim.Optimizer:
    if name == "sgd":
        return torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    if name == "adam":
        return torch.optim.Adam(model.parameters(), lr=lr)
    return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)


@dataclass
class Progress:
    """What the run has done so far; saved in every checkpoint."""
    next_epoch: int = 0
    val_acc: float = float("nan")
    val_loss: float = float("nan")
    train_loss: float = float("nan")
    best_val_acc: float = float("-inf")
    best_epoch: int = -1

    def record(self, epoch: int, val_acc: float, val_loss: float, train_loss: float) -> None:
        self.next_epoch = epoch + 1
        self.val_acc, self.val_loss, self.train_loss = val_acc, val_loss, train_loss
        if val_acc > self.best_val_acc:
            self.best_val_acc, self.best_epoch = val_acc, epoch


def save_checkpoint(model: nn.Module, optimizer: torch.optim.Optimizer, progress: Progress,
                    args: argparse.Namespace, ranks: Ranks) -> Path:
    """Write epoch-NNNN.pt under a temporary name, then rename it into place, so that
    trial.latest_checkpoint() never returns a file cut short by a crash."""
    final = trial.checkpoint_dir() / f"epoch-{progress.next_epoch - 1:04d}.pt"
    tmp = final.with_name(f".{final.name}.tmp")
    payload = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "progress": asdict(progress),
        "hyperparameters": {key: getattr(args, key) for key in RESUME_KEYS},
        "rng": {"torch": torch.get_rng_state(), "python": random.getstate(),
                "cuda": torch.cuda.get_rng_state() if ranks.device.type == "cuda" else None},
    }
    with open(tmp, "wb") as fh:
        torch.save(payload, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, final)
    return final


class Refused(Exception):
    """This run cannot go on as asked (exit 2): the message says why."""


def resume(model: nn.Module, optimizer: torch.optim.Optimizer, args: argparse.Namespace,
           ranks: Ranks) -> Progress:
    """Load the newest checkpoint, if any, into model and optimizer on every rank.

    Each rank reads the file itself (the checkpoint dir is on shared storage), then the
    ranks check that they all start at the same epoch. The RNG states saved are rank 0's;
    every rank was seeded alike and draws alike, so they are every rank's.
    """
    progress = Progress()
    path = trial.latest_checkpoint()
    if path is not None:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
        mutable = ("lr",) if args.pbt else ()  # pbt explores lr between segments
        wanted = {key: getattr(args, key) for key in RESUME_KEYS if key not in mutable}
        saved = {k: v for k, v in ckpt["hyperparameters"].items() if k not in mutable}
        if saved != wanted:
            raise Refused(f"{path} was saved with {ckpt['hyperparameters']}, not {wanted}; "
                          "remove it or use another trial dir")
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        for group in optimizer.param_groups:  # this segment's lr, not the checkpoint's
            group["lr"] = args.lr
        torch.set_rng_state(ckpt["rng"]["torch"])
        random.setstate(ckpt["rng"]["python"])
        if ckpt["rng"]["cuda"] is not None and ranks.device.type == "cuda":
            torch.cuda.set_rng_state(ckpt["rng"]["cuda"])
        progress = Progress(**ckpt["progress"])
        if ranks.main:
            print(f"resuming from {path.name}: epoch {progress.next_epoch}", flush=True)
    if args.pbt:  # every rank, one write: the lr this segment trains with, and from where
        sys.stdout.write(f"pbt: rank {ranks.rank} trains with lr "
                         f"{optimizer.param_groups[0]['lr']!r} from epoch "
                         f"{progress.next_epoch}\n")
        sys.stdout.flush()
    start, square = all_sum([progress.next_epoch, progress.next_epoch ** 2], ranks)
    # (sum e)^2 == world * sum e^2 only when every rank has the same e (Cauchy-Schwarz).
    if start * start != square * ranks.world:
        raise RuntimeError(f"ranks disagree on the epoch to resume from (rank {ranks.rank}: "
                           f"{progress.next_epoch}); is the checkpoint dir shared?")
    return progress


def end_epoch(args: argparse.Namespace) -> int:
    """The epoch to stop before: --epochs, or the promotion segment's budget if smaller
    (trial.budget(): how many epochs the trial may have run in all when this segment ends)."""
    try:
        budget = trial.budget()
    except ValueError:
        raise Refused("HPSEARCH_BUDGET must be a whole number of epochs; got "
                      f"{os.environ.get('HPSEARCH_BUDGET')!r}") from None
    if budget is None:
        return args.epochs
    if budget < 1:
        raise Refused(f"HPSEARCH_BUDGET must be at least 1 epoch; got {budget}")
    return min(budget, args.epochs)


class FirstStepClock:
    """Prints first_step_s once: seconds from the script's start to the end of its first
    optimizer step, and its two parts: imports_s (this script's imports) and after_imports_s
    (process group, data, model, optimizer, resume, the step itself). On CPU the optimizer's
    constructor alone takes seconds: it imports torch._dynamo on first use."""

    def __init__(self, ranks: Ranks) -> None:
        self.ranks, self.done = ranks, False

    def tick(self) -> None:
        if self.done:
            return
        self.done = True
        if self.ranks.device.type == "cuda":
            torch.cuda.synchronize()
        now = time.perf_counter()
        if self.ranks.main:
            print(f"first_step_s={now - SCRIPT_START:.3f} first_step_at={time.time():.3f} "
                  f"imports_s={IMPORTS_DONE - SCRIPT_START:.3f} "
                  f"after_imports_s={now - IMPORTS_DONE:.3f} "
                  f"device={self.ranks.device} world={self.ranks.world}", flush=True)


def train_epoch(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor,
                y: torch.Tensor, sampler: DistributedSampler, epoch: int, batch: int,
                clock: FirstStepClock) -> tuple[float, int]:
    """One pass over this rank's shard; returns (summed loss, samples)."""
    model.train()
    sampler.set_epoch(epoch)  # a new shuffle each epoch, the same one in every run
    # Every rank gets the same number of indices, so the same number of steps: DDP's
    # gradient all-reduces pair up.
    indices = torch.tensor(list(sampler), device=x.device)
    loss_sum = torch.zeros((), dtype=torch.float64, device=x.device)
    for start in range(0, len(indices), batch):
        rows = indices[start:start + batch]
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x[rows]), y[rows])
        loss.backward()
        optimizer.step()
        clock.tick()
        loss_sum += loss.detach().double() * len(rows)
    return loss_sum.item(), len(indices)


def pause(seconds: float) -> None:
    """Sleep, but wake as soon as this trial is asked to stop."""
    deadline = time.monotonic() + seconds
    while not trial.should_stop() and (left := deadline - time.monotonic()) > 0:
        time.sleep(min(0.2, left))


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    model.eval()
    logits = model(x)
    return ((logits.argmax(dim=1) == y).double().mean().item(),
            F.cross_entropy(logits, y).item())


def run(args: argparse.Namespace, ranks: Ranks) -> int:
    trial.should_stop()  # the first call installs the SIGTERM/SIGUSR1/SIGUSR2 handlers
    if args.batch_size % ranks.world:
        raise Refused(f"--batch-size {args.batch_size} is not divisible by the "
                                 f"world size {ranks.world}")
    end = end_epoch(args)
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    if ranks.device.type == "cpu":
        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    x_train, y_train, x_val, y_val = load_split(ranks.device, args.data)
    model = make_model(args.width).to(ranks.device)
    optimizer = make_optimizer(args.optimizer, args.lr, model)
    progress = resume(model, optimizer, args, ranks)
    trained = model
    if ranks.world > 1:
        trained = DistributedDataParallel(
            model, device_ids=[ranks.local_rank] if ranks.device.type == "cuda" else None)
    sampler = DistributedSampler(range(len(y_train)), num_replicas=ranks.world,
                                 rank=ranks.rank, shuffle=True, seed=args.seed)
    clock = FirstStepClock(ranks)
    for epoch in range(progress.next_epoch, end):
        began = time.perf_counter()
        loss_sum, samples = train_epoch(trained, optimizer, x_train, y_train, sampler, epoch,
                                        args.batch_size // ranks.world, clock)
        pause(args.epoch_sleep)
        # One all-reduce: the mean training loss, and whether any rank must stop.
        loss_sum, samples, stops = all_sum(
            [loss_sum, samples, float(trial.should_stop())], ranks)
        if ranks.main:
            val_acc, val_loss = evaluate(model, x_val, y_val)
            progress.record(epoch, val_acc, val_loss, loss_sum / samples)
            trial.report(epoch, val_acc=val_acc, val_loss=val_loss,
                         train_loss=progress.train_loss)
            save_checkpoint(model, optimizer, progress, args, ranks)
            print(f"epoch {epoch + 1}/{args.epochs} train_loss={progress.train_loss:.6f} "
                  f"val_acc={val_acc:.6f} val_loss={val_loss:.6f} "
                  f"epoch_s={time.perf_counter() - began:.3f}", flush=True)
        if stops:
            if ranks.world > 1:
                dist.barrier()  # rank 0's checkpoint is on disk before anyone exits
            if ranks.main:
                print(f"stopping after epoch {epoch + 1}: asked to stop; checkpoint saved, "
                      f"exit {EXIT_STOPPED}", flush=True)
            return EXIT_STOPPED
    if ranks.main:
        # The last epoch's model is the one checkpointed, so its accuracy is the objective;
        # best_val_acc is recorded beside it for reference.
        trial.result(val_acc=progress.val_acc, val_loss=progress.val_loss,
                     best_val_acc=progress.best_val_acc)
        if end < args.epochs:
            print(f"budget of {end} epoch{'s' if end > 1 else ''} reached (of {args.epochs}): "
                  "checkpoint saved, exit 0; a promoted trial resumes from here", flush=True)
        print(f"done: val_acc={progress.val_acc:.6f} val_loss={progress.val_loss:.6f} "
              f"best_val_acc={progress.best_val_acc:.6f} (epoch {progress.best_epoch + 1}) "
              f"total_s={time.perf_counter() - SCRIPT_START:.3f}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    ranks = start_ranks(args.device)
    try:
        code = run(args, ranks)
        if ranks.world > 1:
            # No rank tears its process group down while another still talks to it: gloo
            # then aborts the process at exit ("terminate called without an active
            # exception", SIGABRT), seen after a run had finished and saved everything.
            dist.barrier()
        return code
    except Refused as exc:
        print(f"train.py: error: {exc}", file=sys.stderr, flush=True)
        return 2
    finally:
        if ranks.world > 1:
            dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())

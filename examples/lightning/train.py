"""An MLP on scikit-learn's digits with PyTorch Lightning: the hpsearch Lightning example.

One process per rank: alone, or under a launcher (`launcher: torchrun`, srun, ...), which
sets RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE; DDP with gloo on CPU, NCCL on GPUs.
hpsearch.integrations.lightning reports val_acc, val_loss and train_loss every epoch from
rank 0, saves a Lightning checkpoint each epoch, stops every rank alike when the trial is
pruned or signalled, and stops at the promotion budget; a new attempt resumes from the
trial's latest checkpoint. Deterministic: the same seed and world size give the same
numbers, also when a run is stopped and resumed (on CPU; see README.md).

Exit codes: 0 done or the budget reached (result.json written); 75 asked to stop, after
saving a checkpoint (a retry or promotion resumes from it).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS

import lightning.pytorch as pl  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from hpsearch import trial  # noqa: E402
from hpsearch.integrations.lightning import (  # noqa: E402
    HpsearchCallback,
    cluster_environment,
    fit,
    rank_layout,
)

SPLIT_SEED = 0      # the train/validation split is the same whatever --seed is
VAL_FRACTION = 0.2  # 1797 digits: 1437 to train on, 360 to validate


class Digits(pl.LightningDataModule):
    """The bundled 8x8 digits, pixels in [0, 1], split once with a fixed seed."""

    def __init__(self, batch_size: int) -> None:
        super().__init__()
        self.batch_size = batch_size

    def setup(self, stage: str) -> None:
        digits = load_digits()
        x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
        y = torch.tensor(digits.target, dtype=torch.int64)
        order = torch.randperm(len(y), generator=torch.Generator().manual_seed(SPLIT_SEED))
        n_val = round(len(y) * VAL_FRACTION)
        self.val = TensorDataset(x[order[:n_val]], y[order[:n_val]])
        self.train = TensorDataset(x[order[n_val:]], y[order[n_val:]])

    def train_dataloader(self) -> DataLoader:
        # Under DDP Lightning swaps in a DistributedSampler (seeded by seed_everything) and
        # calls its set_epoch each epoch: the order is a function of seed and epoch.
        return DataLoader(self.train, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val, batch_size=len(self.val))


class DigitsMLP(pl.LightningModule):
    """64 inputs, two hidden layers of `width` units, 10 classes; Adam."""

    def __init__(self, lr: float, width: int, epoch_sleep: float = 0.0) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(64, width), nn.ReLU(), nn.Linear(width, width),
                                 nn.ReLU(), nn.Linear(width, 10))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], index: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("train_loss", loss, on_step=False, on_epoch=True, sync_dist=True)
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], index: int) -> None:
        x, y = batch
        logits = self.net(x)
        self.log("val_loss", F.cross_entropy(logits, y), sync_dist=True)
        self.log("val_acc", (logits.argmax(dim=1) == y).float().mean(), sync_dist=True)

    def on_train_start(self) -> None:
        # after the checkpoint's restore (and HpsearchCallback's optimizer_params): the lr
        # this fit trains with, and the epoch it starts at; one write, as the ranks share stdout
        lr = self.trainer.optimizers[0].param_groups[0]["lr"]
        sys.stdout.write(f"pbt: rank {self.global_rank} trains with lr {lr!r} from epoch "
                         f"{self.current_epoch}\n")
        sys.stdout.flush()

    def on_train_epoch_end(self) -> None:
        time.sleep(self.hparams.epoch_sleep)  # tests: a tiny run that outlasts a time limit

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lr", type=float, default=0.01, help="Adam's learning rate")
    parser.add_argument("--width", type=int, default=32, help="units per hidden layer")
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--epochs", type=int, default=5, help="epochs in all (max_epochs)")
    parser.add_argument("--seed", type=int, default=0, help="model init and data order")
    parser.add_argument("--accelerator", default="auto", help="cpu, gpu or auto")
    parser.add_argument("--epoch-sleep", type=float, default=0.0, metavar="SECONDS",
                        help="wait this long after each epoch: makes a tiny run outlast a time "
                             "limit in tests; the results are the same")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    warnings.filterwarnings("ignore", ".*does not have many workers.*")  # in-memory data
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    pl.seed_everything(args.seed, workers=True, verbose=False)
    devices, num_nodes = rank_layout()
    # the lr in force from this fit's start, also when it resumes from a checkpoint saved
    # with another (another member's, under pbt: docs/pbt.md)
    callback = HpsearchCallback(optimizer_params={"lr": args.lr})
    trainer = pl.Trainer(
        max_epochs=args.epochs, accelerator=args.accelerator, devices=devices,
        num_nodes=num_nodes, strategy="ddp" if devices * num_nodes > 1 else "auto",
        plugins=[cluster_environment()],  # never Lightning's SLURMEnvironment: see its docs
        callbacks=[callback],  # a Checkpoint: Lightning adds no ModelCheckpoint beside it
        deterministic=True, logger=False, enable_progress_bar=False, enable_model_summary=False,
        num_sanity_val_steps=0, default_root_dir=trial.trial_dir() / "lightning")
    environment = getattr(trainer.strategy, "cluster_environment", None)  # None: one process
    print(f"rank {trainer.global_rank}/{trainer.world_size} local {trainer.local_rank} "
          f"environment {type(environment).__name__ if environment else None}", flush=True)
    model = DigitsMLP(args.lr, args.width, args.epoch_sleep)
    code = fit(trainer, model, datamodule=Digits(args.batch_size))
    # one write per line: the ranks share the trial's stdout, and print() writes the text and
    # its newline apart, so two ranks ending together could run their lines into one
    sys.stdout.write(f"exit {code} after {trainer.current_epoch} epochs on rank "
                     f"{trainer.global_rank}: {callback.last_metrics}\n")
    sys.stdout.flush()
    return code


if __name__ == "__main__":
    sys.exit(main())

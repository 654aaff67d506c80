"""PyTorch Lightning in an hpsearch trial: reports, stopping, the promotion budget, checkpoints
in Lightning's own format, and a cluster environment that leaves Slurm to hpsearch.

    import lightning.pytorch as pl
    from hpsearch import trial
    from hpsearch.integrations.lightning import (HpsearchCallback, cluster_environment, fit,
                                                 rank_layout)

    devices, num_nodes = rank_layout()
    trainer = pl.Trainer(max_epochs=9, devices=devices, num_nodes=num_nodes,
                         plugins=[cluster_environment()], callbacks=[HpsearchCallback()],
                         enable_checkpointing=False, default_root_dir=trial.trial_dir() / "pl")
    sys.exit(fit(trainer, model, datamodule=data))   # 0 done, 75 stopped: resume later

HpsearchCallback, at the end of each validation epoch (not the sanity check), on every rank:
rank 0 reports the scalars of `trainer.callback_metrics` at step `trainer.current_epoch` (from
0, so a promotion budget of b epochs reports steps 0 .. b-1, as the rungs count); the ranks
save a checkpoint with `trainer.save_checkpoint` (Lightning's .ckpt, model, optimizer, loops
and callbacks' state) through `trial.checkpoint`, so the driver's checkpoint keeper sees it,
and meet at a barrier; then each asks `trial.should_stop()` and one reduction through the
strategy (any rank's yes) sets `trainer.should_stop` alike on all of them. With a budget
(`trial.budget()`, promotion mode) `max_epochs` becomes at most the budget. With
`optimizer_params` (under pbt: `{"lr": lr}`) it sets them on the optimizers when training
starts, after Lightning restored the checkpoint's optimizer state with the values it was
saved with (another member's, after a pbt exploit). A fit that ends
without a stop request writes result.json from rank 0 with the last reported metrics.

`fit` pins a TensorBoardLogger in the trial dir to version 0 (pin_logger_version: one run
per trial, not a version_N per segment), resumes from `resume_path()` (the trial's latest
checkpoint) and returns the exit code:
0, or 75 (`trial.EXIT_RESUME`) when the trial was asked to stop (STOP file, SIGUSR1/SIGUSR2)
or stopped by SIGTERM (a prune, a cancel or a time limit).

SIGTERM: Lightning's own handler (2.6) broadcasts a tensor from inside the signal handler, on
whatever each rank was doing; a rank already waiting in the next batch's all-reduce may then
never return to Python (a pruned 2-GPU trial sat out hpsearch's whole kill grace, 10 s,
then SIGKILL, on 2 x H200). At the start of training the callback puts its own handler
in its place, which only notes the signal; after every training batch the ranks agree (one
boolean reduction, any rank's yes) and all raise SIGTERMException after the same batch, with
no collective left in flight, so `fit` returns 75 on every rank.

Why `cluster_environment()` and never Lightning's SLURMEnvironment: without a plugin, a
Trainer inside a Slurm job (SLURM_NTASKS set, job name not bash/interactive) takes
SLURMEnvironment, which reads ranks and world size from SLURM_PROCID/SLURM_NTASKS (in a pilot
those are the pilot's allocation, not the trial's ranks), refuses a `devices` that differs
from SLURM_NTASKS_PER_NODE, picks a port from SLURM_JOB_ID, and on SIGUSR1 saves an
hpc_ckpt_N.ckpt and runs `scontrol requeue` on the job (a pilot: all its trials), behind
the driver, which already requeues and resumes trials itself. hpsearch's launchers export
the torch variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK, MASTER_ADDR,
MASTER_PORT), so: under torchrun, TorchElasticEnvironment (what Lightning itself prefers
there); otherwise LightningEnvironment, which takes the ranks from them and the world size
from the Trainer's `devices` x `num_nodes` (`rank_layout()`). With either, Lightning installs
no SIGUSR1 handler, so SIGUSR1/SIGUSR2 reach hpsearch.trial's handlers (should_stop()), and
nothing writes the hpc_ckpt files that Lightning would otherwise resume from under Slurm.

`HpsearchCallback(timing=True)` also times every training batch on every rank and reports it
with trial.report_timing (docs/scaling.md): under DDP through a communication hook
(hpsearch.integrations.ddp.DdpTiming), which tells compute from waiting for the all-reduce;
otherwise the whole batch counts as compute. Off by default: it adds a hook, and on a GPU a
synchronize at each batch's start and end.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import sys
import threading
from typing import Any

import lightning.pytorch as pl
import torch
import torch.distributed as dist
from lightning.fabric.plugins.environments import (
    ClusterEnvironment,
    LightningEnvironment,
    TorchElasticEnvironment,
)
from lightning.pytorch.callbacks import Checkpoint
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.exceptions import SIGTERMException

from hpsearch import trial

RESERVED = ("step", "time")  # hpsearch's own fields in a report


def cluster_environment() -> ClusterEnvironment:
    """The cluster environment plugin for a Trainer in an hpsearch trial: TorchElastic's under
    torchrun, else LightningEnvironment; never SLURMEnvironment (module docstring)."""
    if TorchElasticEnvironment.detect():
        return TorchElasticEnvironment()
    return LightningEnvironment()


def rank_layout() -> tuple[int, int]:
    """(devices, num_nodes) for the Trainer: the ranks hpsearch's launcher started,
    LOCAL_WORLD_SIZE per node and WORLD_SIZE in all; (1, 1) with no launcher."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    if per_node < 1 or world % per_node:
        raise ValueError(f"WORLD_SIZE={world} is not a multiple of LOCAL_WORLD_SIZE={per_node}")
    return per_node, world // per_node


def resume_path() -> str | None:
    """The checkpoint to pass as `trainer.fit(..., ckpt_path=...)`: the trial's latest (every
    rank reads it from the shared checkpoint dir), or None for a fresh start."""
    path = trial.latest_checkpoint()
    return None if path is None else str(path)


class HpsearchCallback(Checkpoint):
    """Reports, checkpoints and stops a Lightning fit as an hpsearch trial (module docstring).

    A `Checkpoint` to Lightning: the Trainer adds no ModelCheckpoint of its own beside it, and
    calls it after the LightningModule's on_train_epoch_end, so what that logs is reported.

    Args:
        metrics: the names of `trainer.callback_metrics` to report; None: every scalar.
        checkpoint: save a checkpoint each epoch (False: only report and stop).
        timing: time each training batch on every rank and report_timing() it (the first
            `timing_warmup` batches of a fit are left out); docs/scaling.md.
        optimizer_params: set on every param group of every optimizer when training starts,
            after Lightning restored the checkpoint's optimizer state, which holds the values
            it was saved with: under pbt, this segment's `{"lr": lr}` (docs/pbt.md).
    """

    def __init__(self, metrics: list[str] | None = None, checkpoint: bool = True,
                 timing: bool = False, timing_warmup: int = 1,
                 optimizer_params: dict[str, float] | None = None) -> None:
        self.metrics = metrics
        self.checkpoint = checkpoint
        self.optimizer_params = dict(optimizer_params or {})
        self.timing = timing
        self.timing_warmup = timing_warmup
        self._ddp_timing: Any = None  # DdpTiming, under DDP
        self._timed = contextlib.ExitStack()  # the batch being timed
        self._batches = 0  # batches timed in this fit
        self.last_metrics: dict[str, float] = {}  # the last report (in the checkpoint too)
        self.stopped = False  # asked to stop: no result.json, exit 75 (see fit)
        self._validated = False  # validation ran in this epoch
        self._sigterm = False  # SIGTERM came: every rank stops after the same batch
        trial.interrupted()  # installs hpsearch's signal handlers before Lightning's own

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """Limit max_epochs to the promotion budget (trial.budget()), if there is one."""
        budget = trial.budget()
        if stage != "fit" or budget is None:
            return
        if budget < 1:
            raise ValueError(f"HPSEARCH_BUDGET must be at least 1 epoch; got {budget}")
        limit = trainer.fit_loop.max_epochs
        trainer.fit_loop.max_epochs = budget if limit is None or limit < 0 else min(limit, budget)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Set optimizer_params; SIGTERM to this callback, not Lightning (module docstring);
        with timing, under DDP: register DdpTiming's communication hook."""
        for optimizer in trainer.optimizers:
            for group in optimizer.param_groups:
                group.update(self.optimizer_params)
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._on_sigterm)
        if not self.timing:
            return
        from torch.nn.parallel import DistributedDataParallel

        from hpsearch.integrations.ddp import DdpTiming
        model = trainer.strategy.model
        if isinstance(model, DistributedDataParallel):
            self._ddp_timing = DdpTiming(model, warmup=self.timing_warmup)

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                             batch: Any, batch_idx: int) -> None:
        if not self.timing:
            return
        self._timed.close()  # defensive: a batch whose end was not seen ends here
        step = trainer.global_step
        if self._ddp_timing is not None:
            timer = self._timed.enter_context(self._ddp_timing.step(step))
        else:
            sync = torch.cuda.synchronize if pl_module.device.type == "cuda" else None
            timer = self._timed.enter_context(trial.timed_step(
                step, sync=sync, report=self._batches >= self.timing_warmup))
        timer.items = _batch_items(batch, trainer.world_size)
        self._batches += 1

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        self._sigterm = True

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           outputs: Any, batch: Any, batch_idx: int) -> None:
        """Ends the timed step (report_timing from this rank); stops every rank here, alike,
        once any has had SIGTERM."""
        self._timed.close()
        if trainer.strategy.reduce_boolean_decision(self._sigterm, all=False):
            self.stopped = True
            raise SIGTERMException

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking and trainer.state.fn == TrainerFn.FITTING:
            self._validated = True

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """After an epoch that validated (or every epoch, with no validation): report from
        rank 0, save a checkpoint (all ranks), and stop all ranks alike if one is asked to.
        Here, not at validation's end, the epoch's training metrics are in callback_metrics."""
        if not (self._validated or not trainer.enable_validation):
            return
        self._validated = False
        epoch = trainer.current_epoch
        self.last_metrics = self._scalars(trainer.callback_metrics)
        if trainer.is_global_zero:
            trial.report(epoch, **self.last_metrics)
        if self.checkpoint:
            self._save(trainer, epoch)
        if trainer.strategy.reduce_boolean_decision(trial.should_stop(), all=False):
            self.stopped = trainer.should_stop = True

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """A fit that ran to its end (max_epochs, the budget): rank 0 writes result.json."""
        if not self.stopped and trainer.is_global_zero and self.last_metrics:
            trial.result(**self.last_metrics)

    def state_dict(self) -> dict[str, Any]:
        """Saved in each checkpoint: the last report, and every rank's RNG states (Lightning
        saves none: a resumed run would shuffle and drop out differently without them).
        Lightning dumps a checkpoint on every rank at once, so the gather here is safe."""
        return {"last_metrics": dict(self.last_metrics), "rng": _gather(_rng_states())}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the last report and this rank's RNG states (rank 0's if the world grew)."""
        self.last_metrics = dict(state_dict.get("last_metrics", {}))
        states = state_dict.get("rng") or []
        if states:
            rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
            _set_rng_states(states[rank] if rank < len(states) else states[0])

    def _scalars(self, logged: dict[str, Any]) -> dict[str, float]:
        names = self.metrics if self.metrics is not None else sorted(logged)
        out = {}
        for name in names:
            value = logged.get(name)
            if value is None:
                if self.metrics is not None:
                    raise KeyError(f"metric {name!r} was not logged; logged: {sorted(logged)}")
                continue
            if name in RESERVED or getattr(value, "numel", lambda: 1)() != 1:
                continue
            out[name] = float(value.item() if hasattr(value, "item") else value)
        return out

    def _save(self, trainer: pl.Trainer, epoch: int) -> None:
        """trainer.save_checkpoint on every rank into the path rank 0 gets from
        trial.checkpoint (a sharded strategy writes a folder there from each rank); rank 0
        renames it into place and registers it; then the ranks meet, so no rank leaves
        before the checkpoint is complete."""
        if trainer.is_global_zero:
            with trial.checkpoint(epoch, ".ckpt") as tmp:
                trainer.strategy.broadcast(str(tmp))
                trainer.save_checkpoint(tmp)
        else:
            trainer.save_checkpoint(str(trainer.strategy.broadcast(None)))
        trainer.strategy.barrier("hpsearch-checkpoint")


def _batch_items(batch: Any, world: int) -> float | None:
    """Samples in a batch on all ranks (the first dimension of its first tensor x the
    world size); None where the batch holds no tensor."""
    while isinstance(batch, (list, tuple)) and batch:
        batch = batch[0]
    if isinstance(batch, dict) and batch:
        return _batch_items(next(iter(batch.values())), world)
    if isinstance(batch, torch.Tensor) and batch.dim() > 0:
        return float(batch.shape[0] * world)
    return None


def _rng_states() -> dict[str, Any]:
    """This process's RNG states: torch (and CUDA once it is in use), Python and NumPy, as
    plain bytes and numbers (they travel through all_gather_object, and a checkpoint then
    holds no NumPy arrays)."""
    states: dict[str, Any] = {"torch": _bytes(torch.get_rng_state()), "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = [_bytes(s) for s in torch.cuda.get_rng_state_all()]
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        kind, keys, pos, has_gauss, cached = numpy.random.get_state()
        states["numpy"] = (kind, keys.astype("<u4").tobytes(), pos, has_gauss, cached)
    return states


def _bytes(state: torch.Tensor) -> bytes:
    return bytes(state.numpy().tobytes())


def _tensor(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def _set_rng_states(states: dict[str, Any]) -> None:
    torch.set_rng_state(_tensor(states["torch"]))
    random.setstate(states["python"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([_tensor(s) for s in states["cuda"]])
    numpy = sys.modules.get("numpy")
    if numpy is not None and "numpy" in states:
        kind, keys, pos, has_gauss, cached = states["numpy"]
        numpy.random.set_state((kind, numpy.frombuffer(keys, dtype="<u4"), pos, has_gauss,
                                cached))


def _gather(obj: Any) -> list[Any]:
    """obj from every rank, in rank order ([obj] with one process)."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return [obj]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def pin_logger_version(trainer: pl.Trainer) -> None:
    """One TensorBoard run per trial: a TensorBoardLogger (Lightning's default logger when
    tensorboard is installed) numbers a new version_N in each process that writes, so each
    segment or retry of a trial, a new process, would be a run of its own. One given no
    version and writing inside the trial dir gets version 0 in every attempt; each attempt
    adds an events file to version_0, its steps going on from the checkpoint's. A logger
    with a version of its own, or writing elsewhere (a log dir shared by trials, where the
    numbers tell the trials apart), is left alone; so is CSVLogger, which would delete the
    metrics.csv of a version it reopens. fit() calls it."""
    root = os.path.realpath(trial.trial_dir())
    for logger in trainer.loggers:
        if isinstance(logger, TensorBoardLogger) and logger._version is None:
            where = os.path.realpath(logger.root_dir)
            if os.path.commonpath([root, where]) == root:
                logger._version = 0


def fit(trainer: pl.Trainer, model: pl.LightningModule, **fit_args: Any) -> int:
    """trainer.fit(model, **fit_args) resumed from resume_path(), its TensorBoard logger's
    version pinned (pin_logger_version); the trial's exit code: 0 when it ran to the end (or
    to its budget), trial.EXIT_RESUME (75) when it was asked to stop, its checkpoint saved.
    The trainer needs an HpsearchCallback."""
    callbacks: list[pl.Callback] = trainer.callbacks  # type: ignore[attr-defined]
    callback = next((c for c in callbacks if isinstance(c, HpsearchCallback)), None)
    if callback is None:
        raise ValueError("fit() needs an HpsearchCallback in the Trainer's callbacks")
    pin_logger_version(trainer)
    try:
        trainer.fit(model, ckpt_path=resume_path(), **fit_args)
    except SIGTERMException:
        return trial.EXIT_RESUME
    return trial.EXIT_RESUME if callback.stopped else 0

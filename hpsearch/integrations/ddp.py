"""Per-rank step timing of a PyTorch DistributedDataParallel model (docs/scaling.md).

    from hpsearch.integrations.ddp import DdpTiming
    model = DistributedDataParallel(net)
    timing = DdpTiming(model)                      # before the first backward
    for step, (x, y) in enumerate(loader):
        with timing.step(step) as t:               # on every rank
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            t.items = len(x) * world_size          # optional: throughput in samples/s

The method: DDP calls a communication hook for each gradient bucket the moment backward has
produced its gradients, and backward() returns only once every bucket's all-reduce is done.
DdpTiming's hook (the default all-reduce, averaged, as DDP's own) notes when the last bucket
became ready and when the all-reduces completed; the time between them is the
communication backward had to wait for: transfer not hidden behind the rest of backward,
plus the wait for slower ranks, which arrive at the all-reduce later. compute_s = step_s -
that wait. On CPU the clock is time.perf_counter (the completion is seen in the future's
callback); on a GPU, CUDA events recorded on the computing stream when the last bucket is
ready and on the stream the all-reduce's result is handed over on, read after a
synchronize at the end of each step (which the step time includes).

Limits: communication that overlaps backward counts as compute (it cost nothing in time);
a rank's compute can be slowed by the communication it overlaps (gloo's threads take CPU
cores, NCCL's kernels take SMs); other collectives (DDP's buffer broadcast before forward,
a loss all_reduce of your own, a sharded optimizer) are not seen: add their time to
`t.comm_s` yourself. The first `warmup` steps (DDP builds its buckets, kernels are tuned)
are timed but not reported.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist

from hpsearch import trial


class DdpTiming:
    """Times the steps of a DDP model on this rank; registers its communication hook.

    Args:
        model: the DistributedDataParallel model (no hook of its own registered yet).
        warmup: the first steps timed but not reported.
        process_group: the group DDP reduces over (None: the default group).
    """

    def __init__(self, model: Any, warmup: int = 1, process_group: Any = None) -> None:
        self.warmup = warmup
        self.group = process_group
        self.steps = 0  # steps timed
        self.cuda = any(p.is_cuda for p in model.parameters())
        self.last: trial.StepTimer | None = None  # the last step's times
        self._ready: Any = None   # when the latest bucket became ready (float or Event)
        self._done: Any = None    # when the all-reduces completed
        model.register_comm_hook(None, self._hook)

    def _now(self) -> Any:
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()  # on the current stream: after the work enqueued on it so far
        return event

    def _hook(self, state, bucket):  # no annotations: DDP checks them against its own
        self._ready = self._now()
        tensor = bucket.buffer()
        world = dist.get_world_size(self.group)
        tensor.div_(world)
        future = dist.all_reduce(tensor, group=self.group, async_op=True).get_future()

        def done(fut):
            self._done = self._now()  # buckets complete in the order they were launched
            return fut.value()[0]

        return future.then(done)

    def _waited(self) -> float:
        """Seconds from the last bucket ready to the all-reduces done, in this step."""
        if self._ready is None or self._done is None:
            return 0.0
        if self.cuda:
            return max(0.0, self._ready.elapsed_time(self._done) / 1000)
        return max(0.0, self._done - self._ready)

    @contextlib.contextmanager
    def step(self, step: int) -> Iterator[trial.StepTimer]:
        """Time one step (forward, backward, optimizer) and report it with
        trial.report_timing, after the warm-up steps. `comm_s` may be added to in the
        block (collectives the hook does not see); the hook's wait is added at its end."""
        self._ready = self._done = None
        sync = torch.cuda.synchronize if self.cuda else None
        report = self.steps >= self.warmup
        with trial.timed_step(step, sync=sync, report=False) as timer:
            yield timer
            if sync is not None:
                sync()  # the events are complete before they are read
            timer.comm_s += self._waited()
        self.steps += 1
        self.last = timer
        if report:
            trial.report_timing(step, step_s=timer.step_s or 0.0,
                                compute_s=timer.compute_s, items=timer.items)

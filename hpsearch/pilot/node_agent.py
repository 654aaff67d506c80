"""A pilot's agent on one of its other nodes: it starts the trials the pilot sends there.

Without it, a trial on a pilot node other than the pilot's own starts as an `srun --overlap`
step of its own: 0.15-0.2 s of step launch per trial (benchmarks/README.md, slurm_throughput).
The pilot instead starts this program once per other node, in one long-lived `srun
--overlap` step each (hpsearch.pilot.agents), holding all of the pilot's CPUs there (the
trials' shells narrow themselves to their slot's, as on the pilot's node). Parsl's
HighThroughputExecutor starts one worker pool per node for the same reason.

It runs the trials as the pilot runs those on its own node: with the local executor, so a
trial's time limit, checkpoint signal, stop grace, exit code and peak memory are the same
code's. The pilot and it talk over the step's stdin and stdout, which srun carries (no file
on shared storage, no port: nothing another user could plant or reach), one JSON object a
line:

    pilot -> agent   {"run": {trial_id, attempt, command, env, trial_dir, workdir, time_factor}}
                     {"signal": [trial_id, signal number]}   {"cancel": trial_id}
    agent -> pilot   {"ready": node}   {"started": {...}}   {"ended": {...}}

(started and ended: hpsearch.executors.base's Started and Ended, field by field). A line
that does not parse is said on stderr and skipped. When its stdin closes (the pilot left or
died), it stops its trials as a cancel does (SIGTERM, the grace, SIGKILL) and exits. Signals
Slurm sends the whole step (scancel --signal, preemption, the time limit) reach the trials
from Slurm itself; the agent only outlives them, to tell their ends.

    python -c SAFE_MODULE_RUN hpsearch.pilot.node_agent NODE TRIAL_TIME GRACE SIGNAL BEFORE
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
import time
from collections.abc import Mapping

from hpsearch.executors.base import Started
from hpsearch.executors.local import LocalExecutor
from hpsearch.pilot.protocol import launch_from_dict
from hpsearch.pilot.tree_watch import OUTLIVED
from hpsearch.slurm.environment import GPU_VISIBILITY, without_shape

WAIT = 1.0  # seconds its loop waits at most for a line or a trial's end
MAX_LINE = 1 << 22  # bytes: a longer line without its end is dropped (4 MiB of environment)


def step_gpu_lists(env: Mapping[str, str]) -> dict[str, str]:
    """The GPU lists Slurm set for this agent's step. A trial's own step would have had its
    step's lists, not the pilot's node's; its shell then narrows them to its GPUs' positions
    (hpsearch.launch.base.GPU_NARROW), so they override the pilot's in its environment."""
    return {name: env[name] for name in (*GPU_VISIBILITY, "SLURM_STEP_GPUS") if name in env}


class Agent:
    def __init__(self, node: str, runner: LocalExecutor, out: int, inp: int = 0) -> None:
        self.node, self.runner, self.out, self.inp = node, runner, out, inp
        self.buffer = b""
        self.closed = False  # its stdin ended: the pilot is gone
        self.step_gpus = step_gpu_lists(os.environ)

    def run(self) -> int:
        os.set_blocking(self.inp, False)
        self.runner.wake_on(self.inp)
        self._send({"ready": self.node, "pid": os.getpid()})
        while not self.closed or self.runner.running_:
            for event in self.runner.poll(0.0 if self.closed else WAIT):
                kind = "started" if isinstance(event, Started) else "ended"
                self._send({kind: dataclasses.asdict(event)})
            if not self.closed:
                self._read()
            elif not self.runner.running_:
                break
            else:
                time.sleep(0.02)  # stdin is at its end (always readable): no busy loop
        return 0

    def _read(self) -> None:
        try:
            chunk = os.read(self.inp, 1 << 16)
        except BlockingIOError:
            return
        if not chunk:
            self._close()
            return
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        if len(self.buffer) > MAX_LINE:
            print(f"hpsearch agent: dropped a line of over {MAX_LINE} bytes", file=sys.stderr)
            self.buffer = b""
        for line in lines:
            if line.strip():
                self._obey(line)

    def _obey(self, line: bytes) -> None:
        try:
            message = json.loads(line)
            if not isinstance(message, dict):
                raise ValueError("not a JSON object")
            if "run" in message:
                launch = launch_from_dict(message["run"])
                self.runner.submit(dataclasses.replace(
                    launch, env={**launch.env, **self.step_gpus}))
            elif "signal" in message:
                trial_id, number = (int(x) for x in message["signal"])
                run = self.runner.running_.get(trial_id)
                if run is not None:
                    self.runner.signal_run(trial_id, run.pid, number)
            elif "cancel" in message:
                self.runner.cancel(int(message["cancel"]))
            else:
                raise ValueError("expected run, signal or cancel")
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            print(f"hpsearch agent: skipped a line the pilot did not write ({exc}): "
                  f"{line[:200]!r}", file=sys.stderr, flush=True)

    def _close(self) -> None:
        """The pilot is gone: stop every trial as a cancel does, then leave."""
        self.closed = True
        self.runner.wake_on(None)
        for trial_id in list(self.runner.running_):
            self.runner.cancel(trial_id)

    def _send(self, message: dict) -> None:
        try:
            os.write(self.out, json.dumps(message).encode() + b"\n")
        except BrokenPipeError:  # srun is gone: the trials are stopped as they end
            self._close()


def main(argv: list[str]) -> int:
    node, trial_time, grace, signal_name, before = argv
    for sig in OUTLIVED:  # what Slurm sends the whole step: outlived, not obeyed (a handler,
        signal.signal(sig, lambda s, f: None)  # not SIG_IGN, which the trials would inherit)
    out = os.dup(1)  # the pilot's channel; anything printed by mistake goes to stderr
    os.dup2(2, 1)
    runner = LocalExecutor(1 << 20, None, 1, float(trial_time) or None, float(grace),
                           signal_name or None, float(before))
    runner.base_env = without_shape(runner.base_env)  # each trial gets its own
    runner.host = node  # where its trials' pids are (Started.host)
    return Agent(node, runner, out).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

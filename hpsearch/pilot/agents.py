"""The pilot's side of its node agents (hpsearch.pilot.node_agent): one long-lived `srun
--overlap` step on each of its other nodes, started with the pilot, through which the trials
placed there start without a step launch of their own.

A node's trials go to its agent from the pilot's start: while the agent's Python starts,
they wait in its stdin (the pipe srun carries), at most SEND_BEFORE_READY bytes of them, so
the pilot never blocks on a full pipe. Before, they started as srun steps of their own until
the agent was ready: at a pilot's start that was a step launch for nearly every trial of the
first wave on its other nodes (12 of 16 in a 4-node pilot of 4 slots a node), which on the
test cluster held the first wave's last trials back by up to 0.6 s. An agent not ready after
READY_WAIT is given up (its step killed); on a node whose agent is gone, or while one not yet
ready has its budget of bytes, trials start as their own srun steps as before
(hpsearch.pilot.program). An agent that ends while trials of its are running or waiting (its
node failed, its step was killed) ends them: exited where the trial's shell wrote its exit
code (hpsearch.launch.attempt), else lost, as a trial's own step that ends without one.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from hpsearch.executors.base import Ended, Started
from hpsearch.launch.attempt import Launch
from hpsearch.pilot.protocol import launch_to_dict
from hpsearch.procs import module_argv
from hpsearch.warm import open_private

STEP_NAME = "hpsearch-agent"
READY_WAIT = 30.0  # seconds an agent may take to say it is ready; then it is given up
SEND_BEFORE_READY = 32 << 10  # bytes sent to an agent not yet ready: half a pipe's 64 KiB


@dataclasses.dataclass
class _Agent:
    node: str
    proc: subprocess.Popen
    fd: int  # its stdout, non-blocking
    ready: bool = False
    gone: str | None = None  # why it is gone
    buffer: bytes = b""
    trials: dict[int, Launch] = dataclasses.field(default_factory=dict)  # running there
    began: float = dataclasses.field(default_factory=time.monotonic)
    waiting: int = 0  # bytes sent before it was ready (they wait in its stdin)


class NodeAgents:
    def __init__(self, exit_code: Callable[[Path, int], int | None]) -> None:
        """exit_code(trial_dir, attempt): what a trial's shell wrote (pilot.program's
        remote_exit_code), read for the trials of an agent that ended."""
        self.exit_code = exit_code
        self.agents: dict[str, _Agent] = {}
        self.where: dict[int, str] = {}  # trial id -> its node, while it runs on an agent

    def start(self, nodes: Sequence[str], node_cpus: int, env: Mapping[str, str],
              agent_args: Sequence[str], log: Path) -> None:
        """One step per node in `nodes`, in the background (the pilot goes on meanwhile)."""
        try:  # the pilot's own folder; a link planted in its place is not followed
            err: int = open_private(str(log), os.O_WRONLY | os.O_APPEND)
        except OSError:
            err = subprocess.DEVNULL
        try:
            for node in nodes:
                argv = ["srun", "--overlap", "--nodes=1", "--ntasks=1", f"--nodelist={node}",
                        f"--job-name={STEP_NAME}", f"--cpus-per-task={node_cpus}",
                        "--cpu-bind=none",
                        *module_argv(sys.executable, "hpsearch.pilot.node_agent", node,
                                     *agent_args)]
                try:
                    proc = subprocess.Popen(argv, env=dict(env), stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, stderr=err,
                                            start_new_session=True)
                except OSError as exc:  # no srun: its trials start as before
                    print(f"hpsearch pilot: no agent on {node}: {exc}", file=sys.stderr,
                          flush=True)
                    continue
                assert proc.stdout is not None
                fd = proc.stdout.fileno()
                os.set_blocking(fd, False)
                self.agents[node] = _Agent(node, proc, fd)
        finally:
            if err != subprocess.DEVNULL:
                os.close(err)

    def ready(self, node: str) -> bool:
        agent = self.agents.get(node)
        return agent is not None and agent.ready and agent.gone is None

    def takes(self, node: str) -> bool:
        """Whether a trial on `node` goes to its agent now: it is ready, or still starting
        with room in its stdin for the trial to wait."""
        agent = self.agents.get(node)
        return agent is not None and agent.gone is None and (
            agent.ready or agent.waiting < SEND_BEFORE_READY)

    def submit(self, node: str, launch: Launch) -> bool:
        """Send the attempt to its node's agent; False if it could not take it."""
        agent = self.agents[node]
        if not self._send(agent, {"run": launch_to_dict(launch)}):
            return False
        agent.trials[launch.trial_id] = launch
        self.where[launch.trial_id] = node
        return True

    def live_fds(self) -> set[int]:
        """The outputs of the agents not gone: a poll on them wakes when one has news."""
        return {agent.fd for agent in self.agents.values() if agent.gone is None}

    def running(self) -> list[int]:
        return list(self.where)

    def signal(self, trial_id: int, sig: int) -> None:
        agent = self.agents.get(self.where.get(trial_id, ""))
        if agent is not None:
            self._send(agent, {"signal": [trial_id, int(sig)]})

    def cancel(self, trial_id: int) -> None:
        agent = self.agents.get(self.where.get(trial_id, ""))
        if agent is not None:
            self._send(agent, {"cancel": trial_id})

    def poll(self) -> list[Started | Ended]:
        """What the agents said since the last poll, and the ends of an agent's trials
        where it has gone."""
        events: list[Started | Ended] = []
        for agent in self.agents.values():
            if agent.gone is None:
                events += self._read(agent)
            if agent.gone is None and not agent.ready and \
                    time.monotonic() - agent.began > READY_WAIT:
                agent.proc.kill()  # its trials waiting in its stdin end lost, and run again
                agent.gone = f"the pilot's agent on {agent.node} did not start in " \
                             f"{READY_WAIT:g} s"
            if agent.gone is not None and agent.trials:
                events += self._orphans(agent)
        return events

    def close(self, wait: float = 10.0) -> None:
        """Close each agent's stdin (it stops what still runs and leaves), then its srun."""
        for agent in self.agents.values():
            if agent.proc.stdin is not None:
                try:
                    agent.proc.stdin.close()
                except OSError:
                    pass
        for agent in self.agents.values():
            try:
                agent.proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                agent.proc.kill()
                agent.proc.wait()
            if agent.proc.stdout is not None:
                agent.proc.stdout.close()

    # -- helpers ----------------------------------------------------------------------------
    def _send(self, agent: _Agent, message: dict) -> bool:
        if agent.gone is not None or agent.proc.stdin is None:
            return False
        line = json.dumps(message).encode() + b"\n"
        try:
            agent.proc.stdin.write(line)
            agent.proc.stdin.flush()
            if not agent.ready:
                agent.waiting += len(line)
        except (BrokenPipeError, OSError) as exc:
            agent.gone = f"its agent's step took no more ({exc})"
            return False
        return True

    def _read(self, agent: _Agent) -> list[Started | Ended]:
        events: list[Started | Ended] = []
        while True:
            try:
                chunk = os.read(agent.fd, 1 << 16)
            except BlockingIOError:
                break
            except OSError as exc:
                chunk, agent.gone = b"", f"its agent's output could not be read ({exc})"
            if not chunk:
                code = agent.proc.poll()
                agent.gone = agent.gone or (
                    f"the pilot's agent on {agent.node} ended (its srun step exited "
                    f"{'with ' + str(code) if code is not None else 'its output'})")
                break
            agent.buffer += chunk
        *lines, agent.buffer = agent.buffer.split(b"\n")
        for line in lines:
            event = self._event(agent, line)
            if event is not None:
                events.append(event)
        return events

    def _event(self, agent: _Agent, line: bytes) -> Started | Ended | None:
        try:
            message = json.loads(line)
            if not isinstance(message, dict):
                raise ValueError("not a JSON object")
            if "ready" in message:
                agent.ready = True
                return None
            if "started" in message:
                return Started(**message["started"])
            if "ended" in message:
                ended = Ended(**message["ended"])
                agent.trials.pop(ended.trial_id, None)
                self.where.pop(ended.trial_id, None)
                return ended
        except (ValueError, TypeError, KeyError) as exc:  # UnicodeDecodeError: a ValueError
            print(f"hpsearch pilot: agent on {agent.node} said something else ({exc}): "
                  f"{line[:200]!r}", file=sys.stderr, flush=True)
        return None

    def _orphans(self, agent: _Agent) -> list[Started | Ended]:
        ended: list[Started | Ended] = []
        for trial_id, launch in list(agent.trials.items()):
            del agent.trials[trial_id]
            self.where.pop(trial_id, None)
            code = self.exit_code(launch.trial_dir, launch.attempt)
            ended.append(Ended(trial_id, launch.attempt, None, "lost", f"{agent.gone}, and "
                               "the trial's shell there wrote no exit code")
                         if code is None else Ended(trial_id, launch.attempt, code, "exited"))
        return ended

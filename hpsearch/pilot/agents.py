"""The pilot's side of its node agents (hpsearch.pilot.node_agent): one long-lived `srun
--overlap` step on each of its other nodes, started with the pilot, through which the trials
placed there start without a step launch of their own.

A node's trials go to its agent once the agent has said it is ready; until then (its Python
still starting), and on a node whose agent is gone, they start as their own srun steps as
before (hpsearch.pilot.program). An agent that ends while trials of its are running (its
node failed, its step was killed) ends them: exited where the trial's shell wrote its exit
code (hpsearch.launch.attempt), else lost, as a trial's own step that ends without one.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from hpsearch.executors.base import Ended, Started
from hpsearch.launch.attempt import Launch
from hpsearch.pilot.protocol import launch_to_dict
from hpsearch.procs import module_argv
from hpsearch.warm import open_private

STEP_NAME = "hpsearch-agent"


@dataclasses.dataclass
class _Agent:
    node: str
    proc: subprocess.Popen
    fd: int  # its stdout, non-blocking
    ready: bool = False
    gone: str | None = None  # why it is gone
    buffer: bytes = b""
    trials: dict[int, Launch] = dataclasses.field(default_factory=dict)  # running there


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
        try:
            agent.proc.stdin.write(json.dumps(message).encode() + b"\n")
            agent.proc.stdin.flush()
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

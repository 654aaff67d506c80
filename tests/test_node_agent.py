"""A pilot's node agent (hpsearch.pilot.node_agent) and the pilot's side of it
(hpsearch.pilot.agents), run here without Slurm: the agent as the process srun would start,
its stdin and stdout the pipes srun would carry. On the emulated cluster, through real srun
steps: tests/slurm/test_node_agents.py."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpsearch.executors.base import Ended, Started
from hpsearch.launch.attempt import Launch
from hpsearch.launch.base import GPU_NARROW
from hpsearch.pilot import agents as agents_module
from hpsearch.pilot.agents import NodeAgents
from hpsearch.pilot.program import remote_exit_code
from hpsearch.pilot.protocol import launch_to_dict
from hpsearch.procs import module_argv


def _launch(tmp_path: Path, tid: int, command: str, env: dict | None = None) -> Launch:
    trial_dir = tmp_path / "trials" / str(tid)
    return Launch(tid, 1, command, {"HPSEARCH_TRIAL_DIR": str(trial_dir), "HPSEARCH_ATTEMPT": "1",
                                    **(env or {})}, trial_dir, tmp_path, {"x": tid})


class _Agent:
    """The agent as srun would run it: NODE TRIAL_TIME GRACE SIGNAL BEFORE."""

    def __init__(self, grace: float = 2.0, signal_name: str = "", env: dict | None = None):
        self.proc = subprocess.Popen(
            module_argv(sys.executable, "hpsearch.pilot.node_agent", "n2", "0", str(grace),
                        signal_name, "1"),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env={**os.environ, **(env or {})})
        assert json.loads(self._line())["ready"] == "n2"

    def send(self, message: dict | bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(message if isinstance(message, bytes)
                              else json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def run(self, launch: Launch) -> None:
        self.send({"run": launch_to_dict(launch)})

    def _line(self) -> bytes:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, self.proc.stderr.read() if self.proc.stderr else ""
        return line

    def next(self, kind: str) -> dict:
        message = json.loads(self._line())
        assert kind in message, message
        return message[kind]

    def close(self) -> tuple[int, str]:
        assert self.proc.stdin is not None and self.proc.stderr is not None
        self.proc.stdin.close()
        code = self.proc.wait(timeout=20)
        return code, self.proc.stderr.read().decode()


def test_a_trial_sent_to_the_agent_runs_there_and_its_end_comes_back(tmp_path):
    agent = _Agent()
    agent.run(_launch(tmp_path, 7, "echo hello; echo $HPSEARCH_MINE; exit 3",
                      {"HPSEARCH_MINE": "it's mine"}))
    started = agent.next("started")
    assert (started["trial_id"], started["attempt"]) == (7, 1) and started["pid"] > 0
    ended = agent.next("ended")
    assert (ended["trial_id"], ended["exit_code"], ended["reason"]) == (7, 3, "exited")
    assert ended["peak_rss_mb"] > 0  # measured on the node, as the local executor does
    trial_dir = tmp_path / "trials" / "7"
    assert (trial_dir / "stdout.log").read_text() == "hello\nit's mine\n"
    assert remote_exit_code(trial_dir, 1) == 3  # its shell wrote it, as everywhere
    assert json.loads((trial_dir / "params.json").read_text()) == {"x": 7}
    assert agent.close()[0] == 0


def test_the_checkpoint_signal_and_a_cancel_reach_the_trials_on_the_agent(tmp_path):
    agent = _Agent(grace=5.0, signal_name="USR1")
    agent.run(_launch(tmp_path, 1, "trap 'echo saved > saved; exit 75' USR1; "
                                   "while :; do sleep 0.05; done"))
    agent.run(_launch(tmp_path, 2, "sleep 30"))
    assert {agent.next("started")["trial_id"] for _ in range(2)} == {1, 2}
    time.sleep(0.3)  # the trap is set
    agent.send({"signal": [1, int(signal.SIGUSR1)]})
    ended = agent.next("ended")
    assert (ended["trial_id"], ended["exit_code"]) == (1, 75)
    assert (tmp_path / "saved").read_text() == "saved\n"
    began = time.monotonic()
    agent.send({"cancel": 2})
    ended = agent.next("ended")
    assert (ended["trial_id"], ended["reason"]) == (2, "cancelled")
    assert time.monotonic() - began < 3  # SIGTERM ended it: no wait for the grace
    agent.close()


def test_when_the_pilot_goes_the_agent_stops_its_trials_and_leaves(tmp_path):
    agent = _Agent(grace=1.0)
    agent.run(_launch(tmp_path, 4, "trap '' TERM; sleep 60"))  # ignores SIGTERM
    pid = agent.next("started")["pid"]
    began = time.monotonic()
    code, _ = agent.close()
    assert code == 0 and time.monotonic() - began < 10  # SIGKILL after the 1 s grace
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_line_the_pilot_did_not_write_is_skipped_and_the_next_one_obeyed(tmp_path):
    agent = _Agent()
    agent.send(b"not json\n")
    agent.send({"run": {"trial_id": 1}})  # half an assignment
    agent.send({"format": "unknown"})
    agent.send(b"\xff\xfe{\"run\": 1}\x00\n")  # not UTF-8, a NUL
    agent.send(b'"run"\n' + b"1" * 40 + b"\n")  # a JSON string, a number beyond 64 bits
    agent.send(b"{" + b"x" * (5 << 20) + b"\n")  # a line of 5 MB
    agent.run(_launch(tmp_path, 3, "exit 0"))
    assert agent.next("started")["trial_id"] == 3
    assert agent.next("ended")["exit_code"] == 0
    _, err = agent.close()
    # 7 lines skipped (the 5 MB line: its first 4 MiB dropped, the rest skipped)
    assert err.count("skipped a line the pilot did not write") == 7
    assert "dropped a line of over 4194304 bytes" in err


def test_a_trial_on_an_agent_gets_its_step_gpu_lists_narrowed_to_its_own_gpus(tmp_path):
    """What cannot run here is a GPU; what can: the lists Slurm set for the agent's step
    (all of the pilot's GPUs on that node) win over the pilot's node's, as a trial's own
    step's did, and GPU_NARROW cuts them to the trial's positions."""
    agent = _Agent(env={"CUDA_VISIBLE_DEVICES": "4,5,6,7", "SLURM_STEP_GPUS": "4,5,6,7"})
    agent.run(_launch(tmp_path, 5, GPU_NARROW + "\necho $CUDA_VISIBLE_DEVICES",
                      {"CUDA_VISIBLE_DEVICES": "0,1", "HPSEARCH_GPU_FIELDS": "2,3"}))
    agent.next("started")
    assert agent.next("ended")["exit_code"] == 0
    assert (tmp_path / "trials" / "5" / "stdout.log").read_text() == "5,6\n"
    agent.close()


# -- the pilot's side: NodeAgents, with srun's part played by a script that runs its command

@pytest.fixture
def fake_srun(tmp_path, monkeypatch):
    """A stand-in for srun on PATH: drops srun's options and runs the command, as srun runs
    a one-task step (stdin and stdout carried). The real srun: tests/slurm/."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    srun = bin_dir / "srun"
    srun.write_text('#!/bin/sh\nwhile [ "${1#--}" != "$1" ]; do shift; done\n'
                    'sleep "${FAKE_SRUN_DELAY:-0}"\nexec "$@"\n')
    srun.chmod(stat.S_IRWXU)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")


def _wait_for(agents: NodeAgents, want, seconds: float = 15.0) -> list:
    events: list = []
    deadline = time.monotonic() + seconds
    while not want(events) and time.monotonic() < deadline:
        events += agents.poll()
        time.sleep(0.02)
    return events


def test_the_pilot_sends_trials_to_ready_agents_and_reads_their_ends(tmp_path, fake_srun):
    agents = NodeAgents(remote_exit_code)
    agents.start(["n2", "n3"], 4, dict(os.environ), ["0", "2", "", "1"], tmp_path / "a.log")
    assert not agents.ready("n2")  # not before it said so
    _wait_for(agents, lambda _: agents.ready("n2") and agents.ready("n3"))
    assert agents.submit("n2", _launch(tmp_path, 1, "exit 0"))
    assert agents.submit("n3", _launch(tmp_path, 2, "exit 9"))
    events = _wait_for(agents, lambda e: sum(isinstance(x, Ended) for x in e) == 2)
    ends = {e.trial_id: e for e in events if isinstance(e, Ended)}
    assert {e.trial_id for e in events if isinstance(e, Started)} == {1, 2}
    assert (ends[1].exit_code, ends[2].exit_code) == (0, 9)
    assert agents.running() == []
    agents.close()


def test_what_an_agent_says_that_is_not_a_message_is_named_and_skipped(tmp_path, capsys):
    agents = NodeAgents(remote_exit_code)
    agent = type("A", (), {"node": "n2", "ready": False, "trials": {}})()
    for line in (b"\xff\xfe", b'"ready"', b"7" * 40, b'{"started": {"trial_id": 1}}',
                 b'{"ended": {"bogus": 1}}', b"[1, 2]"):
        assert agents._event(agent, line) is None
    assert not agent.ready
    assert capsys.readouterr().err.count("said something else") == 6


def test_an_agent_that_dies_ends_its_trials_lost_or_as_their_shells_said(tmp_path, fake_srun):
    agents = NodeAgents(remote_exit_code)
    agents.start(["n2"], 4, dict(os.environ), ["0", "2", "", "1"], tmp_path / "a.log")
    _wait_for(agents, lambda _: agents.ready("n2"))
    assert agents.submit("n2", _launch(tmp_path, 1, "sleep 60"))
    _wait_for(agents, lambda e: any(isinstance(x, Started) for x in e))
    done = _launch(tmp_path, 2, "exit 0")  # ended there, its end not yet told
    done.trial_dir.mkdir(parents=True)
    (done.trial_dir / "exit_code").write_text("0 1\n")
    agents.agents["n2"].trials[2] = done
    agents.where[2] = "n2"
    os.kill(agents.agents["n2"].proc.pid, signal.SIGKILL)  # as its node's failure would
    events = _wait_for(agents, lambda e: sum(isinstance(x, Ended) for x in e) == 2)
    ends = {e.trial_id: e for e in events if isinstance(e, Ended)}
    assert ends[1].reason == "lost" and "agent on n2 ended" in ends[1].detail
    assert (ends[2].reason, ends[2].exit_code) == ("exited", 0)
    assert not agents.ready("n2") and not agents.submit("n2", _launch(tmp_path, 3, "true"))
    agents.close()


def test_trials_sent_while_the_agent_starts_wait_in_its_stdin_then_run(tmp_path, fake_srun):
    """At a pilot's start its other nodes' trials go to their agents at once, not as srun
    steps of their own: they wait in the agent's stdin until its Python is up."""
    agents = NodeAgents(remote_exit_code)
    agents.start(["n2"], 4, {**os.environ, "FAKE_SRUN_DELAY": "1"}, ["0", "2", "", "1"],
                 tmp_path / "a.log")
    assert agents.takes("n2") and not agents.ready("n2")
    assert agents.submit("n2", _launch(tmp_path, 1, "exit 4"))
    assert agents.running() == [1]
    events = _wait_for(agents, lambda e: any(isinstance(x, Ended) for x in e))
    assert [(e.trial_id, e.exit_code) for e in events if isinstance(e, Ended)] == [(1, 4)]
    assert agents.ready("n2")
    agents.close()


def test_an_agent_not_yet_ready_takes_no_more_than_its_stdin_holds(tmp_path, fake_srun):
    """The pilot writes to the agent's stdin without blocking: before the agent is ready it
    sends at most SEND_BEFORE_READY bytes (a 64 KiB pipe holds them); the next trial for
    that node starts as a step of its own (the pilot's fallback)."""
    agents = NodeAgents(remote_exit_code)
    agents.start(["n2"], 4, {**os.environ, "FAKE_SRUN_DELAY": "30"}, ["0", "2", "", "1"],
                 tmp_path / "a.log")
    big = {"HPSEARCH_BIG": "x" * 5000}
    sent = 0
    began = time.monotonic()
    while agents.takes("n2"):
        assert agents.submit("n2", _launch(tmp_path, sent, "true", big))
        sent += 1
    assert time.monotonic() - began < 5  # it never waited on the pipe
    assert agents_module.SEND_BEFORE_READY <= agents.agents["n2"].waiting < 64 << 10
    assert sent == len(agents.running()) > 1
    agents.agents["n2"].proc.kill()
    agents.close()


def test_an_agent_that_never_says_ready_is_given_up_and_its_waiting_trials_end_lost(
        tmp_path, fake_srun, monkeypatch):
    """Given up after READY_WAIT (its step killed): the trials that waited for it end lost,
    so the driver runs them again; none ran there."""
    monkeypatch.setattr(agents_module, "READY_WAIT", 0.5)
    agents = NodeAgents(remote_exit_code)
    agents.start(["n2"], 4, {**os.environ, "FAKE_SRUN_DELAY": "30"}, ["0", "2", "", "1"],
                 tmp_path / "a.log")
    assert agents.submit("n2", _launch(tmp_path, 1, "touch ran"))
    events = _wait_for(agents, lambda e: any(isinstance(x, Ended) for x in e))
    (ended,) = [e for e in events if isinstance(e, Ended)]
    assert ended.reason == "lost" and "did not start in 0.5 s" in ended.detail
    assert not agents.takes("n2") and not (tmp_path / "ran").exists()
    agents.close(wait=5)

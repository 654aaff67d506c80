"""The pilot: a Python process in a Slurm allocation that runs trials back to back.

It runs on the allocation's first node (submitit starts it there, without srun) and never
opens the store. Its life, as PanDA's pilot: take assignments from its inbox while it has
free slots and time for them (late binding: the driver picked the trial when a slot was free),
run each, tell the driver through files (hpsearch.pilot.protocol), heartbeat. It leaves

- when the driver asks (`stop`), once its trials are done;
- when it has been idle for `idle_timeout`;
- near its time limit: it first sends its trials the checkpoint signal (or SIGTERM), so they
  save and exit, and the driver runs them again in another pilot from their checkpoints;
- when the driver has been silent for `grace`: meanwhile it takes no new work and lets its
  running trials finish, keeping their ends in ended/ for the next driver.

A trial runs as the per-job path runs it (the same command, built by the driver with the
launch package, and the same shell body as the local executor's); the pilot adds where:
its first node runs the command (through that node's agent when that is not the pilot's own
node, hpsearch.pilot.agents; through an `srun --overlap` step of its own until the agent is
up, or with `pilots.agents: false`), and SLURM_JOB_NODELIST and friends name only the
trial's nodes, so the launchers (srun --nodelist, torchrun, mpirun) start its ranks there.
A trial on another node is stopped, and sent its checkpoint signal, as one on the pilot's
node is (the signal, then its grace, then SIGKILL): by its agent, or through Slurm to its
srun step's tasks (StepSignals).
"""

from __future__ import annotations

import dataclasses
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hpsearch.executors.base import Ended, Started
from hpsearch.executors.local import LocalExecutor
from hpsearch.launch.attempt import Launch, read_exit_code, shell_body
from hpsearch.launch.base import CPU_NARROW, GPU_NARROW, shell_join
from hpsearch.pilot import oom, protocol, tree_watch, warm_servers
from hpsearch.pilot.agents import NodeAgents
from hpsearch.pilot.slots import Grant, Reservation, Slots
from hpsearch.slurm.commands import Slurm
from hpsearch.slurm.environment import for_pilot_trial, job_end, without_shape
from hpsearch.slurm.failures import SlurmError
from hpsearch.slurm.hostlist import compress, expand
from hpsearch.store.trusted import present

TICK = 0.02  # seconds between looks at the inbox: part of the idle gap between trials on a slot
MARGIN = 5.0  # seconds kept free before the pilot's end
HOLD_FAILED_END = 3.0  # seconds a failed trial's end waits: is Slurm ending the whole job?
# A node where a trial's srun step ended with no exit code from the trial's shell may be
# dying (its slurmd killed: the step ends about SlurmdTimeout later, before Slurm marks the
# node DOWN and ends the pilot NODE_FAIL): no new trial goes there for Slurm's default
# SlurmdTimeout, so that the retry does not spend its attempts on the same node.
SET_ASIDE_AFTER_LOST = 300.0


@dataclass(frozen=True)
class Allocation:
    """What Slurm gave the pilot."""

    job_id: str
    nodes: tuple[str, ...]
    batch_host: str
    gpu_ids: tuple[str, ...] = ()
    end_time: float | None = None  # Unix time of the job's time limit, if Slurm told it

    @classmethod
    def from_env(cls, env=os.environ) -> Allocation:
        nodes = tuple(expand(env.get("SLURM_JOB_NODELIST", ""))) or (socket.gethostname(),)
        gpus = env.get("CUDA_VISIBLE_DEVICES") or env.get("SLURM_JOB_GPUS") or ""
        return cls(env.get("SLURM_JOB_ID", ""), nodes, env.get("SLURMD_NODENAME", nodes[0]),
                   tuple(g for g in gpus.split(",") if g.strip()), job_end(env))


class StepSignals(LocalExecutor):
    """The pilot's runner: a LocalExecutor whose trials on other nodes run as srun steps
    (`steps`: trial id -> its step's name). srun answers SIGTERM by SIGKILLing its step
    ("forcing job termination"): the trial would get no grace to finish its step or save a
    checkpoint. So their signals go to the step's tasks through Slurm instead (scancel
    --signal to the step, Slurm.signal_step), which leaves srun to end when the trial does;
    SIGKILL, at the grace's end, goes to both. Where the step cannot be found (not started
    yet, already gone, or Slurm does not answer), srun is signalled as before."""

    def __init__(self, job_id: str, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.job_id = job_id
        self.steps: dict[int, str] = {}
        self.step_ids: dict[str, str] = {}  # step name -> "JOB.STEP", once found
        self.slurm: Slurm | None = None
        self.agent_fds: set[int] = set()

    def wake_on_agents(self, fds: set[int]) -> None:
        """poll() also returns once one of `fds` (the node agents' outputs, hpsearch.pilot.
        agents) is readable: their trials' starts and ends are told at once, not a TICK
        later. An agent's output at its end is readable for good: it is left out then."""
        for fd in self.agent_fds - fds:
            self.poller.unregister(fd)
        for fd in fds - self.agent_fds:
            self.poller.register(fd, select.POLLIN)
        self.agent_fds = set(fds)

    def signal_run(self, trial_id: int, pgid: int, sig: int) -> None:
        name = self.steps.get(trial_id)
        if name is not None and sig != 0:
            try:
                step = self.step_ids.get(name) or self._find_step(name)
                sent = step is not None and self._slurm().signal_step(
                    step, signal.Signals(sig).name.removeprefix("SIG"))
            except SlurmError as exc:
                print(f"hpsearch pilot: could not signal trial {trial_id}'s step: {exc}",
                      file=sys.stderr, flush=True)
                sent = False
            if sent and sig != signal.SIGKILL:
                return
        super().signal_run(trial_id, pgid, sig)

    def forget(self, trial_id: int) -> None:
        self.step_ids.pop(self.steps.pop(trial_id, ""), None)

    def _find_step(self, name: str) -> str | None:
        step = self._slurm().step_ids(self.job_id).get(name)
        if step is not None:
            self.step_ids[name] = step
        return step

    def _slurm(self) -> Slurm:
        if self.slurm is None:
            self.slurm = Slurm()
        return self.slurm


class Pilot:
    def __init__(self, paths: protocol.PilotPaths, config: dict, alloc: Allocation) -> None:
        self.paths, self.cfg, self.alloc = paths, config, alloc
        self.began = time.monotonic()
        # The job's clock, not this process's: Python starts seconds (a slow file system:
        # minutes) after the job did, and the time limit counts from the job's start.
        left = float(config["time_limit"]) if alloc.end_time is None \
            else alloc.end_time - time.time()
        self.end = self.began + left - MARGIN
        self.signal_name = config.get("signal")
        leaves = protocol.read_json(paths.root.parent / protocol.TOPOLOGY) or {}
        self.slots = Slots(list(alloc.nodes), int(config["slots_per_node"]),
                           int(config["trial_gpus"]), list(alloc.gpu_ids),
                           {node: leaf for leaf, nodes in leaves.items() for node in nodes})
        self.runner = StepSignals(alloc.job_id, self.slots.total, None, 1,
                                  config.get("trial_time"), float(config["kill_grace"]),
                                  self.signal_name, float(config["signal_before"]))
        self.runner.base_env = without_shape(self.runner.base_env)  # each trial gets its own
        self.grants: dict[int, tuple[str, Grant]] = {}  # trial id -> (assignment name, grant)
        self.beat = protocol.Beat(paths.heartbeat, float(config["heartbeat"]))
        self.driver = protocol.Watch(paths.root.parent / protocol.DRIVER_HEARTBEAT)
        self.draining: str | None = None  # why it takes no more work
        self.wound_down = False
        self.absent = False  # the driver's heartbeat stopped: take no new work
        self.killed = False  # trials still running at the end were stopped
        self.idle_since = time.monotonic()
        self.stopped_for_end: set[int] = set()
        self.refused: set[str] = set()  # files it will not obey (not the driver's)
        self.held_ends: list[tuple[float, str, str, Ended]] = []  # failed ends, told soon
        self.remote: set[int] = set()  # trials whose command runs on another node (srun)
        self.launch_dirs: dict[int, str] = {}  # their trial dirs
        # trial id -> (its memory share in MiB, OOM kills in the cgroup when it started)
        self.memory: dict[int, tuple[float | None, int | None]] = {}
        # remote trials whose ends were found with no exit code: trial dir, srun's end
        self.unread: dict[int, tuple[Path, Ended]] = {}
        self.asked: str | None = None  # a signal asked it to leave
        # seconds the last trial it claimed needed: it drains once less is left (the
        # scouts size trials below the ceiling its trial_time says; None: trial_time)
        self.last_needed: float | None = None
        self.warm: subprocess.Popen | None = None  # its warm servers' step (warm_servers)
        # its agents on its other nodes, and the trials they run
        self.agents = NodeAgents(lambda d, a: remote_exit_code(d, a, self._refused))
        self.on_agent: set[int] = set()
        self.addrs: dict[str, str] = {}  # its nodes' NodeAddr (_node_addrs)

    # -- the loop ---------------------------------------------------------------------------
    def run(self) -> str:
        """Run until it leaves; returns why."""
        self.paths.make()
        self.warm = None if self.cfg.get("warm") is None else warm_servers.start(
            self.alloc.nodes, self._node_cpus(), self.cfg["warm"], self.end - time.monotonic(),
            self.runner.base_env, self.alloc.job_id, self.paths.root / "warm-servers.log")
        others = [node for node in self.alloc.nodes if node != self.alloc.batch_host]
        if self.cfg.get("agents", True) and others and self.alloc.job_id:
            self.agents.start(others, self._node_cpus(), self.runner.base_env, [
                str(self.cfg.get("trial_time") or 0), str(self.cfg["kill_grace"]),
                self.signal_name or "", str(self.cfg["signal_before"])],
                self.paths.root / "agents.log")
        # scancel or preemption (Slurm sends SIGTERM to every process of the job); USR2 in case
        # a site's submit filter adds --signal (the pilot asks for none)
        for sig in (signal.SIGUSR2, signal.SIGTERM):
            signal.signal(sig, lambda s, f: setattr(self, "asked", signal.Signals(s).name))
        self._heartbeat("running")
        # in the background: the first trials start meanwhile, and ask for it themselves
        threading.Thread(target=self._node_addrs, name="node-addrs", daemon=True).start()
        reason = None
        while reason is None:
            reason = self._step()
        self._heartbeat("exited", reason)
        protocol.write_json(self.paths.exit, {"reason": reason, "time": time.time(),
                                              "job_id": self.alloc.job_id})
        self.runner.close()
        self.agents.close()
        warm_servers.stop(self.warm)
        return reason

    def _step(self) -> str | None:
        now = time.monotonic()
        self._watch_driver()
        if present(self.paths.stop, on_refused=self._refused):  # another user's: no stop
            self._drain("the driver asked it to stop")
        if self.asked:
            self._wind_down(f"Slurm sent {self.asked}")
        if now >= self._wind_down_at():
            self._wind_down("its time limit is near")
        trial_time = self.last_needed or self.cfg.get("trial_time")
        if trial_time and self.end - now < float(trial_time):
            self._drain("too little time left for another trial")  # a new pilot can come
        if now >= self.end - float(self.cfg["kill_grace"]) and not self.killed:
            self.killed = True  # SIGTERM, then SIGKILL at the end
            for tid in list(self.runner.running_) + self.agents.running():
                self.stopped_for_end.add(tid)
                self._cancel(tid)
        if not self.draining:
            self._claim()
        self._cancel_asked()
        self.runner.wake_on_agents(self.agents.live_fds())
        for event in self.runner.poll(TICK) + self.agents.poll():
            self._report(event)
        self._tell_held_ends()
        if self.beat.due():
            self._heartbeat("draining" if self.draining else "running")
        if self.grants or self.held_ends:
            self.idle_since = time.monotonic()
            return None
        if self.draining:
            return self.draining
        if time.monotonic() - self.idle_since > float(self.cfg["idle_timeout"]):
            return f"idle for {float(self.cfg['idle_timeout']):g} s"
        return None

    def _wind_down_at(self) -> float:
        before = float(self.cfg["signal_before"]) if self.signal_name else 0.0
        return self.end - before - float(self.cfg["kill_grace"])

    # -- the driver -------------------------------------------------------------------------
    def _watch_driver(self) -> None:
        self.driver.read()
        silent = self.driver.silent_for()
        # Three missed beats: the driver may only be busy (absence only pauses claiming)
        absent_after = 3 * float(self.cfg["heartbeat"]) + 1.0
        if silent > float(self.cfg["grace"]):
            self._drain(f"no driver for {float(self.cfg['grace']):g} s")
        elif silent > absent_after:
            self.absent = True
        else:
            self.absent = False

    def _drain(self, why: str) -> None:
        self.draining = self.draining or why

    # -- assignments ------------------------------------------------------------------------
    def _claim(self) -> None:
        """Start the assignments that fit, in the driver's order. The first that does not
        fit now is promised the slots that free first (hpsearch.pilot.slots); a later one
        may use those only if it ends before the promise starts (Slurm's backfill)."""
        if self.absent:
            return  # the driver is away: take no new work until it is back
        if self.slots.free_for(1) == 0:
            return  # no slot free: assignments the driver sent ahead wait unread (prefetch)
        promise: Reservation | None = None
        for name in protocol.names(self.paths.dir("inbox")):
            data = protocol.read_json(self.paths.file("inbox", name), self._refused)
            if data is None:  # not a whole assignment (the driver writes atomically), or
                continue      # not one the driver wrote: another user's is never run
            needed = self._seconds_needed(data)
            if needed > self.end - time.monotonic():
                continue  # it does not fit the time left; the driver sees it unclaimed
            nodes = int(data.get("nodes") or self.cfg["trial_nodes"])
            width = int(data.get("width") or 1)
            grant = self.slots.take(nodes, needed or None, avoid=promise, width=width,
                                    gpus=data.get("gpus_per_node"))  # exactly its own
            if grant is None:
                promise = promise or self.slots.reservation(nodes, width)
                continue
            if not protocol.move(self.paths, name, "inbox", "claimed"):
                self.slots.give_back(grant)  # the driver withdrew it first
                continue
            self.last_needed = needed or None
            self._start(name, protocol.launch_from_dict(data), grant, data)
            if self.slots.free_for(1) == 0:
                return  # the rest wait for a slot, unread

    def _refused(self, message: str) -> None:
        if message not in self.refused:  # once per file, not at every look at it
            self.refused.add(message)
            print(f"hpsearch pilot: {message}", file=sys.stderr, flush=True)

    def _seconds_needed(self, data: dict) -> float:
        """Its time limit (its own where trials have several, else the pilot's trial_time)
        times the retry rules' factor; 0: none."""
        base = data.get("time") or self.cfg.get("trial_time")
        return float(base) * float(data.get("time_factor") or 1.0) if base else 0.0

    def _start(self, name: str, launch: Launch, grant: Grant, data: dict) -> None:
        nodes = compress(list(grant.nodes))
        n = len(grant.nodes)
        tasks = int(data.get("tasks_per_node") or self.cfg["trial_tasks_per_node"])
        cpus_per_task = int(data.get("cpus_per_task") or self.cfg.get("trial_cpus_per_task")
                            or int(self.cfg["trial_cpus"]) // max(1, tasks))
        slot_cpus, node_cpus = int(self.cfg["trial_cpus"]), self._node_cpus()
        if data.get("time"):  # its own time limit: the runner's timeout for it
            launch = dataclasses.replace(launch, time_factor=launch.time_factor * float(
                data["time"]) / float(self.cfg.get("trial_time") or data["time"]))
        env = {**launch.env,
               **(warm_servers.scope(self.alloc.job_id) if self.warm is not None else {}),
               # the trial's own size, not the pilot job's (hpsearch.slurm.environment)
               **for_pilot_trial(nodes, n, tasks, cpus_per_task, grant.gpus,
                                 [self.alloc.gpu_ids.index(g) for g in grant.gpus],
                                 data.get("mem_mb") or self.cfg.get("trial_mem_mb"),
                                 node_cpus,
                                 list(range(grant.slot * slot_cpus,
                                            (grant.slot + grant.width) * slot_cpus)),
                                 self.runner.base_env),
               # the trial's own srun steps share the pilot's nodes with other trials' steps:
               # the pilot's slots, not Slurm's step accounting, keep them apart
               "SLURM_OVERLAP": "1",
               "HPSEARCH_PILOT": self.paths.root.name, "HPSEARCH_PILOT_JOB": self.alloc.job_id,
               # its first node and that node's address (hpsearch.launch.base.preamble)
               **({"HPSEARCH_FIRST_NODE": grant.nodes[0], "HPSEARCH_FIRST_NODE_ADDR": addr}
                  if (addr := self.addrs.get(grant.nodes[0])) else {})}
        # its shell, and all it starts, on its slot's cores: the pilot or the node's agent
        # spawns it there (hpsearch.launch.affinity); a step of its own narrows itself
        command = launch.command
        # An earlier attempt's exit_code is left alone: it names its attempt, so it is never
        # read as this one's (read_exit_code). Unlinking it here made this host cache "no
        # such file" for the name (NFS's negative lookups), and a remote trial's code,
        # written there by another node, then read as missing: the trial counted lost.
        self.grants[launch.trial_id] = (name, grant)
        mem = data.get("mem_mb") or self.cfg.get("trial_mem_mb")  # per node; a slot's: x width
        share = float(mem) * (grant.width if not data.get("mem_mb") else 1) if mem else None
        self.memory[launch.trial_id] = (share, oom.oom_kills())
        first = grant.nodes[0]
        if first != self.alloc.batch_host:  # run its command on its first node
            if self.agents.takes(first) and self.agents.submit(first, dataclasses.replace(
                    launch, command=GPU_NARROW + "\n" + command, env=env, narrow_cpus=True)):
                self.on_agent.add(launch.trial_id)
                return
            self.runner.submit(dataclasses.replace(launch, env=env, command=self._own_step(
                launch, first, CPU_NARROW + "\n" + command, node_cpus)))
            return
        self.runner.submit(dataclasses.replace(launch, command=command, env=env,
                                               narrow_cpus=True))

    def _own_step(self, launch: Launch, node: str, command: str, node_cpus: int) -> str:
        """The command that runs a trial on another node in an srun step of its own."""
        # exec: only the shell on that node writes the exit code; srun's own would hide
        # a node that failed under it (srun exited 0 when its node's slurmd died)
        step = f"hpsearch-trial-{launch.trial_id}.{launch.attempt}"  # StepSignals finds it
        shell = ["/bin/sh", "-c", GPU_NARROW + "\n" + shell_body(self.signal_name, command)]
        if self.cfg.get("measure_memory"):  # its memory, which srun's process is not
            shell = tree_watch.argv(sys.executable, launch.trial_dir, launch.attempt, shell)
        self.remote.add(launch.trial_id)
        self.runner.steps[launch.trial_id] = step
        self.launch_dirs[launch.trial_id] = str(launch.trial_dir)
        return "exec " + shell_join([
            "srun", "--overlap", "--nodes=1", "--ntasks=1", f"--nodelist={node}",
            f"--job-name={step}",
            # an overlapping step is bound to the job's lowest cores on the node, whatever
            # other steps hold: it takes all of the pilot's there, and narrows itself
            f"--cpus-per-task={node_cpus}", "--cpu-bind=none", "--kill-on-bad-exit=1", *shell])

    def _node_addrs(self) -> None:
        """Its nodes' addresses, asked once (self.addrs is set whole, once); none where
        Slurm does not answer (each trial then asks for its own)."""
        if not self.alloc.job_id:
            return
        try:
            self.addrs = Slurm().node_addrs(self.alloc.nodes)
        except SlurmError as exc:
            print(f"hpsearch pilot: its trials ask for their first node's address: {exc}",
                  file=sys.stderr, flush=True)

    def _node_cpus(self) -> int:
        """The pilot's CPUs on each node: its slots' (pilot.fleet asks Slurm for these)."""
        return int(self.cfg["trial_cpus"]) * int(self.cfg["slots_per_node"])

    def _cancel_asked(self) -> None:
        for name in protocol.names(self.paths.dir("cancel")):
            parsed = protocol.parse_name(name)
            if parsed is None:
                continue  # never: names() lists only names that parse
            tid, _ = parsed
            if tid in self.grants and self.grants[tid][0] == name \
                    and present(self.paths.file("cancel", name), on_refused=self._refused):
                self._cancel(tid)

    def _cancel(self, tid: int) -> None:
        if tid in self.on_agent:
            self.agents.cancel(tid)
        else:
            self.runner.cancel(tid)

    def _report(self, event: Started | Ended) -> None:
        name, grant = self.grants[event.trial_id]
        nodes = compress(list(grant.nodes))
        if isinstance(event, Started):
            protocol.write_json(self.paths.file("started", name), {
                "nodes": nodes, "gpus": ",".join(grant.gpus), "slot": grant.slot,
                "pid": event.pid,
                "pid_start": event.pid_start,  # the pid's host, and how it started there
                "host": event.host if event.trial_id in self.on_agent else self.alloc.batch_host,
                "via": "agent" if event.trial_id in self.on_agent
                else "step" if event.trial_id in self.remote else "pilot",
                "time": time.time()})
            return
        del self.grants[event.trial_id]
        self.slots.give_back(grant)
        share, kills = self.memory.pop(event.trial_id, (None, None))
        if event.trial_id in self.remote:  # its peak memory is srun's here, not the trial's:
            trial_dir = self.launch_dirs.get(event.trial_id)  # the trial's, from its watch
            event = dataclasses.replace(self._remote_end(event, grant), peak_rss_mb=(
                tree_watch.read_peak_mb(Path(trial_dir), event.attempt, self._refused)
                if trial_dir and self.cfg.get("measure_memory") else None))
            if event.reason == "lost":
                self.slots.set_aside(grant.nodes[0], SET_ASIDE_AFTER_LOST)
        elif event.trial_id in self.on_agent:  # its memory and exit code are its agent's
            self.on_agent.discard(event.trial_id)
            if event.reason == "lost":
                self.slots.set_aside(grant.nodes[0], SET_ASIDE_AFTER_LOST)
        elif event.reason == "exited" and (why := oom.verdict(
                event.exit_code, event.peak_rss_mb, share, kills, oom.oom_kills())):
            event = dataclasses.replace(event, reason="out_of_memory", detail=why)
        clean = (event.reason == "exited" and event.exit_code in (0, 75)) \
            or event.reason in ("cancelled", "timeout")
        if clean or event.trial_id in self.stopped_for_end:
            self._tell_end(name, nodes, event)
        else:  # was it the trial, or is Slurm taking the whole job away (scancel, a node
            # failure, preemption)? The trial's processes may die a moment before the pilot
            # hears of it: tell this end only once that moment has passed.
            self.held_ends.append((time.monotonic() + HOLD_FAILED_END, name, nodes, event))

    def _remote_end(self, event: Ended, grant: Grant) -> Ended:
        """The end of a trial run through srun on another node, as that node's shell wrote
        it in the trial dir; without it, the trial did not end by itself there."""
        self.remote.discard(event.trial_id)
        self.runner.forget(event.trial_id)
        trial_dir = self.launch_dirs.pop(event.trial_id, None)
        if event.reason != "exited":
            return event
        code = remote_exit_code(Path(trial_dir), event.attempt, self._refused) \
            if trial_dir else None
        if code is None:
            if trial_dir:  # looked for again when this end is told (_look_again)
                self.unread[event.trial_id] = (Path(trial_dir), event)
            return dataclasses.replace(event, exit_code=None, reason="lost", detail=(
                f"its srun step on {grant.nodes[0]} ended (srun exit {event.exit_code}) and "
                "the trial's shell there wrote no exit code"))
        return dataclasses.replace(event, exit_code=code)

    def _look_again(self, event: Ended) -> Ended:
        """A remote trial's end that is about to be told lost for want of its exit code:
        one more look, HOLD_FAILED_END after the first (a file system slower to show the
        other node's write than srun was to end)."""
        trial_dir, exited = self.unread.pop(event.trial_id, (None, event))
        code = remote_exit_code(trial_dir, event.attempt, self._refused) \
            if trial_dir is not None else None
        return event if code is None else dataclasses.replace(exited, exit_code=code)

    def _tell_held_ends(self, all_now: bool = False) -> None:
        now = time.monotonic()
        for item in list(self.held_ends):
            if all_now or self.asked or now >= item[0]:
                self.held_ends.remove(item)
                self._tell_end(*item[1:])

    def _tell_end(self, name: str, nodes: str, event: Ended) -> None:
        event = self._look_again(event)
        reason, detail = event.reason, event.detail
        clean = reason == "exited" and event.exit_code in (0, 75)
        sent = (f"pilot {self.paths.root.name} (job {self.alloc.job_id}) was sent {self.asked} "
                "by Slurm (scancel, node failure or preemption)")
        ended = f"pilot {self.paths.root.name} (job {self.alloc.job_id}) stopped it before " \
            "its own end"
        stopped = None  # an exit 0 then: the driver counts it preempted without the objective
        if self.asked and not clean and reason != "cancelled":
            reason, detail = "preempted", sent
        elif event.trial_id in self.stopped_for_end and not clean:
            reason, detail = "preempted", ended
        elif reason == "exited" and event.exit_code == 0 and (
                self.asked or event.trial_id in self.stopped_for_end):
            stopped, detail = "preempted", sent if self.asked else ended
        self.stopped_for_end.discard(event.trial_id)
        protocol.write_json(self.paths.file("ended", name), {
            "exit_code": event.exit_code, "reason": reason, "detail": detail,
            "stopped": stopped, "nodes": nodes, "time": time.time(),
            "peak_rss_mb": event.peak_rss_mb})

    # -- the end ----------------------------------------------------------------------------
    def _wind_down(self, why: str) -> None:
        """Take no more work, and ask every running trial to save and exit: the checkpoint
        signal if the spec has one (the trial exits 75 and runs again elsewhere), else
        SIGTERM."""
        self._drain(why)
        if self.wound_down:
            return
        self.wound_down = True
        for tid, run in list(self.runner.running_.items()):
            self.stopped_for_end.add(tid)
            if self.signal_name:
                self.runner.signal_run(tid, run.pid, getattr(signal, f"SIG{self.signal_name}"))
            else:
                self.runner.cancel(tid)
        for tid in self.agents.running():
            self.stopped_for_end.add(tid)
            if self.signal_name:
                self.agents.signal(tid, getattr(signal, f"SIG{self.signal_name}"))
            else:
                self.agents.cancel(tid)

    def _heartbeat(self, state: str, reason: str | None = None) -> None:
        self.beat.write(state=state, reason=reason or self.draining,
                        job_id=self.alloc.job_id, nodes=compress(list(self.alloc.nodes)),
                        batch_host=self.alloc.batch_host, slots=self.slots.total,
                        free=0 if self.draining else self.slots.free_for(
                            int(self.cfg["trial_nodes"])),
                        remaining=max(0.0, self.end - time.monotonic()),
                        running=sorted(name for name, _ in self.grants.values()))


def remote_exit_code(trial_dir: Path, attempt: int,
                     on_refused: Callable[[str], None] | None = None) -> int | None:
    """The exit code that attempt `attempt`'s shell wrote on another node (read_exit_code),
    as the file server has it, not as this host remembers the folder: the folder is opened
    first, which on NFS makes this host check it with the server (close-to-open), so a
    "no such file" it cached for the name before the other node wrote it (a negative
    lookup) is looked up again."""
    try:
        os.close(os.open(trial_dir, os.O_RDONLY | os.O_DIRECTORY))
    except OSError:
        pass  # gone, or not a folder: read_exit_code finds nothing either
    return read_exit_code(trial_dir, attempt, on_refused)


def main(pilot_dir: str) -> str:
    """The pilot job's entry point (submitit calls it in the allocation)."""
    paths = protocol.PilotPaths(Path(pilot_dir))
    config = protocol.read_json(paths.config)
    if config is None:
        raise SystemExit(f"pilot: no readable {paths.config}")
    return Pilot(paths, config, Allocation.from_env()).run()

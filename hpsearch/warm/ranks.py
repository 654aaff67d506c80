"""`python -m hpsearch.warm ranks`: what torchrun does for a trial's node, without torchrun,
so that warm trials (`executor.warm` with `launcher: torchrun`) start every rank warm.

torchrun's agent is itself a Python process that imports torch (seconds of CPU per segment)
before it starts the workers; with a static rendezvous it only computes each worker's
environment, starts the workers, forwards signals and stops the others when one fails. This
module does that with the standard library alone (it starts in ~50 ms), and each worker's
`{python}` is the warm client, so the ranks fork from a warm server with torch imported.

Each worker gets the variables torchrun 2.x sets for a static rendezvous: RANK, LOCAL_RANK,
WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, ROLE_RANK, ROLE_WORLD_SIZE,
ROLE_NAME, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS,
TORCHELASTIC_RUN_ID, TORCHELASTIC_USE_AGENT_STORE (False: rank 0 hosts the TCPStore, there is
no agent's), TORCH_NCCL_ASYNC_ERROR_HANDLING, and OMP_NUM_THREADS=1 when unset and several
workers share the node. As torchrun, it starts each worker in a session of its own and passes
on SIGTERM, SIGINT, SIGHUP and SIGQUIT (and what PET_SIGNALS_TO_HANDLE adds, e.g. the
checkpoint signal); when a worker fails, the others get SIGTERM, then SIGKILL after `grace`
seconds, and it exits with the failed worker's status. If it is killed itself, its workers get
SIGKILL (PR_SET_PDEATHSIG), and a warm server kills a child whose client died.

Not torchrun's: elastic membership and restarts (`--max-restarts`); a spec that passes torchrun
arguments runs the real torchrun (hpsearch.launch.torchrun).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time

TORCHRUN_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")
_PR_SET_PDEATHSIG = 1


def rank_env(base: dict[str, str], *, local: int, nproc: int, nnodes: int, node_rank: int,
             addr: str, port: int) -> dict[str, str]:
    """One worker's environment, as torchrun's static rendezvous sets it."""
    world, rank = nproc * nnodes, node_rank * nproc + local
    env = dict(base)
    env.update({
        "RANK": str(rank), "LOCAL_RANK": str(local), "WORLD_SIZE": str(world),
        "LOCAL_WORLD_SIZE": str(nproc), "GROUP_RANK": str(node_rank),
        "GROUP_WORLD_SIZE": str(nnodes), "ROLE_RANK": str(rank), "ROLE_WORLD_SIZE": str(world),
        "ROLE_NAME": "default", "MASTER_ADDR": addr, "MASTER_PORT": str(port),
        "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_RUN_ID": "none", "TORCHELASTIC_USE_AGENT_STORE": "False",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": env.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
    })
    if nproc > 1:
        env.setdefault("OMP_NUM_THREADS", "1")
    return env


def forwarded_signals(env: dict[str, str]) -> list[signal.Signals]:
    """TORCHRUN_SIGNALS, or PET_SIGNALS_TO_HANDLE (torchrun's own setting) where set."""
    names = env.get("PET_SIGNALS_TO_HANDLE") or ",".join(TORCHRUN_SIGNALS)
    out = []
    for name in names.split(","):
        name = name.strip().upper()
        try:
            out.append(signal.Signals["SIG" + name.removeprefix("SIG")])
        except KeyError:
            print(f"hpsearch.warm ranks: PET_SIGNALS_TO_HANDLE names no signal {name!r}",
                  file=sys.stderr)
    return out


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def _signal_all(procs: list[subprocess.Popen], sig: int) -> None:
    for proc in procs:
        if proc.returncode is None:
            try:
                os.killpg(proc.pid, sig)
            except OSError:
                pass


def run(argv: list[str], *, nproc: int, nnodes: int, node_rank: int, addr: str, port: int,
        grace: float = 10.0) -> int:
    """Start `nproc` workers running `argv`, wait for them; the exit status torchrun gives."""
    base = dict(os.environ)
    procs: list[subprocess.Popen] = []
    for sig in forwarded_signals(base):
        signal.signal(sig, lambda s, _f: _signal_all(procs, s))
    for local in range(nproc):
        procs.append(subprocess.Popen(
            argv, env=rank_env(base, local=local, nproc=nproc, nnodes=nnodes,
                               node_rank=node_rank, addr=addr, port=port),
            start_new_session=True, preexec_fn=_die_with_parent))
    by_pid = {p.pid: p for p in procs}
    failed: subprocess.Popen | None = None
    stop_at: float | None = None
    while any(p.returncode is None for p in procs):
        pid, status = _wait(0 if stop_at is None else os.WNOHANG)
        if pid in by_pid:
            proc = by_pid[pid]
            proc.returncode = os.waitstatus_to_exitcode(status)
            if proc.returncode != 0 and failed is None:  # torchrun: stop the others
                failed, stop_at = proc, time.monotonic() + grace
                _signal_all(procs, signal.SIGTERM)
        elif stop_at is not None:
            if time.monotonic() >= stop_at:
                _signal_all(procs, signal.SIGKILL)
                stop_at = time.monotonic() + 3600
            time.sleep(0.05)
    if failed is None:
        return 0
    code = failed.returncode
    return 128 - code if code < 0 else code


def _wait(flags: int) -> tuple[int, int]:
    while True:
        try:
            return os.waitpid(-1, flags)
        except InterruptedError:  # a forwarded signal came: wait again
            continue
        except ChildProcessError:
            return 0, 0

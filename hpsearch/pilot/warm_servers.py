"""A pilot's warm servers (executor.warm): one per node, in a job step of their own that lives
as long as the pilot.

A warm server forks trials only within its own Slurm job step (hpsearch.warm). In a pilot, a
multi-node trial's ranks start in a new srun step for every segment, so a server of theirs
would be new, and every segment cold, each time. So the pilot starts one server per node
itself, in one `srun --overlap` step over all its nodes that holds all of the pilot's CPUs
on each (the servers' children narrow to their clients' CPUs) and, being an overlapping
step, all of its GPUs. Every trial in the pilot gets PILOT_SCOPE: its clients find that
node's server, and run cold rather than start one of their own while it is still importing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from hpsearch.procs import module_argv
from hpsearch.slurm.hostlist import compress
from hpsearch.warm import PILOT_SCOPE, open_private


def scope(job_id: str) -> dict[str, str]:
    """The variable every trial of this pilot gets, and its servers too."""
    return {PILOT_SCOPE: f"{job_id}.pilot"}


def start(nodes: Sequence[str], node_cpus: int, preload: Sequence[str], lifetime: float,
          env: Mapping[str, str], job_id: str, log: Path) -> subprocess.Popen | None:
    """The servers' step, started in the background (None outside a job: nothing to do)."""
    if not job_id:
        return None
    n = len(nodes)
    argv = ["srun", "--overlap", f"--nodes={n}", f"--ntasks={n}", "--ntasks-per-node=1",
            f"--nodelist={compress(list(nodes))}", f"--cpus-per-task={node_cpus}",
            "--cpu-bind=none", *module_argv(sys.executable, "hpsearch.warm", "serve"),
            "--preload", ",".join(preload), "--idle-timeout", f"{max(60.0, lifetime):.0f}"]
    try:  # the pilot's own folder; a link planted in its place is not followed
        out: int = open_private(str(log), os.O_WRONLY | os.O_APPEND)
    except OSError:
        out = subprocess.DEVNULL
    try:
        return subprocess.Popen(argv, env={**env, **scope(job_id)}, stdin=subprocess.DEVNULL,
                                stdout=out, stderr=out, start_new_session=True)
    except OSError:
        return None  # no srun: its trials run cold, and say so
    finally:
        if out != subprocess.DEVNULL:
            os.close(out)


def stop(proc: subprocess.Popen | None) -> None:
    """End the servers' step (srun passes SIGTERM on to them), as the pilot leaves."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()

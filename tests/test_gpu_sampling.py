"""The GPU sampler (hpsearch.gpu.sampler) where there is no GPU, and how a trial starts it.

What cannot run here: NVML on real GPUs (CI has no GPU and no NVIDIA driver). That the
sampler's utilisation and memory readings are right, and that a busy trial comes out near 1
and a sleeping one near 0, is checked by benchmarks/gpu/gpu_sampling.sh on the lent GPU
machine (docs/gpu.md). Here: without pynvml, or with pynvml but no GPU, or with no GPU
held, the sampler writes nothing, says nothing and exits at once, and a GPU trial runs as
it would without it; the shell lines that start it start one per node."""

from __future__ import annotations

import os
import string
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpsearch.launch import make_launcher, make_runtime
from hpsearch.launch.base import RankLayout, gpu_sampler_line
from tests.helpers import read_store


def _sampler(trial_dir: Path, extra_env: dict, pythonpath: str | None = None):
    watched = subprocess.Popen(["sleep", "30"])
    env = {**os.environ, "HPSEARCH_TRIAL_DIR": str(trial_dir), "HPSEARCH_ATTEMPT": "1",
           "HPSEARCH_GPU_INTERVAL": "0.05", "CUDA_VISIBLE_DEVICES": "0", **extra_env}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    began = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-m", "hpsearch.gpu.sampler", "0",
                               str(watched.pid)], env=env, capture_output=True, timeout=30)
    finally:
        watched.kill()
        watched.wait()
    return proc, time.monotonic() - began


@pytest.mark.parametrize("case", ["no_pynvml", "pynvml_without_gpu", "no_gpu_held"])
def test_sampler_without_nvml_or_gpus_writes_nothing_and_says_nothing(tmp_path, case):
    """no_pynvml: importing pynvml fails (a stand-in module that raises ImportError, as
    where the `gpu` extra is not installed); pynvml_without_gpu: this machine's real
    nvidia-ml-py, whose nvmlInit fails without an NVIDIA driver; no_gpu_held: a CPU trial
    (no CUDA_VISIBLE_DEVICES). It exits 0 at once, while the trial's shell still runs."""
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "pynvml.py").write_text("raise ImportError('no nvidia-ml-py here')\n")
    trial_dir = tmp_path / "trial"
    trial_dir.mkdir()
    env = {"CUDA_VISIBLE_DEVICES": ""} if case == "no_gpu_held" else {}
    proc, seconds = _sampler(trial_dir, env, str(shadow) if case == "no_pynvml" else None)
    if case == "pynvml_without_gpu":
        pytest.importorskip("pynvml")
    assert proc.returncode == 0 and proc.stdout == b"" and proc.stderr == b""
    assert seconds < 10 and list(trial_dir.iterdir()) == []


def test_sampler_ends_with_the_shell_it_watches(tmp_path):
    """A watched pid that is gone (or reused by another process) ends the sampler."""
    proc = subprocess.run([sys.executable, "-m", "hpsearch.gpu.sampler", "0", "999999999"],
                          env={**os.environ, "HPSEARCH_TRIAL_DIR": str(tmp_path),
                               "CUDA_VISIBLE_DEVICES": "0"}, capture_output=True, timeout=30)
    assert proc.returncode == 0 and list(tmp_path.iterdir()) == []


def test_other_nodes_start_their_sampler_from_local_rank_0(tmp_path):
    """srun on 2 nodes: the rank script starts the node's sampler in local rank 0 of every
    node but the first (whose sampler the launch text starts), with the node's rank and
    the rank shell's pid; a fake python records what it was started with."""
    fake = tmp_path / "python"
    log = tmp_path / "started"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    fake.chmod(0o755)
    layout = RankLayout(nodes=2, tasks_per_node=2, gpus_per_node=1, under_slurm=True,
                        gpu_sampler=str(fake))
    text = make_launcher("srun").wrap("true", layout, make_runtime(None))
    ranks = text.split("sh -c ")[1]
    rank_script = subprocess.run(["sh", "-c", f"printf %s {ranks}"], capture_output=True,
                                 text=True, check=True).stdout
    assert "hpsearch.gpu.sampler" in rank_script
    for procid, localid, nodeid in [(0, 0, 0), (1, 1, 0), (2, 0, 1), (3, 1, 1)]:
        env = {"PATH": os.environ["PATH"], "SLURM_PROCID": str(procid),
               "SLURM_LOCALID": str(localid), "SLURM_NODEID": str(nodeid)}
        subprocess.run(["sh", "-c", rank_script], env=env, check=True, timeout=10)
    for _ in range(100):
        if log.exists():
            break
        time.sleep(0.05)
    time.sleep(0.2)
    lines = log.read_text().splitlines()
    # started as `python -c SAFE_MODULE_RUN hpsearch.gpu.sampler NODE PID` (hpsearch.procs)
    assert len(lines) == 1 and " hpsearch.gpu.sampler 1 " in lines[0], lines
    assert lines[0].split()[-1].isdigit(), lines  # the rank shell's pid, to watch
    # torchrun passes a worker's arguments through string.Template (its ${local_rank}
    # macro), which turned the `$$` this used before into `$`: the text must survive it
    assert string.Template(rank_script).safe_substitute(local_rank=0) == rank_script
    line = gpu_sampler_line("/x y/python")
    assert line.split("; ( ", 1)[1].startswith("'/x y/python' -c ") and " -m " not in line
    assert " hpsearch.gpu.sampler 0 " in line


@pytest.mark.slow
def test_a_gpu_trial_runs_as_it_would_without_a_sampler(cli):
    """A local search of GPU trials on a machine without GPUs (fake device ids): each trial
    starts its sampler (pynvml finds no driver, or is not installed), a `wait` in its
    command does not wait for it, and every trial completes with no sample file, and no
    GPU column in `status`."""
    spec = cli.write_spec("""
        name: gpu-none
        command: 'sleep 0.2 & wait; echo "@hpsearch step=0 loss={x}"'
        search:
          strategy: random
          trials: 2
          parallel: 2
          space:
            x: {low: 0.0, high: 1.0}
        objective: {metric: loss}
        resources: {gpus_per_node: 1}
        env: {HPSEARCH_GPU_INTERVAL: "0.1"}
        executor: {type: local, gpus: [0, 1], timeout: 60}
        """)
    began = time.monotonic()
    cli("submit", spec, check=0)
    assert time.monotonic() - began < 60
    _, trials = read_store(cli.runs, "gpu-none")
    assert [t.state for t in trials] == ["completed", "completed"]
    for t in trials:
        assert not list(Path(t.trial_dir).glob("gpu.*.jsonl"))
    out = cli("status", "gpu-none", check=0).stdout
    assert "gpu" not in out.splitlines()[1] and "busy" not in out

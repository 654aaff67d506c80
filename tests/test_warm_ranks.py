"""hpsearch.warm.ranks, torchrun's place for warm trials (issue 26 item 6): its workers get
the variables the real torchrun gives for the same static rendezvous, it stops the other
workers when one fails and exits with that status, and it passes signals on as torchrun does.
The whole path (a promotion search of 2-rank warm segments, bit for bit) is in
tests/test_digits_promotion.py."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpsearch.launch.base import RankLayout
from hpsearch.launch.host import HostRuntime as NoRuntime
from hpsearch.launch.torchrun import TorchrunLauncher
from hpsearch.procs import SAFE_MODULE_RUN

DUMP = 'env > "$OUT.$LOCAL_RANK"'
TORCH_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
              "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR",
              "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
              "TORCHELASTIC_RUN_ID", "OMP_NUM_THREADS")


def _ranks(*args: str, env: dict | None = None, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "hpsearch.warm", "ranks", *args],
                            env={**os.environ, **(env or {})}, **kw)


def _envs(prefix: Path, n: int) -> list[dict[str, str]]:  # by local rank
    out = []
    for rank in range(n):
        lines = Path(f"{prefix}.{rank}").read_text().splitlines()
        out.append(dict(line.split("=", 1) for line in lines if "=" in line))
    return out


@pytest.mark.slow  # over 5 s in the quick tier on 2026-11-28 (docs/testing.md#tiers)
@pytest.mark.skipif(shutil.which("torchrun", path=str(Path(sys.executable).parent)) is None,
                    reason="torchrun is not installed (scripts/setup.sh gp installs torch)")
def test_workers_get_the_variables_torchrun_gives_them(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    sizes = ["--nnodes=2", "--nproc-per-node=2", "--node-rank=1", "--master-addr=127.0.0.1",
             "--master-port=29731"]
    ours = _ranks(*sizes, "--", "sh", "-c", DUMP, env={**env, "OUT": str(tmp_path / "ours")})
    assert ours.wait(timeout=60) == 0
    # the real torchrun, node 1 of 2: its rendezvous would wait for node 0, so node 0's
    # agent runs beside it with a command that only exits
    torchrun = str(Path(sys.executable).parent / "torchrun")
    real = [torchrun, "--rdzv-backend=static", "--no-python"]
    node0 = subprocess.Popen([*real, *[a.replace("rank=1", "rank=0") for a in sizes], "true"],
                             env=env)
    theirs = subprocess.run([*real, *sizes, "sh", "-c", DUMP], timeout=120,
                            env={**env, "OUT": str(tmp_path / "theirs")})
    node0.wait(timeout=60)
    assert theirs.returncode == 0
    for mine, real_env in zip(_envs(tmp_path / "ours", 2), _envs(tmp_path / "theirs", 2)):
        want = {k: real_env.get(k) for k in TORCH_VARS}
        assert {k: mine.get(k) for k in TORCH_VARS} == want
        assert want["RANK"] in ("2", "3") and want["WORLD_SIZE"] == "4"
        # the one difference, on purpose: torchrun's workers use its agent's TCPStore; with
        # no agent, rank 0 hosts the store at MASTER_PORT, as torch.distributed's env:// does
        assert (real_env["TORCHELASTIC_USE_AGENT_STORE"], mine["TORCHELASTIC_USE_AGENT_STORE"]) \
            == ("True", "False")


def test_a_failing_worker_stops_the_others_and_its_status_is_the_exit_status(tmp_path):
    began = time.monotonic()
    proc = _ranks("--nproc-per-node=3", "--master-addr=127.0.0.1", "--master-port=29732",
                  "--", "sh", "-c", 'if [ "$RANK" = 2 ]; then exit 7; fi; exec sleep 60')
    assert proc.wait(timeout=30) == 7
    assert time.monotonic() - began < 20  # the sleepers got SIGTERM, not 60 s
    ok = _ranks("--nproc-per-node=2", "--master-addr=127.0.0.1", "--master-port=29733",
                "--", "sh", "-c", "exit 0")
    assert ok.wait(timeout=30) == 0


def test_signals_listed_in_pet_signals_to_handle_reach_every_worker(tmp_path):
    """As torchrun with PET_SIGNALS_TO_HANDLE (what hpsearch sets for a checkpoint signal):
    SIGUSR2 reaches both workers, each saves and exits 0; without the listing it is not
    passed on (and ends the launcher, as it ends torchrun)."""
    body = ('trap \'echo saved > "$OUT.$RANK"; exit 0\' USR2; echo up > "$OUT.up.$RANK"; '
            'while :; do sleep 0.1; done')
    proc = _ranks("--nproc-per-node=2", "--master-addr=127.0.0.1", "--master-port=29734",
                  "--", "sh", "-c", body,
                  env={"OUT": str(tmp_path / "w"),
                       "PET_SIGNALS_TO_HANDLE": "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR2"})
    deadline = time.monotonic() + 20
    while not all((tmp_path / f"w.up.{r}").exists() for r in (0, 1)):
        assert time.monotonic() < deadline, "the workers did not start"
        time.sleep(0.05)
    proc.send_signal(signal.SIGUSR2)
    assert proc.wait(timeout=20) == 0
    assert [(tmp_path / f"w.{r}").read_text() for r in (0, 1)] == ["saved\n"] * 2


def test_warm_torchrun_trials_launch_through_warm_ranks_and_torchrun_args_keep_torchrun():
    layout = RankLayout(nodes=1, tasks_per_node=2, master_port=29735, warm_ranks="/venv/python")
    text = TorchrunLauncher().wrap("train", layout, NoRuntime())
    assert (f"/venv/python -c {shlex.quote(SAFE_MODULE_RUN)} hpsearch.warm ranks --node-rank=0 "
            "--master-addr=127.0.0.1") in text  # never -m: the workdir's code (procs.py)
    assert "torchrun" not in text
    slurm = TorchrunLauncher().wrap("train", RankLayout(nodes=2, tasks_per_node=2,
                                                        master_port=1, under_slurm=True,
                                                        warm_ranks="/venv/python"), NoRuntime())
    assert "hpsearch.warm ranks --node-rank=\"$SLURM_NODEID\"" in slurm
    assert " -m hpsearch" not in slurm
    assert "/venv/python --nnodes=2 --nproc-per-node=2 -- sh -c" in slurm
    kept = TorchrunLauncher(args=["--max-restarts=1"]).wrap("train", layout, NoRuntime())
    assert "torchrun --node-rank=0" in kept and "hpsearch.warm" not in kept

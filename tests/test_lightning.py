"""hpsearch.integrations.lightning and examples/lightning with the real `lightning` package,
on CPU (no Slurm): two searches through the CLI, each trial 2 ranks under torchrun with
gloo, one with pruning (the hopeless trial is stopped on both ranks) and one with promotion
(a paused trial resumes from its Lightning checkpoint); and the cluster environment under a
Slurm job's variables.

Bit for bit: Lightning is deterministic here (seed_everything, deterministic=True, one
thread per rank, the DistributedSampler's order a function of seed and epoch, no dropout),
and the callback's checkpoints hold every rank's RNG states beside Lightning's own state, so
a trial run in segments, each a new process resuming from the last .ckpt, reports exactly
the numbers of an uninterrupted run, every epoch. The uninterrupted run is the pruning
search's first trial: the same hyperparameters for more epochs, and max_epochs changes
nothing in the epochs before it (no LR schedule).

Needs torch, scikit-learn and lightning (`scripts/setup.sh lightning`); without them these
tests skip and say why (under CI=true they fail instead).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from hpsearch.store.reader import Reader
from hpsearch.store.runs import STORE_FILE
from tests.conftest import EXAMPLES, Cli
from tests.helpers import read_store
from tests.test_digits_ddp import _metrics, _require, _trial_env, _without_time

EXAMPLE = EXAMPLES / "lightning"
TRAIN = EXAMPLE / "train.py"
EPOCHS = 2         # the promoted trial's full run (rungs at 1 and 2 epochs)
PRUNE_EPOCHS = 12  # long enough for the driver's STOP to land before the pruned trial ends
# torchrun runs in the trials (launcher: torchrun): the venv's bin dir goes on their PATH.
VENV_PATH = {"PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}


@pytest.fixture(scope="module", autouse=True)
def lightning_installed() -> None:
    for module in ("torch", "sklearn", "lightning"):
        _require(module, "scripts/setup.sh test,gp,lightning installs what these tests need")


def _search(cli: Cli, name: str, epochs: int, pruner: str) -> subprocess.CompletedProcess:
    """A grid search over lr (a good value, then a hopeless one), 2 ranks a trial."""
    spec = cli.write_spec(f"""
        name: {name}
        command: >-
          {{python}} {TRAIN} --lr {{lr}} --width 32 --batch-size 32 --seed 3
          --accelerator cpu --epochs {epochs}
        search:
          strategy: grid
          parallel: 1
          space: {{lr: {{choices: [0.01, 0.00001]}}}}
          pruner: {pruner}
        objective: {{metric: val_acc, direction: maximize}}
        resources: {{tasks_per_node: 2, cpus_per_task: 1}}
        launcher: torchrun
        executor: {{type: local, timeout: 5m}}
        env: {{OMP_NUM_THREADS: 1}}
        checkpoints: {{keep_last: all}}  # every epoch's, registered, is checked below
        """, f"{name}.yaml")
    return cli("submit", spec, env=VENV_PATH, timeout=600)


@pytest.fixture(scope="module")
def searches(tmp_path_factory) -> dict:
    """Both searches, side by side (most of a trial's time is importing lightning). Pruning:
    the median pruner stops the second trial, worse than the first at its first epoch.
    Promotion: ASHA, rungs at 1 and 2 epochs; the better trial resumes to 2."""
    root = tmp_path_factory.mktemp("lightning")
    clis = {"prune": Cli(root / "prune"), "promote": Cli(root / "promote")}
    for cli in clis.values():
        cli.cwd.mkdir()
    with ThreadPoolExecutor(2) as pool:
        stop = pool.submit(_stopped_by_hand, root / "stopped")
        prune = pool.submit(_search, clis["prune"], "lt-prune", PRUNE_EPOCHS,
                            "{type: median, n_startup_trials: 1, n_warmup_steps: 0}")
        promote = pool.submit(_search, clis["promote"], "lt-promote", EPOCHS,
                              "{type: asha, mode: promotion, min_resource: 1, "
                              "reduction_factor: 2, max_resource: 2}")
        procs = {"prune": prune.result(), "promote": promote.result()}
        stopped = stop.result()
    for name, proc in procs.items():
        assert proc.returncode == 0, (name, proc.stdout, proc.stderr)
    return {**{name: (cli, procs[name]) for name, cli in clis.items()},
            "stopped": (root / "stopped", stopped)}


def _stopped_by_hand(trial_dir: Path) -> subprocess.CompletedProcess:
    """train.py as 2 gloo ranks under torchrun, with a STOP file in its trial dir from the
    start (as the driver writes it for a pruned trial, but with no SIGTERM after it)."""
    env = _trial_env(trial_dir)
    (trial_dir / "STOP").write_text("pruned\n")
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
         str(TRAIN), "--lr", "0.01", "--width", "32", "--batch-size", "32", "--seed", "3",
         "--accelerator", "cpu", "--epochs", str(EPOCHS)],
        cwd=trial_dir, env=env, capture_output=True, text=True, timeout=300)


def _trial_dir(cli: Cli, name: str, trial_id: int) -> Path:
    return cli.runs / name / "trials" / f"{trial_id:05d}"


def test_importing_hpsearch_does_not_import_lightning():
    code = ("import sys, hpsearch, hpsearch.trial, hpsearch.integrations; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('lightning', 'pytorch_lightning', 'torch')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert proc.stdout.strip() == "[]"


@pytest.mark.slow
def test_a_trial_runs_two_torchelastic_ranks_reports_from_rank_0_and_checkpoints(searches):
    cli, _ = searches["prune"]
    trial_dir = _trial_dir(cli, "lt-prune", 0)
    out = (trial_dir / "stdout.log").read_text()
    starts = sorted(line for line in out.splitlines() if line.startswith("rank "))
    assert starts == [f"rank {r}/2 local {r} environment TorchElasticEnvironment"
                      for r in (0, 1)], out
    metrics = _metrics(trial_dir)  # rank 0 alone reports, once per epoch, from step 0
    assert [m["step"] for m in metrics] == list(range(PRUNE_EPOCHS))
    assert set(metrics[0]) == {"step", "time", "attempt", "train_loss", "val_acc", "val_loss"}
    result = json.loads((trial_dir / "result.json").read_text())
    assert result == {k: v for k, v in metrics[-1].items()
                      if k not in ("step", "time", "attempt")}
    # One Lightning checkpoint an epoch, registered: the driver's store lists each.
    names = [f"step-{e:08d}.ckpt" for e in range(PRUNE_EPOCHS)]
    assert sorted(p.name for p in (trial_dir / "checkpoints").iterdir()) == names
    reader = Reader(cli.runs / "lt-prune" / STORE_FILE)
    try:
        stored = reader.checkpoints(0)
    finally:
        reader.close()
    assert [(c.step, Path(c.path).name) for c in stored] == list(enumerate(names))
    assert [c.metric for c in stored] == [m["val_acc"] for m in metrics]
    assert not list(trial_dir.rglob("hpc_ckpt_*"))  # Lightning's Slurm requeue never ran


@pytest.mark.slow
def test_a_stop_request_stops_both_ranks_after_the_same_epoch_with_a_checkpoint(searches):
    trial_dir, proc = searches["stopped"]
    # Each rank asked trial.should_stop(); one reduction made the answer the same on both:
    # both left after epoch 0 and exited 75 (torchrun itself exits 1, naming the code).
    assert proc.returncode == 1 and "exitcode  : 75 " in proc.stderr, proc.stdout + proc.stderr
    assert "exit 75 after 1 epochs" in proc.stdout, proc.stdout
    assert [m["step"] for m in _metrics(trial_dir)] == [0]
    assert sorted(p.name for p in (trial_dir / "checkpoints").iterdir()) == [
        "step-00000000.ckpt"]
    assert not (trial_dir / "result.json").exists()  # a stopped trial is not a finished one


@pytest.mark.slow
def test_a_pruning_search_stops_the_hopeless_trial_on_both_ranks(searches):
    """The driver writes STOP and then stops the trial (SIGTERM to torchrun and its ranks):
    the callback stops the ranks after an epoch, or Lightning's SIGTERM handling after a
    batch, whichever comes first; either way every epoch reported has its checkpoint."""
    cli, proc = searches["prune"]
    _, trials = read_store(cli.runs, "lt-prune")
    assert [t.state for t in trials] == ["completed", "pruned"], proc.stdout
    bad = _trial_dir(cli, "lt-prune", 1)
    steps = [m["step"] for m in _metrics(bad)]
    assert steps == list(range(len(steps))) and len(steps) < PRUNE_EPOCHS, steps
    assert sorted(p.name for p in (bad / "checkpoints").iterdir()) == [
        f"step-{e:08d}.ckpt" for e in steps]
    assert not (bad / "result.json").exists()
    # both ranks left by themselves after the same batch, neither waited for SIGKILL in a
    # collective the other would never join (Lightning's own SIGTERM handler broadcasts)
    out = (bad / "stdout.log").read_text()
    ends = sorted(re.findall(r"exit 75 after \d+ epochs on rank (\d+):", out))
    assert ends == ["0", "1"], out


@pytest.mark.slow
def test_a_promotion_search_resumes_from_lightning_checkpoints_bit_for_bit(searches):
    cli, proc = searches["promote"]
    _, trials = read_store(cli.runs, "lt-promote")
    assert [t.state for t in trials] == ["completed", "paused"], proc.stdout
    assert trials[0].attempt == 2  # segments of 1 and 2 epochs, each a new torchrun
    best = _trial_dir(cli, "lt-promote", 0)
    whole = _trial_dir(searches["prune"][0], "lt-prune", 0)  # the same run, uninterrupted
    got, want = _without_time(_metrics(best)), _without_time(_metrics(whole))
    assert [m["step"] for m in got] == list(range(EPOCHS))
    assert got == want[:EPOCHS]  # every epoch, bit for bit
    assert json.loads((best / "result.json").read_text()) == {
        k: v for k, v in want[EPOCHS - 1].items() if k != "step"}
    assert trials[0].objective_values == [want[EPOCHS - 1]["val_acc"]]
    # The paused trial stopped at its budget: one epoch and its checkpoint.
    paused = _trial_dir(cli, "lt-promote", 1)
    assert [m["step"] for m in _metrics(paused)] == [0]
    assert (paused / "checkpoints" / "step-00000000.ckpt").is_file()


ENVIRONMENT_CHECK = textwrap.dedent("""
    import os, signal, sys
    import lightning.pytorch as pl
    sys.path.insert(0, sys.argv[1])
    from train import Digits, DigitsMLP
    from hpsearch.integrations.lightning import HpsearchCallback, cluster_environment, fit

    plain = pl.Trainer(accelerator="cpu", devices=1, logger=False)
    print("plain", type(plain._accelerator_connector.cluster_environment).__name__)

    class SendUsr1(pl.Callback):
        def on_train_epoch_end(self, trainer, module):
            handler = signal.getsignal(signal.SIGUSR1)
            print("usr1", handler.__module__, handler.__name__)
            os.kill(os.getpid(), signal.SIGUSR1)  # Slurm's requeue signal to Lightning

    trainer = pl.Trainer(accelerator="cpu", devices=1, max_epochs=3, logger=False,
                         plugins=[cluster_environment()], callbacks=[SendUsr1(),
                         HpsearchCallback()], enable_progress_bar=False,
                         default_root_dir=os.environ["HPSEARCH_TRIAL_DIR"])
    env = trainer._accelerator_connector.cluster_environment
    print("ours", type(env).__name__, env.global_rank(), env.world_size())
    code = fit(trainer, DigitsMLP(0.01, 16), datamodule=Digits(64))
    print("exit", code, "epochs", trainer.current_epoch)
    """)


@pytest.mark.slow
def test_under_slurm_variables_lightning_neither_takes_slurm_ranks_nor_requeues(tmp_path):
    """A trial in a Slurm job (here: a job's SLURM_* variables, rank 3 of 4, and a fake
    scontrol that records calls) with hpsearch's launcher variables (one rank). Lightning
    alone takes SLURMEnvironment; with cluster_environment() it takes LightningEnvironment,
    rank 0 of 1, and SIGUSR1 reaches hpsearch.trial's handler: the trial stops after the
    epoch with exit 75, and scontrol requeue is never run, nor an hpc_ckpt written."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "scontrol-calls"
    (bin_dir / "scontrol").write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    (bin_dir / "scontrol").chmod(0o755)
    trial_dir = tmp_path / "trial"
    env = {**_trial_env(trial_dir), "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}",
           "SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "hps.lt.0.1", "SLURM_NTASKS": "4",
           "SLURM_NTASKS_PER_NODE": "1", "SLURM_NNODES": "1", "SLURM_PROCID": "3",
           "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_NODELIST": "node1",
           "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
           "NODE_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29581"}
    proc = subprocess.run([sys.executable, "-c", ENVIRONMENT_CHECK, str(EXAMPLE)],
                          cwd=trial_dir, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert "plain SLURMEnvironment" in lines  # the variables are a Slurm job's to Lightning
    assert "ours LightningEnvironment 0 1" in lines
    assert "usr1 hpsearch.trial _on_signal" in lines
    assert "exit 75 epochs 1" in lines, proc.stdout
    assert not calls.exists() and not list(tmp_path.rglob("hpc_ckpt_*"))
    assert [m["step"] for m in _metrics(trial_dir)] == [0]
    assert sorted(p.name for p in (trial_dir / "checkpoints").iterdir()) == [
        "step-00000000.ckpt"]

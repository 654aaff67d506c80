"""The PyTorch DDP example (examples/digits_ddp) on CPU, for real: a search through the CLI,
2 ranks under torchrun with gloo, and a stopped run that resumes to the exact same result.

Needs torch and scikit-learn in the test environment; without them these tests skip and say
why (under CI=true they fail instead: CI must run them).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from hpsearch.store.reader import Reader
from hpsearch.store.runs import STORE_FILE
from tests.conftest import EXAMPLES
from tests.helpers import read_store

pytestmark = pytest.mark.slow  # PyTorch: 2-rank DDP runs under torchrun

EXAMPLE = EXAMPLES / "digits_ddp"
TRAIN = EXAMPLE / "train.py"
STOPPED = 75  # train.py's exit code after a stop request (checkpoint saved)
START_LINE = re.compile(r"^rank (\d+)/(\d+) local (\d+) on (\S+) master (\S+):(\S+)$",
                        re.MULTILINE)


def _require(module: str, why: str) -> None:
    # find_spec, not import: importing torch here would cost seconds and only the
    # subprocesses need it.
    if importlib.util.find_spec(module) is None:
        reason = f"{module} is not installed; {why}"
        if os.environ.get("CI"):
            pytest.fail(f"CI is set, so the DDP example tests must run, but: {reason}",
                        pytrace=False)
        pytest.skip(reason)


@pytest.fixture(scope="module", autouse=True)
def torch_and_sklearn() -> None:
    _require("torch", "pip install torch==2.13.0 (the CPU build) to run the DDP example tests")
    _require("sklearn", "pip install scikit-learn to run the DDP example tests")


def _trial_env(trial_dir: Path) -> dict[str, str]:
    """The trial contract's variables, set by hand as the driver would."""
    trial_dir.mkdir(parents=True, exist_ok=True)
    return {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1",
            "HPSEARCH_EXPERIMENT": "digits-by-hand", "HPSEARCH_TRIAL_ID": "0",
            "HPSEARCH_ATTEMPT": "1", "HPSEARCH_TRIAL_DIR": str(trial_dir),
            "HPSEARCH_CHECKPOINT_DIR": str(trial_dir / "checkpoints"),
            "HPSEARCH_PARAMS": json.dumps({"lr": 0.01, "width": 32})}


def _torchrun(trial_dir: Path, *args: str) -> subprocess.CompletedProcess:
    """train.py as 2 ranks on this machine (gloo), like `launcher: torchrun` on one node."""
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
         str(TRAIN), "--lr", "0.01", "--width", "32", "--batch-size", "64",
         "--optimizer", "adam", "--seed", "3", "--device", "cpu", *args],
        cwd=trial_dir, env=_trial_env(trial_dir), capture_output=True, text=True, timeout=180)


def _metrics(trial_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (trial_dir / "metrics.jsonl").read_text().splitlines()]


def _without_time(metrics: list[dict]) -> list[dict]:
    """The reported values: without the time, and without the attempt that wrote the line
    (trial.report records it; a segment of a promoted trial is a later attempt)."""
    return [{k: v for k, v in m.items() if k not in ("time", "attempt")} for m in metrics]


@pytest.fixture(scope="module")
def ddp_runs(torch_and_sklearn, tmp_path_factory) -> dict:
    """Three 2-rank runs of 3 epochs. `whole` runs uninterrupted. `resumed` first starts
    with a STOP file in its trial dir, so both ranks stop after epoch 1 with a checkpoint;
    then it runs again without STOP and continues from that checkpoint. `whole` and the
    first half of `resumed` run side by side to save time."""
    root = tmp_path_factory.mktemp("ddp")
    whole, resumed = root / "whole", root / "resumed"
    resumed.mkdir()
    (resumed / "STOP").touch()
    with ThreadPoolExecutor(2) as pool:
        first = [pool.submit(_torchrun, d, "--epochs", "3") for d in (whole, resumed)]
        whole_run, stopped_run = (f.result() for f in first)
    after_stop = {"result": (resumed / "result.json").exists(),
                  "steps": [m["step"] for m in _metrics(resumed)],
                  "checkpoints": sorted(p.name for p in (resumed / "checkpoints").iterdir())}
    (resumed / "STOP").unlink()
    resumed_run = _torchrun(resumed, "--epochs", "3")
    return {"whole": (whole, [whole_run]), "resumed": (resumed, [stopped_run, resumed_run]),
            "after_stop": after_stop}


def test_search_runs_end_to_end_through_the_cli(cli):
    text = (EXAMPLE / "local.yaml").read_text()
    for old, new in (("trials: 8", "trials: 3"), ("parallel: 2", "parallel: 3"),
                     ("epochs: 5 ", "epochs: 2 "), ("name: digits-local", "name: digits-test")):
        assert old in text, old
        text = text.replace(old, new)
    text += f"workdir: {EXAMPLE}\n"  # the spec now lives in tmp_path; train.py stays put
    spec = cli.write_spec(text, "digits.yaml")
    proc = cli("submit", spec, "--runs-dir", cli.runs, timeout=180, check=0)
    exp, trials = read_store(cli.runs, "digits-test")
    assert exp.status == "completed", proc.stdout
    assert [t.state for t in trials] == ["completed"] * 3, proc.stdout
    reader = Reader(cli.runs / "digits-test" / STORE_FILE)
    try:
        for t in trials:
            assert t.params["epochs"] == 2 and t.params["optimizer"] in ("sgd", "adam", "adamw")
            val_acc = t.objective_values[0]
            assert 0 < val_acc <= 1
            tdir = Path(t.trial_dir)
            assert json.loads((tdir / "result.json").read_text())["val_acc"] == val_acc
            rows = reader.metrics(t.id)
            assert sorted({(m["step"], m["name"]) for m in rows}) == [
                (step, name) for step in (0, 1) for name in ("train_loss", "val_acc", "val_loss")]
            last_acc = [m["value"] for m in rows if m["step"] == 1 and m["name"] == "val_acc"]
            assert last_acc == [val_acc]  # the objective is the last epoch's accuracy
            assert sorted(p.name for p in (tdir / "checkpoints").iterdir()) == [
                "epoch-0000.pt", "epoch-0001.pt"]
            out = (tdir / "stdout.log").read_text()
            assert START_LINE.search(out).groups()[:3] == ("0", "1", "0")
            assert re.search(r"^first_step_s=\d+\.\d+ ", out, re.MULTILINE)
    finally:
        reader.close()


def test_two_ranks_train_with_gloo_under_torchrun(ddp_runs):
    trial_dir, (run,) = ddp_runs["whole"]
    assert run.returncode == 0, run.stdout + run.stderr
    starts = START_LINE.findall(run.stdout)
    assert sorted((rank, world, local) for rank, world, local, *_ in starts) == [
        ("0", "2", "0"), ("1", "2", "1")], run.stdout
    assert len({(addr, port) for *_, addr, port in starts}) == 1  # one rendezvous
    assert run.stdout.count("first_step_s=") == 1  # rank 0 only
    metrics = _metrics(trial_dir)  # rank 0 reports, once per epoch
    assert [m["step"] for m in metrics] == [0, 1, 2]
    result = json.loads((trial_dir / "result.json").read_text())
    assert 0 < result["val_acc"] <= 1 and result["val_acc"] == metrics[-1]["val_acc"]
    assert result["val_loss"] == metrics[-1]["val_loss"]
    assert result["best_val_acc"] == max(m["val_acc"] for m in metrics)
    assert sorted(p.name for p in (trial_dir / "checkpoints").iterdir()) == [
        f"epoch-{e:04d}.pt" for e in range(3)]


def test_stopped_run_resumes_to_exactly_the_uninterrupted_result(ddp_runs):
    whole_dir, _ = ddp_runs["whole"]
    trial_dir, (stopped, resumed) = ddp_runs["resumed"]
    # Both ranks stopped together after epoch 1, with its checkpoint saved; torchrun fails.
    assert stopped.returncode != 0, stopped.stdout
    assert re.search(rf"exitcode\s*:\s*{STOPPED}\b", stopped.stderr), stopped.stderr
    assert "stopping after epoch 1" in stopped.stdout
    assert ddp_runs["after_stop"] == {"result": False, "steps": [0],
                                      "checkpoints": ["epoch-0000.pt"]}
    # The second run continued from that checkpoint, on both ranks.
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "resuming from epoch-0000.pt: epoch 1" in resumed.stdout
    assert "epoch 1/3" not in resumed.stdout and "epoch 2/3" in resumed.stdout
    got, want = _metrics(trial_dir), _metrics(whole_dir)
    assert [m["step"] for m in got] == [0, 1, 2]
    assert _without_time(got) == _without_time(want)  # bit for bit, every epoch
    assert json.loads((trial_dir / "result.json").read_text()) == json.loads(
        (whole_dir / "result.json").read_text())

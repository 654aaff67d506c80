"""A training script run by hand, outside hpsearch (no HPSEARCH_* variables: issue 38 item 8):
hpsearch.trial gives the script's default params and writes into a private temporary trial
dir, which one note on stderr names; the examples run so, the Lightning one included."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES
from tests.test_digits_ddp import _require

NOTE = re.compile(r"^hpsearch\.trial: running outside hpsearch \(HPSEARCH_TRIAL_DIR is not "
                  r"set\).* go to (\S+), a private temporary folder", re.M)


def _by_hand(tmp_path: Path, *argv: str, cwd: Path | None = None) -> tuple[
        subprocess.CompletedProcess, Path]:
    """Run argv with no HPSEARCH_* variable and TMPDIR in tmp_path; the run and the one
    temporary trial dir its note names (checked private: a folder of ours, 0700)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HPSEARCH_")}
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env.update(TMPDIR=str(tmp), OMP_NUM_THREADS="1")
    proc = subprocess.run(argv, cwd=cwd or tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    notes = NOTE.findall(proc.stderr)
    assert len(notes) == 1, proc.stderr  # one note, however many calls asked for the dir
    made = Path(notes[0])
    assert made.parent == tmp and [p.name for p in tmp.glob("hpsearch-*")] == [made.name]
    info = os.lstat(made)
    assert stat.S_ISDIR(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o700
    assert info.st_uid == os.geteuid()
    return proc, made


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


SCRIPT = """
import json, os, subprocess, sys
from hpsearch import trial
p = trial.params({"lr": 0.5, "steps": 3})
for step in range(p["steps"]):
    trial.report(step, loss=p["lr"] / (step + 1))
    with trial.checkpoint(step, ".json") as path:
        path.write_text(json.dumps({"step": step}))
trial.result(loss=p["lr"] / p["steps"])
child = subprocess.run([sys.executable, "-c", "from hpsearch import trial; "
                        "print(trial.trial_dir(), trial.trial_id())"],
                       capture_output=True, text=True, check=True)
print(json.dumps({"params": p, "id": trial.trial_id(), "dir": str(trial.trial_dir()),
                  "latest": trial.latest_checkpoint().name, "child": child.stdout.split(),
                  "child_err": child.stderr}))
"""


def test_a_script_run_by_hand_gets_its_defaults_and_a_private_trial_dir(tmp_path):
    proc, made = _by_hand(tmp_path, sys.executable, "-c", SCRIPT)
    seen = json.loads(proc.stdout)
    assert seen["params"] == {"lr": 0.5, "steps": 3} and seen["id"] == 0
    assert seen["dir"] == str(made) and seen["latest"] == "step-00000002.json"
    assert seen["child"] == [str(made), "0"] and seen["child_err"] == ""  # shared, no 2nd note
    assert json.loads((made / "result.json").read_text()) == {"loss": 0.5 / 3}
    steps = [json.loads(line)["step"] for line in _lines(made / "metrics.jsonl")]
    assert steps == [0, 1, 2]


def test_params_inside_a_trial_come_over_the_defaults(tmp_path):
    env = {**os.environ, "HPSEARCH_TRIAL_DIR": str(tmp_path),
           "HPSEARCH_PARAMS": json.dumps({"lr": 0.1})}
    code = "from hpsearch import trial; print(trial.params({'lr': 0.5, 'steps': 3}))"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=60, check=True)
    assert proc.stdout.strip() == "{'lr': 0.1, 'steps': 3}" and proc.stderr == ""


def test_the_quadratic_example_runs_by_hand(tmp_path):
    example = EXAMPLES / "quadratic"
    proc, made = _by_hand(tmp_path, sys.executable, str(example / "train.py"), "--x", "1",
                          "--y", "-2", "--optimizer", "adam", "--steps", "3", "--sleep", "0",
                          cwd=example)
    assert len(_lines(made / "metrics.jsonl")) == 3


@pytest.mark.slow
def test_the_lightning_example_runs_by_hand(tmp_path):
    for module in ("torch", "sklearn", "lightning"):
        _require(module, "scripts/setup.sh test,gp,lightning installs what this test needs")
    example = EXAMPLES / "lightning"
    proc, made = _by_hand(tmp_path, sys.executable, str(example / "train.py"), "--epochs", "2",
                          "--accelerator", "cpu", "--width", "16", cwd=example)
    assert "exit 0 after 2 epochs on rank 0" in proc.stdout, proc.stdout
    steps = [json.loads(line)["step"] for line in _lines(made / "metrics.jsonl")]
    assert steps == [0, 1]
    assert (made / "result.json").is_file()
    assert sorted(p.name for p in (made / "checkpoints").iterdir()) == [
        "step-00000000.ckpt", "step-00000001.ckpt"]

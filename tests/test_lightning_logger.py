"""Lightning's own logger in a trial run in segments (issue 38 item 7): each segment of a
promoted trial is a new fit resuming from the last checkpoint, and the default
TensorBoardLogger numbered a new lightning_logs/version_N in each, so TensorBoard showed a
trial as several runs. hpsearch.integrations.lightning.fit pins it to version_0.

The two segments run as two Trainers in one process (a fresh default logger each, as in a
new process; Lightning imports once), with HPSEARCH_BUDGET 1 then 2 as the driver gives them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import EXAMPLES
from tests.test_digits_ddp import _require, _trial_env

SEGMENTS = textwrap.dedent("""
    import json, os, sys
    import lightning.pytorch as pl
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    sys.path.insert(0, sys.argv[1])
    from train import Digits, DigitsMLP
    from hpsearch import trial
    from lightning.pytorch.loggers import TensorBoardLogger
    from hpsearch.integrations.lightning import HpsearchCallback, fit, pin_logger_version

    root = trial.trial_dir() / "lightning"
    for budget in ("1", "2"):  # rungs at 1 and 2 epochs: two segments, each resuming
        os.environ["HPSEARCH_BUDGET"] = budget
        trainer = pl.Trainer(accelerator="cpu", devices=1, max_epochs=2,
                             callbacks=[HpsearchCallback()], enable_progress_bar=False,
                             enable_model_summary=False, num_sanity_val_steps=0,
                             default_root_dir=root)  # the default logger: TensorBoard's
        code = fit(trainer, DigitsMLP(0.01, 16), datamodule=Digits(64))
        print("segment", budget, "exit", code, type(trainer.logger).__name__,
              trainer.logger.log_dir)
    logs = root / "lightning_logs"
    runs = {}
    for run in sorted(os.listdir(logs)):
        events = EventAccumulator(str(logs / run))
        events.Reload()
        runs[run] = [s.step for s in events.Scalars("val_acc")]
    print(json.dumps(runs))
    # left alone: a logger given a version, and one outside the trial dir (shared by trials)
    given = TensorBoardLogger(root, version="mine")
    shared = TensorBoardLogger(sys.argv[2])
    pin_logger_version(pl.Trainer(logger=[given, shared], enable_progress_bar=False))
    print("left", given.version, shared._version)
    """)


@pytest.mark.slow
def test_two_segments_of_a_trial_log_into_one_tensorboard_version(tmp_path):
    for module in ("torch", "sklearn", "lightning", "tensorboard"):
        _require(module, "scripts/setup.sh test,gp,lightning,tensorboard installs it")
    trial_dir = tmp_path / "trial"
    env = _trial_env(trial_dir)
    proc = subprocess.run([sys.executable, "-c", SEGMENTS, str(EXAMPLES / "lightning"),
                           str(tmp_path / "shared")],
                          cwd=trial_dir, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    version_0 = os.path.join(trial_dir, "lightning", "lightning_logs", "version_0")
    assert [line for line in lines if line.startswith("segment")] == [
        f"segment {b} exit 0 TensorBoardLogger {version_0}" for b in (1, 2)]
    # one run; its val_acc at the end of epoch 0 and of epoch 1, each from its segment
    assert lines[-1] == "left mine None"
    runs = json.loads(lines[-2])
    assert list(runs) == ["version_0"] and len(runs["version_0"]) == 2, runs
    assert runs["version_0"][0] < runs["version_0"][1]
    steps = [json.loads(m)["step"] for m in (trial_dir / "metrics.jsonl").read_text().split("\n")
             if m]
    assert steps == [0, 1]  # and the second segment did resume

"""Parallel efficiency per trial, POP's way (docs/scaling.md): every rank reports its step and
compute times (hpsearch.trial.report_timing, the DDP hook, the Lightning callback), the
driver adds them up per rank (hpsearch.ingest.timing_lines), and status, export and report
show load balance, communication and parallel efficiency, and speedup across trial sizes
(hpsearch.accounting.efficiency)."""

from __future__ import annotations

import csv
import io
import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import hpsearch
from hpsearch import trial
from hpsearch.accounting.efficiency import (
    add_scaling,
    describe,
    efficiency,
    size_params,
    trial_efficiency,
)
from hpsearch.ingest.timing_lines import TimingFiles
from tests.conftest import EXAMPLES, Cli
from tests.helpers import read_store
from tests.test_digits_ddp import _require, _trial_env

TESTS = Path(__file__).resolve().parent
VENV_PATH = {"PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}


def _row(trial_id: int, rank: int, steps: int, step_s: float, compute_s: float,
         items: float = 0.0, attempt: int = 1) -> dict:
    """A rank_timing row: sums over `steps` steps of step_s and compute_s seconds each."""
    return {"trial": trial_id, "attempt": attempt, "rank": rank, "steps": steps,
            "step_s": steps * step_s, "compute_s": steps * compute_s,
            "items": steps * items, "item_steps": steps if items else 0}


def test_known_numbers_give_pop_metrics():
    # Two ranks compute 1.0 s and 0.5 s of a 1.25 s step: LB 0.75, CE 0.8, PE 0.6.
    eff = trial_efficiency([_row(0, 0, 4, 1.25, 1.0), _row(0, 1, 4, 1.25, 0.5)])[0]
    assert eff.ranks == 2 and eff.steps == 4 and eff.step_s == pytest.approx(1.25)
    assert eff.load_balance == pytest.approx(0.75)
    assert eff.comm_efficiency == pytest.approx(0.8)
    assert eff.parallel_efficiency == pytest.approx(0.6)
    assert eff.steps_per_s == pytest.approx(0.8)
    assert describe(eff) == "PE 60% (LB 75% CE 80%) 2 ranks"


def test_means_per_step_across_attempts_and_unequal_counts():
    # Rank 0's 2 attempts and rank 1's 1 (read mid-run): means per step, not totals.
    rows = [_row(3, 0, 2, 2.0, 2.0), _row(3, 0, 2, 2.0, 1.0, attempt=2),
            _row(3, 1, 1, 2.0, 1.5, attempt=2)]
    eff = trial_efficiency(rows)[3]
    assert eff.steps == 4 and eff.compute_max == pytest.approx(1.5)
    assert eff.compute_mean == pytest.approx(1.5)  # (1.5 + 1.5) / 2
    assert eff.load_balance == pytest.approx(1.0)
    assert eff.comm_efficiency == pytest.approx(0.75)
    assert trial_efficiency([_row(4, 0, 0, 0.0, 0.0)]) == {}  # no step: no trial


def test_speedup_against_the_smallest_size_of_the_same_configuration():
    spec = "resources: {tasks_per_node: '{ranks}', time: '{limit}', nodes: 1}\n"
    assert size_params(spec) == ["ranks", "limit"]
    assert size_params("resources: [1") == [] and size_params("name: x") == []
    rows = [_row(1, 0, 10, 1.0, 1.0, items=64),                        # 1 rank
            *(_row(2, r, 10, 0.625, 0.5, items=64) for r in range(2)),  # 2 ranks
            *(_row(5, r, 10, 0.4, 0.25, items=64) for r in range(4)),   # 4 ranks
            _row(6, 0, 10, 0.5, 0.5, items=64)]                         # another lr
    params = {1: {"lr": 0.1, "ranks": 1, "limit": "1h"}, 2: {"lr": 0.1, "ranks": 2},
              5: {"lr": 0.1, "ranks": 4}, 6: {"lr": 0.2, "ranks": 1}}
    found = efficiency(rows, params, spec)
    assert found[1].speedup == pytest.approx(1.0) and found[1].baseline == 1
    assert found[2].speedup == pytest.approx(1.6)                 # 1.0 / 0.625
    assert found[2].scaling_efficiency == pytest.approx(0.8)
    assert found[5].speedup == pytest.approx(2.5)
    assert found[5].scaling_efficiency == pytest.approx(0.625)
    assert found[2].throughput() == (pytest.approx(102.4), "items/s")
    assert found[6].speedup is None and found[6].baseline is None  # ran at one size only
    assert describe(found[2]).endswith(", x1.6 (80% of ideal)")
    # Without the size parameters known, every size is its own configuration.
    alone = trial_efficiency(rows)
    add_scaling(alone, params, [])
    assert all(e.speedup is None for e in alone.values())


def test_report_timing_writes_each_ranks_private_file(tmp_path, monkeypatch):
    monkeypatch.setenv("HPSEARCH_TRIAL_DIR", str(tmp_path))
    monkeypatch.setenv("HPSEARCH_ATTEMPT", "2")
    monkeypatch.setenv("RANK", "3")
    trial.report_timing(7, step_s=0.5, compute_s=0.75, items=32)  # compute capped at step
    with trial.timed_step(8) as t:
        t.comm_s = 1e9  # more than the step: all of it was waiting
    path = tmp_path / "timing.3.jsonl"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    first, second = (json.loads(line) for line in path.read_text().splitlines())
    assert first["step"] == 7 and first["attempt"] == 2 and first["items"] == 32.0
    assert first["step_s"] == first["compute_s"] == 0.5
    assert second["compute_s"] == 0.0 and second["step_s"] >= 0
    for bad in ({"step_s": -1.0}, {"step_s": float("nan")}, {"step_s": 1, "compute_s": "x"}):
        with pytest.raises(ValueError):
            trial.report_timing(1, **bad)
    with pytest.raises(TypeError):
        trial.report_timing(1.5, step_s=1)  # type: ignore[arg-type]
    monkeypatch.delenv("RANK")
    assert trial.rank() == 0


def test_timing_lines_are_untrusted_read_once_and_warned_about(tmp_path):
    good = [{"step": s, "time": 1.0 + s, "attempt": 1, "step_s": 1.0, "compute_s": 0.5}
            for s in range(3)]
    bad = ['{"step": 1, "step_s": -1, "compute_s": 0}', "not json", "[1, 2]",
           '{"step": "x", "step_s": 1, "compute_s": 1}',
           '{"step": 1, "step_s": 1e400, "compute_s": 1}',
           '{"step": 1, "step_s": 1e9, "compute_s": 1}', '{"step": 1, "step_s": 1}']
    lines = [json.dumps(g) for g in good] + bad
    (tmp_path / "timing.0.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "timing.1.jsonl").write_bytes(b'{"step": 0, "step_s": 2, "compute_s": 3}\n'
                                              + b"\xff\xfe\n")
    (tmp_path / "timing.3.jsonl").write_text(json.dumps(good[0]) + "\n")  # after a gap
    files = TimingFiles(tmp_path)
    tallies = {t.rank: t for t in files.read_new()}
    assert set(tallies) == {0, 1}
    assert tallies[0].steps == 3 and tallies[0].compute_s == 1.5 and tallies[0].step_s == 3.0
    assert tallies[1].compute_s == 2.0  # compute never above the step
    assert len(files.warnings) == len(bad) + 1
    assert "timing.0.jsonl line 4: skipped malformed timing line" in files.warnings[0]
    assert any("not UTF-8" in w for w in files.warnings)
    # Read on from the stored state: nothing twice; new lines only.
    state = files.unsaved()
    again = TimingFiles(tmp_path, json.loads(json.dumps(state)))
    assert again.read_new() == [] and again.warnings == []
    with open(tmp_path / "timing.0.jsonl", "a") as fh:
        fh.write(json.dumps(good[0]) + "\n")
    assert [t.steps for t in again.read_new()] == [1]
    # A link where a rank's file belongs is never followed.
    (tmp_path / "elsewhere").write_text(json.dumps(good[0]) + "\n")
    (tmp_path / "timing.2.jsonl").symlink_to(tmp_path / "elsewhere")
    linked = TimingFiles(tmp_path)
    assert {t.rank for t in linked.read_new()} == {0, 1, 3}
    assert any(w.startswith("timing.2.jsonl: ignored: not a regular file")
               for w in linked.warnings)


@pytest.fixture(scope="module")
def scaling_search(tmp_path_factory) -> Cli:
    """A grid over tasks_per_node 1 and 2 of one configuration, each trial under torchrun
    (gloo, one thread a rank), rank 1 computing 10 ms longer each step."""
    _require("torch", "pip install torch==2.13.0 (the CPU build)")
    cli = Cli(tmp_path_factory.mktemp("scaling"))
    cli.cwd.mkdir(exist_ok=True)
    spec = cli.write_spec(f"""
        name: scaling
        command: >-
          {{python}} {TESTS / "scaling_trial.py"} --steps 15 --batch 256 --width 256
          --slow-rank 1 --slow 0.01 --lr {{lr}}
        search:
          strategy: grid
          parallel: 1
          space: {{lr: {{choices: [0.01]}}, ranks: {{choices: [1, 2]}}}}
        objective: {{metric: loss}}
        resources: {{tasks_per_node: "{{ranks}}", cpus_per_task: 1}}
        launcher: torchrun
        executor: {{type: local, timeout: 5m}}
        env: {{OMP_NUM_THREADS: 1, PYTHONPATH: "{TESTS.parent}"}}
        """)
    cli("submit", spec, "--no-tui", "-q", env=VENV_PATH, timeout=240, check=0)
    return cli


@pytest.mark.slow
def test_ddp_trials_report_timing_from_every_rank_and_commands_show_it(scaling_search):
    cli = scaling_search
    _, trials = read_store(cli.runs, "scaling")
    assert [t.state for t in trials] == ["completed", "completed"], [t.error for t in trials]
    two = next(t for t in trials if t.params["ranks"] == 2)
    one = next(t for t in trials if t.params["ranks"] == 1)
    assert {p.name for p in Path(two.trial_dir).glob("timing.*.jsonl")} == {
        "timing.0.jsonl", "timing.1.jsonl"}
    rows = list(csv.DictReader(io.StringIO(cli("export", "scaling", check=0).stdout)))
    got = {int(r["trial"]): r for r in rows}
    pair = got[two.id]
    assert pair["ranks"] == "2" and int(got[one.id]["ranks"]) == 1
    lb, ce, pe = (float(pair[k]) for k in ("load_balance", "comm_efficiency",
                                           "parallel_efficiency"))
    assert 0 < lb < 1 and 0 < ce <= 1 and pe == pytest.approx(lb * ce)  # rank 1 is slower
    assert float(got[one.id]["parallel_efficiency"]) == pytest.approx(1.0)  # one rank
    assert pair["throughput_unit"] == "items/s"
    assert float(got[one.id]["speedup"]) == pytest.approx(1.0)
    speedup = float(pair["speedup"])
    assert speedup > 0 and float(pair["scaling_efficiency"]) == pytest.approx(speedup / 2)
    frame = hpsearch.load("scaling", cli.runs).trials_dataframe().set_index("number")
    assert frame.loc[two.id, "user_attrs_hpsearch_parallel_efficiency"] == pytest.approx(pe)
    assert frame.loc[two.id, "user_attrs_hpsearch_ranks"] == 2
    assert frame.loc[two.id, "user_attrs_hpsearch_speedup"] == pytest.approx(speedup)
    status = cli("status", "scaling", check=0).stdout
    assert "parallel" in status.splitlines()[1]
    assert f"PE {100 * pe:.0f}% (LB {100 * lb:.0f}% CE {100 * ce:.0f}%) 2 ranks" in status
    report = cli("report", "scaling", "--out", cli.cwd / "report", check=0)
    page = (cli.cwd / "report" / "report.html").read_text()
    assert "id='parallel-efficiency'" in page and "id='scaling'" in page, report.stderr
    assert (cli.cwd / "report" / "scaling.png").stat().st_size > 1000


LIGHTNING_TIMED = textwrap.dedent("""
    import sys
    import lightning.pytorch as pl
    sys.path.insert(0, sys.argv[1])
    from train import Digits, DigitsMLP
    from hpsearch.integrations.lightning import (HpsearchCallback, cluster_environment, fit,
                                                 rank_layout)
    devices, num_nodes = rank_layout()
    trainer = pl.Trainer(accelerator="cpu", devices=devices, num_nodes=num_nodes,
                         strategy="ddp", max_epochs=1, logger=False, limit_val_batches=2,
                         plugins=[cluster_environment()], enable_progress_bar=False,
                         callbacks=[HpsearchCallback(checkpoint=False, timing=True)])
    sys.exit(fit(trainer, DigitsMLP(0.01, 16), datamodule=Digits(32)))
    """)


@pytest.mark.slow
def test_lightning_callback_times_every_batch_on_every_rank(tmp_path):
    for module in ("torch", "sklearn", "lightning"):
        _require(module, "scripts/setup.sh test,gp,lightning installs what this test needs")
    trial_dir = tmp_path / "trial"
    script = tmp_path / "timed.py"
    script.write_text(LIGHTNING_TIMED)
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
         str(script), str(EXAMPLES / "lightning")], cwd=tmp_path, env=_trial_env(trial_dir),
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    tallies = {t.rank: t for t in TimingFiles(trial_dir).read_new(final=True)}
    assert set(tallies) == {0, 1}
    assert tallies[0].steps == tallies[1].steps > 5  # every batch but the warm-up one
    steps = tallies[0].steps  # 32 samples a rank and batch, 2 ranks; the last one short
    assert 64.0 * (steps - 1) < tallies[0].items <= 64.0 * steps
    for t in tallies.values():
        assert 0 < t.compute_s <= t.step_s

"""Promotion mode with the digits DDP example (issue 12): a trial run in segments, each a new
process with a larger HPSEARCH_BUDGET that resumes from the previous segment's checkpoint,
ends bit for bit as an uninterrupted run; as 1 process and as 2 gloo ranks under torchrun.

train.py is run by hand with the trial contract's environment, as the driver would start each
segment (same trial dir and checkpoint dir, the next attempt number, the rung's budget).
Needs torch and scikit-learn (see tests/test_digits_ddp.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.test_digits_ddp import TRAIN, _metrics, _trial_env, _without_time, torch_and_sklearn  # noqa: F401

pytestmark = pytest.mark.slow  # PyTorch: trains the digits example in segments

ONE_PROCESS = (sys.executable,)
TWO_RANKS = (sys.executable, "-m", "torch.distributed.run", "--standalone",
             "--nproc-per-node=2")
# launcher, --epochs (the max resource), the budgets of the segments (rungs 1, 3, 9: eta 3)
SPLITS = {"one process": (ONE_PROCESS, 9, (1, 3, 9)), "two ranks": (TWO_RANKS, 3, (1, 3))}


def _train(trial_dir: Path, launcher: tuple[str, ...], epochs: int, budget: int | None = None,
           attempt: int = 1) -> subprocess.CompletedProcess:
    """One process (or torchrun) of train.py in trial_dir: a segment when budget is set."""
    env = {**_trial_env(trial_dir), "HPSEARCH_ATTEMPT": str(attempt)}
    if budget is not None:
        env["HPSEARCH_BUDGET"] = str(budget)
    return subprocess.run(
        [*launcher, str(TRAIN), "--lr", "0.01", "--width", "32", "--batch-size", "64",
         "--optimizer", "adam", "--seed", "3", "--device", "cpu", "--epochs", str(epochs)],
        cwd=trial_dir, env=env, capture_output=True, text=True, timeout=180)


def _segments(trial_dir: Path, launcher: tuple[str, ...], epochs: int,
              budgets: tuple[int, ...]) -> list[dict]:
    """Run the segments one after another; what each left behind when it ended."""
    seen = []
    for attempt, budget in enumerate(budgets, start=1):
        proc = _train(trial_dir, launcher, epochs, budget, attempt)
        result = trial_dir / "result.json"
        seen.append({"proc": proc, "metrics": _metrics(trial_dir),
                     "result": json.loads(result.read_text()) if result.exists() else None,
                     "checkpoints": sorted(p.name for p in (trial_dir / "checkpoints").iterdir())})
    return seen


@pytest.fixture(scope="module")
def split_runs(tmp_path_factory) -> dict:
    """For each launcher: an uninterrupted run and the same run in segments. All four run
    at once: most of each process's time is imports, and the segments must run in turn."""
    root = tmp_path_factory.mktemp("promotion")
    with ThreadPoolExecutor(2 * len(SPLITS)) as pool:
        futures = {name: (root / f"{name}-whole", root / f"{name}-split",
                          pool.submit(_train, root / f"{name}-whole", launcher, epochs),
                          pool.submit(_segments, root / f"{name}-split", launcher, epochs, budgets))
                   for name, (launcher, epochs, budgets) in SPLITS.items()}
        return {name: {"whole": (whole_dir, whole.result()), "split": (split_dir, split.result())}
                for name, (whole_dir, split_dir, whole, split) in futures.items()}


def test_a_segment_stops_at_its_budget_with_a_checkpoint_and_exit_0(split_runs):
    _, segments = split_runs["one process"]["split"]
    first, second, _ = segments
    assert first["proc"].returncode == 0, first["proc"].stdout + first["proc"].stderr
    assert [m["step"] for m in first["metrics"]] == [0]
    assert first["checkpoints"] == ["epoch-0000.pt"]
    # The rung's value is the objective so far: the budget's last epoch, in result.json.
    last = first["metrics"][-1]
    assert first["result"] == {"val_acc": last["val_acc"], "val_loss": last["val_loss"],
                               "best_val_acc": last["val_acc"]}
    assert "budget of 1 epoch reached" in first["proc"].stdout
    # The promoted segment resumed from that checkpoint and ran epochs 1 and 2 only.
    assert second["proc"].returncode == 0, second["proc"].stdout + second["proc"].stderr
    assert "resuming from epoch-0000.pt: epoch 1" in second["proc"].stdout
    assert "epoch 1/9" not in second["proc"].stdout
    assert [m["step"] for m in second["metrics"]] == [0, 1, 2]
    assert second["checkpoints"] == [f"epoch-{e:04d}.pt" for e in range(3)]
    assert second["result"]["val_acc"] == second["metrics"][-1]["val_acc"]


@pytest.mark.parametrize("launcher", SPLITS)
def test_segments_end_bit_for_bit_as_an_uninterrupted_run(split_runs, launcher):
    _, epochs, budgets = SPLITS[launcher]
    whole_dir, whole = split_runs[launcher]["whole"]
    split_dir, segments = split_runs[launcher]["split"]
    assert whole.returncode == 0, whole.stdout + whole.stderr
    for seg in segments:
        assert seg["proc"].returncode == 0, seg["proc"].stdout + seg["proc"].stderr
    # Each segment ran from the previous budget up to its own, and no further.
    reported = [len(seg["metrics"]) for seg in segments]
    assert reported == list(budgets)
    got, want = _metrics(split_dir), _metrics(whole_dir)
    assert [m["step"] for m in got] == list(range(epochs))
    assert _without_time(got) == _without_time(want)  # every epoch, bit for bit
    assert segments[-1]["result"] == json.loads((whole_dir / "result.json").read_text())


@pytest.mark.parametrize("budget", ["0", "two"])
def test_a_budget_that_is_not_a_positive_number_is_refused(tmp_path, budget):
    env = {**_trial_env(tmp_path), "HPSEARCH_BUDGET": budget}
    proc = subprocess.run([sys.executable, str(TRAIN), "--device", "cpu"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith("train.py: error: HPSEARCH_BUDGET must be "), proc.stderr
    assert budget in proc.stderr
    # nothing trained, reported or saved (first_call.1: when its code first called
    # hpsearch.trial, the start-up mark of issue 38 item 11)
    assert [p.name for p in tmp_path.iterdir()] in ([], ["first_call.1"])


def _warm_promotion_search(cli, name: str, script: str, epochs: int, extra: str = ""):
    """Submit a grid of 3 lr values, ASHA in promotion mode up to `epochs`, segments forked
    warm; returns the store's trials, in order."""
    spec = cli.write_spec(f"""
        name: {name}
        command: >-
          {{python}} {script} --lr {{lr}} --width 32 --batch-size 64 --optimizer adam
          --seed 3 --device cpu --epochs {epochs}
        search:
          strategy: grid
          parallel: 1
          space: {{lr: {{choices: [0.01, 0.00001, 0.00002]}}}}
          pruner: {{type: asha, mode: promotion, min_resource: 1, reduction_factor: 3,
                   max_resource: {epochs}}}
        objective: {{metric: val_acc, direction: maximize}}
        executor: {{type: local, warm: [numpy, torch, torch._dynamo, sklearn.datasets]}}
        env: {{OMP_NUM_THREADS: 1}}
        {extra}
        """)
    # a short folder: under xdist, tmp_path is too deep for a Unix socket's 107 bytes
    runtime = Path(tempfile.mkdtemp(prefix="hw", dir="/tmp"))
    try:
        proc = cli("submit", spec, env={"XDG_RUNTIME_DIR": str(runtime)}, timeout=600)
    finally:
        subprocess.run(["pkill", "-f", "--", f"--socket {runtime}/"], check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    from tests.helpers import read_store
    _, trials = read_store(cli.runs, name)
    assert [t.state for t in trials] == ["completed", "paused", "paused"], proc.stdout
    return trials


def test_a_promotion_search_through_hpsearch_ends_its_best_trial_bit_for_bit(
        cli, split_runs, tmp_path):
    """The whole path: the driver runs ASHA in promotion mode over the example (segments
    forked warm), and its fully trained trial's every epoch equals the uninterrupted run's."""
    trials = _warm_promotion_search(cli, "digits-promo", str(TRAIN), 9)
    best = cli.runs / "digits-promo" / "trials" / "00000"
    whole_dir, _ = split_runs["one process"]["whole"]
    assert _without_time(_metrics(best)) == _without_time(_metrics(whole_dir))
    assert trials[0].objective_values == [json.loads((whole_dir / "result.json")
                                                     .read_text())["val_acc"]]
    assert trials[0].attempt == 3  # segments of 1, 3 and 9 epochs


PROBE = """import os, runpy, sys
print(f"rank {os.environ['RANK']} torch_preloaded={'torch' in sys.modules}", flush=True)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_warm_two_rank_torchrun_segments_start_warm_and_end_bit_for_bit(cli, split_runs, tmp_path):
    """`launcher: torchrun` with `executor.warm` (issue 26 item 6): hpsearch.warm.ranks takes
    torchrun's place and each rank forks from the warm server, so a promoted segment's ranks
    find torch imported before the script runs (the first segment runs cold: it starts the
    server). The fully trained trial's every epoch equals the uninterrupted torchrun run's."""
    (tmp_path / "probe.py").write_text(PROBE)
    trials = _warm_promotion_search(cli, "digits-warm-ranks", f"{tmp_path / 'probe.py'} {TRAIN}",
                                    3, "resources: {tasks_per_node: 2}\n        launcher: torchrun")
    best = cli.runs / "digits-warm-ranks" / "trials" / "00000"
    whole_dir, _ = split_runs["two ranks"]["whole"]
    assert _without_time(_metrics(best)) == _without_time(_metrics(whole_dir))
    assert trials[0].attempt == 2  # segments of 1 and 3 epochs
    # every segment after the server started: both ranks forked warm
    def probes(trial_dir: Path) -> list[str]:
        return [line for log in sorted(trial_dir.glob("stdout*.log"))
                for line in log.read_text().splitlines() if "torch_preloaded=" in line]

    promoted = probes(best)
    assert len(promoted) == 4, promoted  # 2 segments x 2 ranks
    assert sorted(promoted[2:]) == ["rank 0 torch_preloaded=True",
                                    "rank 1 torch_preloaded=True"], promoted

"""`hpsearch scale` (docs/scaling.md#scaling-a-configuration): a real local search, then one
trial's configuration re-run at 1 and 2 ranks as a child experiment, the parent's store only
read; bad input exits 2 with the flag or key it is about; the example specs validate."""

from __future__ import annotations

import hashlib

import pytest

from hpsearch.driver.scale_spec import child_text, parent_of
from tests.conftest import EXAMPLES, Cli
from tests.helpers import read_store
from tests.test_digits_ddp import _require
from tests.test_parallel_efficiency import TESTS, VENV_PATH


def _digest(cli: Cli, name: str) -> str:
    return hashlib.sha256((cli.runs / name / "store.sqlite").read_bytes()).hexdigest()


def _files(cli: Cli) -> list:
    """What the runs dir holds, less the SQLite readers' shared-memory files."""
    return sorted(p for p in cli.runs.rglob("*") if not p.name.endswith(("-shm", "-wal")))


@pytest.fixture(scope="module")
def searched(tmp_path_factory) -> Cli:
    """One trial (lr 0.05, 1 rank) under torchrun: the parent to scale."""
    _require("torch", "pip install torch==2.13.0 (the CPU build)")
    cli = Cli(tmp_path_factory.mktemp("scale"))
    cli.cwd.mkdir(exist_ok=True)
    spec = cli.write_spec(f"""
        name: par
        command: >-
          {{python}} {TESTS / "scaling_trial.py"} --steps 6 --batch 64 --width 64 --lr {{lr}}
        search: {{strategy: grid, parallel: 1, space: {{lr: {{choices: [0.05]}}, ranks: 1}}}}
        objective: {{metric: loss}}
        resources: {{tasks_per_node: "{{ranks}}", cpus_per_task: 1}}
        launcher: torchrun
        executor: {{type: local, timeout: 5m}}
        env: {{OMP_NUM_THREADS: 1, PYTHONPATH: "{TESTS.parent}"}}
        """)
    cli("submit", spec, "--no-tui", "-q", env=VENV_PATH, timeout=120, check=0)
    return cli


@pytest.mark.slow
def test_scale_runs_a_child_at_each_size_and_prints_the_curve(searched):
    cli = searched
    before = _digest(cli, "par")
    out = cli("scale", "par", "--trial", "0", "--tasks", "1,2", "-q", "--no-tui",
              env=VENV_PATH, timeout=120, check=0).stdout
    exp, trials = read_store(cli.runs, "par-scale-0")
    assert parent_of(exp.spec_yaml) == ("par", 0)
    assert sorted((t.params["ranks"], t.params["lr"], t.state) for t in trials) == [
        (1, 0.05, "completed"), (2, 0.05, "completed")]
    assert _digest(cli, "par") == before  # the parent's store is only read
    lines = out.splitlines()
    head = next(line for line in lines if line.lstrip().startswith("tasks"))
    for column in ("speedup", "scaling eff.", "parallel eff.", "comm s/step",
                   "ring model s/step"):
        assert column in head
    two = next(line.split() for line in lines if line.split()[:4] == ["2", "1", "completed",
                                                                       "2"])
    assert float(two[7]) > 0 and two[8].endswith("%")  # speedup, scaling efficiency
    assert "a MODEL, not a measurement" in out and "S = " in out  # grad_bytes reported
    # Again: the child exists with the same spec; nothing re-runs, the curve is printed.
    again = cli("scale", "par", "--trial", "0", "--tasks", "2,1", "-q", "--no-tui",
                "--grad-bytes", "1e6", "--bandwidth", "1", env=VENV_PATH, timeout=60, check=0)
    assert "S = 1e+06 bytes, B = 1 Gbit/s" in again.stdout
    assert len(read_store(cli.runs, "par-scale-0")[1]) == 2


@pytest.mark.slow
def test_bad_input_exits_2_and_writes_nothing(searched):
    cli = searched
    listing = _files(cli)
    cases = [(("--trial", "9", "--tasks", "1,2"), "--trial 9: no trial 9 in experiment par"),
             (("--trial", "0", "--nodes", "1,2"), "--nodes 1,2: executor.type: the local"),
             (("--trial", "0", "--gpus", "1,2"), "executor.gpus: the local executor has 0"),
             (("--trial", "0", "--tasks", "0,1"), "expected sizes as whole numbers of 1"),
             (("--trial", "0", "--tasks", "1", "--grad-bytes", "-3"), "expected a positive"),
             (("--trial", "0", "--tasks", "1,3000000000"),
              "--tasks 1,3000000000: the spec of par-scale-0 cannot take it: search.space"),
             (("--trial", "0"), "one of the arguments --nodes --gpus --tasks is required")]
    for args, message in cases:
        proc = cli("scale", "par", *args, "-q", check=2)
        assert message in proc.stderr, (args, proc.stderr)
    assert _files(cli) == listing  # nothing written
    assert "no experiment 'nope'" in cli("scale", "nope", "--trial", "0", "--tasks", "1",
                                         check=2).stderr


def test_child_spec_fixes_params_and_adds_a_size_parameter(tmp_path):
    text = ("name: p\ncommand: run {lr}\nsearch: {strategy: tpe, trials: 9, "
            "space: {lr: {low: 0.1, high: 1}, nodes: {choices: [1]}}}\n"
            "objective: {metric: loss}\nresources: {nodes: 1}\n")
    paths = {"workdir": tmp_path, "runs_dir": tmp_path / "runs", "topology": None}
    child = child_text(text, "p", 3, {"lr": 0.5, "nodes": 1}, "nodes", [1, 2], paths)
    import yaml
    raw = yaml.safe_load(child)
    assert raw["name"] == "p-scale-3" and raw["resources"] == {"nodes": "{scale_nodes}"}
    assert raw["search"] == {"strategy": "grid", "parallel": 1, "space": {
        "lr": {"value": 0.5}, "nodes": {"value": 1}, "scale_nodes": {"choices": [1, 2]}}}
    assert raw["workdir"] == str(tmp_path) and parent_of(child) == ("p", 3)


@pytest.mark.parametrize("name", ["spec.yaml", "cpu.yaml"])
def test_the_scaling_examples_validate_and_plan(cli, name):
    spec = EXAMPLES / "scaling" / name
    cli("validate", spec, check=0)
    assert "--device" in cli("plan", spec, check=0).stdout


def test_scale_gpus_reruns_a_local_trial_on_one_and_two_gpu_slots(cli):
    """`hpsearch scale NAME --trial K --gpus 1,2` on the local executor: the child's trials
    get 1 and 2 of executor.gpus (placeholder ids here: no GPU in CI), each its own."""
    spec = cli.write_spec("""
        name: gpar
        command: >-
          echo "gpus=$CUDA_VISIBLE_DEVICES"; echo "@hpsearch step=0 loss={x}";
          echo '{"step": 0, "step_s": 0.1, "compute_s": 0.1}' > "$HPSEARCH_TRIAL_DIR/timing.0.jsonl"
        search: {strategy: grid, parallel: 2, space: {x: {choices: [1, 2]}}}
        objective: {metric: loss}
        resources: {gpus_per_node: 1}
        executor: {type: local, gpus: [a, b]}
        """)
    cli("submit", spec, "--no-tui", "-q", check=0)
    cli("scale", "gpar", "--trial", "1", "--gpus", "1,2", "-q", "--no-tui", check=0)
    _, trials = read_store(cli.runs, "gpar-scale-1")
    seen = {}
    for t in trials:
        out = (cli.runs / "gpar-scale-1" / "trials" / f"{t.id:05d}" / "stdout.log").read_text()
        seen[t.params["gpus"]] = (t.params["x"], t.state,
                                        out.split("gpus=")[1].split()[0].split(","))
    assert {n: (x, state, len(ids)) for n, (x, state, ids) in seen.items()} == {
        1: (2, "completed", 1), 2: (2, "completed", 2)}, seen
    assert set(seen[2][2]) == {"a", "b"}


def test_a_parent_whose_trials_report_no_timing_is_refused_before_any_size_runs(cli):
    """Issue 38 item 12: scale ran every size, then found no timing and printed dashes."""
    spec = cli.write_spec("""
        name: untimed
        command: 'echo "@hpsearch step=0 loss={x}"'
        search: {strategy: grid, parallel: 2, space: {x: {choices: [1, 2]}}}
        objective: {metric: loss}
        resources: {gpus_per_node: 1}
        executor: {type: local, gpus: [a, b]}
        """)
    cli("submit", spec, "--no-tui", "-q", check=0)
    listing = _files(cli)
    proc = cli("scale", "untimed", "--trial", "1", "--gpus", "1,2", "-q", "--no-tui", check=2)
    assert ("--gpus 1,2: no trial of untimed reported step timing" in proc.stderr
            and "docs/scaling.md#reporting-timing-from-a-trial" in proc.stderr), proc.stderr
    assert _files(cli) == listing and not (cli.runs / "untimed-scale-1").exists()

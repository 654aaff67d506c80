"""Snakemake pipelines on the local executor, with real snakemake: the top-level Snakefile
(digits: prepare, search, retrain, evaluate, report) and the module example of
docs/snakemake.md (failure, interruption and resume).

Needs the `pipeline` extra (snakemake); without it these tests skip and say why (under
CI=true they fail instead).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.helpers import read_store

SNAKEMAKE = shutil.which("snakemake", path=str(Path(sys.executable).parent))


@pytest.fixture(autouse=True, scope="module")
def snakemake_installed() -> None:
    if SNAKEMAKE is None:
        reason = "snakemake is not installed; scripts/setup.sh test,gp,pipeline installs it"
        if os.environ.get("CI"):
            pytest.fail(f"CI is set, so the Snakemake tests must run, but: {reason}",
                        pytrace=False)
        pytest.skip(reason)


def snakemake(workdir: Path, *args: str, env: dict | None = None,
              timeout: float = 300, venv_on_path: bool = True) -> subprocess.CompletedProcess:
    """`snakemake -c1 ARGS` in workdir, with this venv's bin first on PATH (hpsearch), or
    (venv_on_path=False) this venv's snakemake by its path with the venv not on PATH at all,
    as `.venv/bin/snakemake -c1` runs without an activated virtualenv."""
    return subprocess.run([SNAKEMAKE, "-c1", *args], cwd=workdir, env=_env(env, venv_on_path),
                          capture_output=True, text=True, timeout=timeout)


def _env(extra: dict | None = None, venv_on_path: bool = True) -> dict:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **(extra or {})}
    venv = str(Path(sys.executable).parent)
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and p != venv]
    env["PATH"] = os.pathsep.join(([venv] if venv_on_path else []) + path)
    env.pop("HPSEARCH_RUNS_DIR", None)
    env.pop("HPSEARCH_FAULT", None)
    return env


def doc_example(name: str) -> str:
    """The code block under `<!-- example: NAME -->` in docs/snakemake.md."""
    text = (ROOT / "docs" / "snakemake.md").read_text()
    match = re.search(rf"<!-- example: {re.escape(name)} -->\n```\w+\n(.*?)```", text, re.S)
    assert match, f"docs/snakemake.md has no example {name}"
    return match.group(1)


@pytest.fixture
def module_pipeline(tmp_path: Path) -> Path:
    """The docs' module example in a folder of its own, with hpsearch's workflows/ beside."""
    (tmp_path / "Snakefile").write_text(doc_example("Snakefile"))
    (tmp_path / "search.yaml").write_text(doc_example("search.yaml"))
    (tmp_path / "workflows").symlink_to(ROOT / "workflows")
    return tmp_path


@pytest.mark.slow
def test_digits_pipeline_runs_end_to_end_then_has_nothing_to_do(tmp_path):
    spec = tmp_path / "pipeline.yaml"  # the example's spec, in one wave of 2 trials (its 4
    # in 2 waves took 52-63 s; the pipeline's rules and what they pass on are the point here)
    spec.write_text((ROOT / "examples" / "digits_ddp" / "pipeline.yaml").read_text()
                    .replace("trials: 4", "trials: 2")
                    + f"workdir: {ROOT / 'examples' / 'digits_ddp'}\n")
    proc = snakemake(tmp_path, "-s", str(ROOT / "Snakefile"), "--config", f"spec={spec}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = tmp_path / "results"
    best = json.loads((results / "best_params.json").read_text())
    trials = json.loads((results / "trials.json").read_text())
    metrics = json.loads((results / "test_metrics.json").read_text())
    assert best["experiment"] == "digits-pipeline"
    assert [t["state"] for t in trials] == ["completed"] * 2
    assert best["values"]["val_acc"] == max(t["val_acc"] for t in trials)
    assert metrics["test_samples"] == 360 and sum(map(sum, metrics["confusion"])) == 360
    assert metrics["test_acc"] > 0.5  # a real model: chance is 0.1
    report = (results / "report.md").read_text()
    assert f"test accuracy {metrics['test_acc']:.4f}" in report
    assert f"trial {best['trial']}, val_acc = {best['values']['val_acc']:.4f}" in report
    again = snakemake(tmp_path, "-s", str(ROOT / "Snakefile"), "--config", f"spec={spec}")
    assert again.returncode == 0
    assert "Nothing to be done" in again.stdout + again.stderr


@pytest.mark.slow  # long end-to-end run, 10 to 200 s (docs/testing.md#tiers)
def test_module_example_from_the_docs_runs_without_an_activated_venv(module_pipeline):
    assert shutil.which("hpsearch", path=_env(venv_on_path=False)["PATH"]) is None
    proc = snakemake(module_pipeline, venv_on_path=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    best = json.loads((module_pipeline / "results" / "best.json").read_text())
    assert best["experiment"] == "target" and set(best["params"]) == {"x", "y"}
    p = best["params"]
    assert best["values"]["loss"] == pytest.approx((p["x"] - 1.5) ** 2 + (p["y"] + 2) ** 2)
    chosen = (module_pipeline / "results" / "chosen.txt").read_text()
    assert chosen == f"x={p['x']:.3f} y={p['y']:.3f}\n"


@pytest.mark.slow  # a Snakemake run: 25 s in the quick tier under load (docs/testing.md#tiers)
def test_failed_search_fails_its_rule_leaving_no_output_and_the_reason_in_its_log(
        module_pipeline):
    spec = module_pipeline / "search.yaml"
    spec.write_text(spec.read_text().replace(
        "awk ", 'echo "no target in $HPSEARCH_INPUT_DATA" >&2; exit 3; awk ', 1))
    proc = snakemake(module_pipeline)
    assert proc.returncode != 0
    assert "Error in rule search" in proc.stderr
    assert not (module_pipeline / "results").exists()
    log = (module_pipeline / "logs" / "search.log").read_text()
    assert "not writing results/best.json: experiment target" in log
    data = module_pipeline / "data" / "target.txt"
    assert "trial 0 failed: exit code 3" in log and f"no target in {data}" in log


@pytest.mark.slow
def test_interrupted_search_rule_resumes_the_same_experiment(module_pipeline):
    spec = module_pipeline / "search.yaml"
    # slow until the interrupt (so that it finds trials in flight), quick after it
    resumed = module_pipeline / "resumed"
    spec.write_text(spec.read_text().replace("awk ", f"test -e '{resumed}' || sleep 2; awk ", 1))
    runs = module_pipeline / "hpsearch-runs"
    interrupt_after_completed([SNAKEMAKE, "-c1"], module_pipeline, _env(), runs, "target", 2)
    resumed.touch()
    assert not (module_pipeline / "results" / "best.json").exists()
    exp_before, before = read_store(runs, "target")
    done_before = {t.id: t for t in before if t.state == "completed"}
    assert 2 <= len(done_before) < 6 and exp_before.status != "completed"

    again = snakemake(module_pipeline)
    log = (module_pipeline / "logs" / "search.log").read_text()
    assert again.returncode == 0, again.stderr[-2000:] + "\nsearch.log:\n" + log[-3000:]
    exp, trials = read_store(runs, "target")
    assert exp.created == exp_before.created  # the same experiment, not a new one
    assert [t.state for t in trials] == ["completed"] * 6
    for t in trials:  # what had finished was kept, not run again
        if t.id in done_before:
            assert (t.attempt, t.started, t.finished) == (
                1, done_before[t.id].started, done_before[t.id].finished)
    assert not any(f"trial {i} started" in log for i in done_before)
    best = json.loads((module_pipeline / "results" / "best.json").read_text())
    assert best["values"]["loss"] == min(t.objective_values[0] for t in trials)


def interrupt_after_completed(argv: list[str], cwd: Path, env: dict, runs: Path, name: str,
                              count: int, timeout: float = 300) -> None:
    """Run snakemake until `count` trials of experiment `name` completed and the trials in
    flight have started (a pid or job id), then press Ctrl-C (SIGINT to its whole process
    group, as a terminal does); it must fail."""
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        _wait_for_completed(runs, name, count, timeout)
        os.killpg(proc.pid, signal.SIGINT)
        out = proc.communicate(timeout=180)[0]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode != 0, out


def _wait_for_completed(runs: Path, name: str, count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            trials = read_store(runs, name)[1]
            if sum(t.state == "completed" for t in trials) >= count and all(
                    t.pid or t.job_id for t in trials if t.state == "running"):
                return
        except Exception:  # noqa: BLE001 - the store is not there yet
            pass
        time.sleep(0.2)
    pytest.fail(f"{name}: fewer than {count} trials completed after {timeout}s")

"""The Snakemake pipelines on the real emulated Slurm cluster: hpsearch's Slurm executor runs
the search's trials, snakemake-executor-plugin-slurm every other rule.

One adaptation to the emulated cluster: its hosts have no /etc/slurm/slurm.conf, only
SLURM_CONF, and the plugin's job step (snakemake-executor-plugin-slurm-jobstep) drops every
SLURM_* variable before it calls `srun` inside the job. A two-line `srun` first on PATH puts
SLURM_CONF back; a real cluster has the file (or configless slurmd) and needs nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.helpers import read_store
from tests.test_snakemake import SNAKEMAKE, _env, doc_example, interrupt_after_completed

pytestmark = pytest.mark.skipif(SNAKEMAKE is None, reason="snakemake is not installed; "
                                "scripts/setup.sh test,gp,pipeline installs it")

# Jobs land in the shared cluster's accounting: names unique per test session.
RUN = uuid.uuid4().hex[:6]
PLUGIN = ["--executor", "slurm", "-j", "4", "--default-resources", "slurm_partition=debug",
          "slurm_account=root", "runtime=10", "--slurm-init-seconds-before-status-checks",
          "1", "--seconds-between-status-checks", "2"]
# The plugin checks its jobs' states first after --slurm-init-seconds-before-status-checks
# (I), then 10 s later each time while none ended (I, 2I + 10, 3I + 30 s), and once a job
# ended, I s later again; at its end it sleeps I more. With I = 1 the digits pipeline's
# retrain, evaluate and report jobs (13-21 s each) are seen ended at 33 s. Tried on
# 2026-11-30, I = 22: each seen at 22 s, but the final sleep took 22 s: 143.9 s against
# 143.2 s with I = 1, back to back.


def _slurm_env(cluster, tmp: Path) -> dict:
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    srun = bin_dir / "srun"
    srun.write_text(f"#!/bin/sh\nexec env SLURM_CONF='{cluster.conf}' "
                    f"'{shutil.which('srun', path=cluster.env.get('PATH'))}' \"$@\"\n")
    srun.chmod(0o755)
    env = _env(cluster.env)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    return env


def _snakemake(workdir: Path, env: dict, *args: str, timeout: float = 600):
    return subprocess.run([SNAKEMAKE, *PLUGIN, *args], cwd=workdir, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_digits_pipeline_on_slurm_then_nothing_to_do(tmp_path, slurm_cluster):
    spec = tmp_path / "pipeline.yaml"  # the example's spec under a name of this session
    spec.write_text((ROOT / "examples" / "digits_ddp" / "pipeline.yaml").read_text()
                    .replace("name: digits-pipeline", f"name: digits-pipeline-{RUN}")
                    # one wave of 2 Slurm trials (the example's 4 in 2 waves took ~30 s
                    # more of the suite; the pipeline's rules are the point here)
                    .replace("trials: 4", "trials: 2")
                    + f"workdir: {ROOT / 'examples' / 'digits_ddp'}\n")
    env = _slurm_env(slurm_cluster, tmp_path)
    config = ["-s", str(ROOT / "Snakefile"), "--config", f"spec={spec}", "executor=slurm"]
    proc = _snakemake(tmp_path, env, *config)
    assert proc.returncode == 0, proc.stderr[-4000:]
    for rule in ("prepare", "retrain", "evaluate", "report"):  # the plugin's jobs
        assert f"rule {rule}:" in proc.stderr and f"rule_{rule}/" in proc.stderr
    assert "localrule search:" in proc.stderr
    _, trials = read_store(tmp_path / "hpsearch-runs", f"digits-pipeline-{RUN}")
    assert [t.state for t in trials] == ["completed"] * 2 and all(t.job_id for t in trials)
    metrics = json.loads((tmp_path / "results" / "test_metrics.json").read_text())
    assert metrics["test_samples"] == 360 and metrics["test_acc"] > 0.5
    assert "test accuracy" in (tmp_path / "results" / "report.md").read_text()
    again = _snakemake(tmp_path, env, *config)
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_interrupted_slurm_search_rule_resumes_the_same_experiment(tmp_path, slurm_cluster):
    name = f"target-{RUN}"
    (tmp_path / "Snakefile").write_text(doc_example("Snakefile"))
    (tmp_path / "search.yaml").write_text(
        doc_example("search.yaml").replace("name: target", f"name: {name}")
        # slow until the interrupt (so that it finds trials in flight), quick after it
        .replace("awk ", f"test -e '{tmp_path}/resumed' || sleep 4; awk ", 1)
        + "executor: {type: slurm, poll_interval: 0.5}\n")
    (tmp_path / "workflows").symlink_to(ROOT / "workflows")
    env, runs = _slurm_env(slurm_cluster, tmp_path), tmp_path / "hpsearch-runs"
    interrupt_after_completed([SNAKEMAKE, *PLUGIN], tmp_path, env, runs, name, 2)
    (tmp_path / "resumed").touch()
    exp_before, before = read_store(runs, name)
    done_before = {t.id: t for t in before if t.state == "completed"}
    assert 2 <= len(done_before) < 6 and exp_before.status != "completed"
    assert not (tmp_path / "results" / "best.json").exists()
    jobs = [t.job_id for t in before if t.job_id]
    queued = slurm_cluster.run("squeue", "-h", "-o", "%i", "-j", ",".join(jobs),
                               check=False).stdout.split()
    assert queued == []  # the interrupted search left no trial running

    again = _snakemake(tmp_path, env)
    assert again.returncode == 0, again.stderr[-4000:]
    exp, trials = read_store(runs, name)
    assert exp.created == exp_before.created
    assert [t.state for t in trials] == ["completed"] * 6
    for t in trials:
        if t.id in done_before:
            assert (t.attempt, t.job_id, t.finished) == (
                1, done_before[t.id].job_id, done_before[t.id].finished)
    assert json.loads((tmp_path / "results" / "best.json").read_text())["experiment"] == name

"""`hpsearch mlflow NAME --tracking-uri URI [--follow]`: the experiment as an MLflow
experiment, a run per trial, that MLflow's own readers (`mlflow.search_runs`,
`MlflowClient.get_metric_history`) read back with the store's params, metrics by step and
states; idempotent; read-only on the store; --follow mirrors a running search; MLflow's UI
(a real `mlflow server`, browsed in headless Chromium) lists the runs with their params;
without mlflow, a clear message and exit 2."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from hpsearch.cli.main import main
from hpsearch.interop.mlflow_mirror import run_status
from hpsearch.store.runs import STORE_FILE
from tests.helpers import read_store, store_curves
from tests.interop_search import run_search, write_spec
from tests.test_dashboard import _browse, _free_port, _text

mlflow = pytest.importorskip("mlflow")
from mlflow.tracking import MlflowClient  # noqa: E402

STATUS = {"completed": "FINISHED", "failed": "FAILED", "pruned": "KILLED"}
QUIET = {"MLFLOW_DISABLE_TELEMETRY": "true"}  # no phoning home from tests


@pytest.fixture(autouse=True)
def _no_telemetry(monkeypatch):
    for key, value in QUIET.items():
        monkeypatch.setenv(key, value)


@pytest.fixture(scope="module")
def empty_db(tmp_path_factory) -> Path:
    """An empty MLflow sqlite store, made once: creating MLflow's schema (its migrations)
    takes seconds, so each test copies this one."""
    path = tmp_path_factory.mktemp("mlflow") / "empty.db"
    MlflowClient(tracking_uri=f"sqlite:///{path}").search_experiments()
    return path


def _db(cli, empty_db: Path) -> str:
    shutil.copy(empty_db, cli.cwd / "mlflow.db")
    return f"sqlite:///{cli.cwd / 'mlflow.db'}"


def _mirror(cli, capsys, *args: str) -> str:
    """`hpsearch mlflow interop ARGS` in this process (MLflow imported once, not per call);
    its stdout."""
    capsys.readouterr()
    assert main(["mlflow", "interop", "--runs-dir", str(cli.runs), *args]) == 0
    return capsys.readouterr().out


_store = store_curves


def _assert_mlflow_is_the_store(uri: str, runs: Path, name: str, experiment: str = "interop"):
    trials, curves = _store(runs, name)
    mlflow.set_tracking_uri(uri)
    try:
        frame = mlflow.search_runs(experiment_names=[experiment])
    finally:
        mlflow.set_tracking_uri(None)
    assert sorted(frame["tags.hpsearch_trial"].astype(int)) == [t.id for t in trials]
    client = MlflowClient(tracking_uri=uri)
    for t in trials:
        row = frame[frame["tags.hpsearch_trial"] == str(t.id)].iloc[0]
        assert row["tags.mlflow.runName"] == f"trial-{t.id:05d}"  # sorts as numbers
        assert {k: row[f"params.{k}"] for k in t.params} == {k: str(v) for k, v
                                                             in t.params.items()}
        assert row["status"] == STATUS[t.state]
        assert row["tags.hpsearch_state"] == t.state
        for metric in ("loss", "acc"):
            history = client.get_metric_history(row["run_id"], metric)
            assert [(m.step, m.value) for m in sorted(history, key=lambda m: m.step)] == \
                sorted(curves[t.id][metric].items())  # every step, once
            assert row[f"metrics.{metric}"] == curves[t.id][metric][max(curves[t.id][metric])]
    assert {t.state for t in trials} == {"completed", "failed", "pruned"}


def _fingerprint(path: Path):
    info = path.stat()
    return hashlib.sha256(path.read_bytes()).hexdigest(), info.st_mtime_ns, info.st_size


@pytest.mark.slow  # 3.1 s in the quick tier (2026-11-30): over its 3 s rule
def test_a_finished_search_mirrors_once_and_reads_back(cli, capsys, empty_db):
    run_search(cli)
    store_file = cli.runs / "interop" / STORE_FILE
    before = _fingerprint(store_file)
    uri = _db(cli, empty_db)
    first = _mirror(cli, capsys, "--tracking-uri", uri)
    assert "interop: 8 runs in MLflow experiment 'interop'" in first
    assert "(8 added, 0 updated" in first, first
    again = _mirror(cli, capsys, "--tracking-uri", uri)
    assert "(0 added, 0 updated, 0 points)" in again, again
    assert _fingerprint(store_file) == before  # the store is only read
    _assert_mlflow_is_the_store(uri, cli.runs, "interop")
    client = MlflowClient(tracking_uri=uri)
    [experiment] = [e for e in client.search_experiments() if e.name == "interop"]
    assert experiment.tags["hpsearch_experiment"] == "interop"
    # another MLflow experiment name: its own runs
    _mirror(cli, capsys, "--tracking-uri", uri, "--experiment-name", "other")
    _assert_mlflow_is_the_store(uri, cli.runs, "interop", experiment="other")


@pytest.mark.slow
def test_follow_into_a_file_store_until_the_driver_ends(cli, monkeypatch):
    """A folder as --tracking-uri: MLflow's file store (which MLflow 3 refuses unless
    MLFLOW_ALLOW_FILE_STORE=true: hpsearch sets it for itself, the reader here must too)."""
    spec = write_spec(cli, sleep=1.0, parallel=2)
    driver = cli.popen("submit", spec)
    try:
        deadline = time.time() + 30
        while time.time() < deadline and not any(
                t.state == "running" for t in _trials(cli)):
            time.sleep(0.05)
        follow = cli("mlflow", "interop", "--tracking-uri", "mlruns", "--follow",
                     "--interval", "0.2", env=QUIET, check=0)
    finally:
        driver.wait(timeout=60)
    assert driver.returncode == 1  # some trials failed, by design
    lines = follow.stdout.splitlines()
    assert lines[-1] == "interop: its driver is not running; the mirror is final", lines
    assert any(" updated" in line and " 0 updated" not in line for line in lines), lines
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    _assert_mlflow_is_the_store((cli.cwd / "mlruns").as_uri(), cli.runs, "interop")


def _trials(cli):
    try:
        return read_store(cli.runs, "interop")[1]
    except Exception:  # the store is not created yet
        return []


def _get(base: str, path: str, body: dict | None = None):
    request = urllib.request.Request(base + path, json.dumps(body).encode() if body else None,
                                     {"Content-Type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # no http_proxy
    with opener.open(request, timeout=30) as reply:
        return reply.read().decode()


@pytest.mark.slow
def test_mlflows_ui_lists_the_runs_with_their_params(cli, capsys, empty_db):
    """A real `mlflow server` on the mirror: its REST API has the 8 runs; in headless
    Chromium (MLflow's UI is a JS app, and --dump-dom gives the page as its scripts left it)
    the experiment's runs page lists trial-00000 ... trial-00007, and a run's page shows its params
    and the hpsearch_state tag."""
    run_search(cli)
    uri = _db(cli, empty_db)
    _mirror(cli, capsys, "--tracking-uri", uri)
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    program = Path(sys.executable).parent / "mlflow"
    server = subprocess.Popen([str(program), "server", "--backend-store-uri", uri,
                               "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=cli.cwd,
                              env={**os.environ, **QUIET, "HOME": str(cli.cwd)})
    try:
        deadline = time.monotonic() + 90
        while True:  # the server answers once its worker has started
            try:
                assert _get(base, "/health") == "OK"
                break
            except OSError:
                assert server.poll() is None, server.stderr.read()
                assert time.monotonic() < deadline, "mlflow server did not start"
                time.sleep(0.3)
        experiment = json.loads(_get(
            base, "/api/2.0/mlflow/experiments/get-by-name?experiment_name=interop"))
        experiment_id = experiment["experiment"]["experiment_id"]
        found = json.loads(_get(base, "/api/2.0/mlflow/runs/search",
                                {"experiment_ids": [experiment_id]}))["runs"]
        names = {r["info"]["run_name"]: r for r in found}
        assert sorted(names) == [f"trial-{i:05d}" for i in range(8)]

        page = _text(_browse(cli, f"{base}/#/experiments/{experiment_id}/runs",
                             "--dump-dom"))
        assert "8 matching runs" in page, page
        for i in range(8):
            assert f"trial-{i:05d}" in page, page
        run = names["trial-00000"]["info"]["run_id"]  # x=1, lr=0.01: completed
        page = _text(_browse(cli, f"{base}/#/experiments/{experiment_id}/runs/{run}",
                             "--dump-dom"))
        for shown in ("trial-00000", "Parameters", "lr", "0.01", "hpsearch_state", "completed",
                      "Finished"):
            assert shown in page, (shown, page)
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_run_status_of_each_state():
    assert [run_status(s, True) for s in ("completed", "failed", "cancelled", "pruned",
                                          "running", "queued", "submitting", "paused")] == \
        ["FINISHED", "FAILED", "KILLED", "KILLED", "RUNNING", "SCHEDULED", "SCHEDULED",
         "RUNNING"]
    assert run_status("paused", False) == "KILLED"


@pytest.mark.slow  # over 5 s in the quick tier on 2026-11-28 (docs/testing.md#tiers)
def test_without_mlflow_it_says_what_to_install_and_bad_uris(cli):
    run_search(cli)
    shadow = cli.cwd / "shadow" / "mlflow"  # an mlflow that fails to import
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError(\"No module named 'mlflow'\")\n")
    path = os.pathsep.join(filter(None, [str(shadow.parent), os.environ.get("PYTHONPATH")]))
    proc = cli("mlflow", "interop", "--tracking-uri", "sqlite:///m.db",
               env={"PYTHONPATH": path}, check=2)
    assert "pip install 'hpsearch[mlflow]'" in proc.stderr and proc.stdout == ""
    assert not (cli.cwd / "m.db").exists()
    proc = cli("mlflow", "interop", "--tracking-uri", "no/such/dir/mlruns", env=QUIET,
               check=2)
    assert "does not exist" in proc.stderr
    proc = cli("mlflow", "interop", "--tracking-uri", "nosuchscheme://x", env=QUIET, check=2)
    assert "MLflow cannot open it" in proc.stderr

"""`hpsearch tensorboard NAME --logdir DIR [--follow]`: the experiment as a TensorBoard log
directory that TensorBoard's own readers read back with the store's metrics by step, each
trial's parameters and end state for the HParams dashboard (the event accumulator, and a real
`tensorboard` server's HParams API); idempotent; read-only on the store; --follow mirrors a
running search; without tensorboard, a clear message and exit 2."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from hpsearch.store.runs import STORE_FILE
from tests.helpers import read_store, store_curves
from tests.interop_search import run_search, write_spec

ea = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2  # noqa: E402
from tensorboard.util import tensor_util  # noqa: E402

STATUS = {"completed": "STATUS_SUCCESS", "failed": "STATUS_FAILURE",
          "pruned": "STATUS_FAILURE"}


_store = store_curves


def _run(logdir: Path, trial: int):
    return ea.EventAccumulator(str(logdir / f"{trial:05d}"),  # named as the trial dir
                               size_guidance={ea.TENSORS: 0}).Reload()


def _hparams(acc) -> dict:
    """tag -> HParamsPluginData of the run's HParams summaries."""
    return {tag: plugin_data_pb2.HParamsPluginData.FromString(content)
            for tag, content in acc.PluginTagToContent(metadata.PLUGIN_NAME).items()}


def _assert_logdir_is_the_store(logdir: Path, runs: Path, name: str) -> None:
    trials, curves = _store(runs, name)
    assert sorted(p.name for p in logdir.iterdir() if p.is_dir()) == [f"{t.id:05d}" for t in trials]
    for t in trials:
        acc = _run(logdir, t.id)
        for metric in ("loss", "acc"):
            points = [(e.step, float(tensor_util.make_ndarray(e.tensor_proto)))
                      for e in acc.Tensors(metric)]
            assert [s for s, _ in points] == sorted(curves[t.id][metric])  # each step once
            assert [v for _, v in points] == pytest.approx(
                [v for _, v in sorted(curves[t.id][metric].items())], rel=1e-6)  # float32
        data = _hparams(acc)
        start = data[metadata.SESSION_START_INFO_TAG].session_start_info
        assert start.group_name == f"{t.id:05d}"
        assert {k: v.number_value for k, v in start.hparams.items() if k == "lr"} == \
            {"lr": t.params["lr"]}
        # integer choices (x; steps, fixed) as text: TensorBoard shows 3 as 3.0000
        assert {k: start.hparams[k].string_value for k in ("x", "steps")} == \
            {k: str(t.params[k]) for k in ("x", "steps")}
        end = data[metadata.SESSION_END_INFO_TAG].session_end_info
        assert api_pb2.Status.Name(end.status) == STATUS[t.state]
    assert {t.state for t in trials} == {"completed", "failed", "pruned"}
    root = ea.EventAccumulator(str(logdir)).Reload()
    config = metadata.parse_experiment_plugin_data(
        root.PluginTagToContent(metadata.PLUGIN_NAME)[metadata.EXPERIMENT_TAG])
    assert [h.name for h in config.hparam_infos] == ["x", "lr", "steps"]
    assert [v.string_value for v in config.hparam_infos[0].domain_discrete.values] == \
        ["1", "2", "3", "9"]
    assert (config.hparam_infos[1].domain_interval.min_value,
            config.hparam_infos[1].domain_interval.max_value) == (0.01, 0.02)
    assert [m.name.tag for m in config.metric_infos] == ["loss", "acc", "node_hours",
                                                        "gpu_hours", "wall_s"]


def _fingerprint(path: Path):
    info = path.stat()
    return hashlib.sha256(path.read_bytes()).hexdigest(), info.st_mtime_ns, info.st_size


@pytest.mark.slow  # 3.5 s in the quick tier (2026-11-30): over its 3 s rule
def test_a_finished_search_mirrors_once_and_reads_back(cli):
    run_search(cli)
    store_file = cli.runs / "interop" / STORE_FILE
    before = _fingerprint(store_file)
    logdir = cli.cwd / "tb"
    first = cli("tensorboard", "interop", "--logdir", "tb", check=0)
    points = sum(len(steps) for curve in _store(cli.runs, "interop")[1].values()
                 for steps in curve.values()) + 8 * 3  # and node_hours, gpu_hours, wall_s
    assert first.stdout == \
        f"interop: 8 runs in {logdir} (8 added, 0 updated, {points} points)\n"
    files = sorted(p for p in logdir.rglob("*") if p.is_file())
    sizes = [p.stat().st_size for p in files]
    again = cli("tensorboard", "interop", "--logdir", "tb", check=0)
    assert "(0 added, 0 updated, 0 points)" in again.stdout, again.stdout
    assert [p.stat().st_size for p in files] == sizes  # nothing written twice
    assert sorted(p for p in logdir.rglob("*") if p.is_file()) == files
    assert _fingerprint(store_file) == before  # the store is only read
    _assert_logdir_is_the_store(logdir, cli.runs, "interop")
    # private, as every file hpsearch writes: the folders 0700, the files 0600
    assert {stat.S_IMODE(p.stat().st_mode) for p in [logdir, *logdir.iterdir()]
            if p.is_dir()} == {0o700}
    assert {stat.S_IMODE(p.stat().st_mode) for p in files} == {0o600}
    state = json.loads((logdir / ".hpsearch-tensorboard.json").read_text())
    assert state["trials"]["0"]["steps"] == {"loss": 2, "acc": 2}


@pytest.mark.slow
def test_follow_mirrors_a_running_search_until_its_driver_ends(cli):
    # as tests/test_optuna_mirror.py: reports 1 s apart, 2 trials at a time (about 12 s),
    # --follow started once a trial runs, so that it sees trials running and then ending
    spec = write_spec(cli, sleep=1.0, parallel=2)
    driver = cli.popen("submit", spec)
    try:
        deadline = time.time() + 30
        while time.time() < deadline and not any(
                t.state == "running" for t in _trials(cli)):
            time.sleep(0.05)
        follow = cli("tensorboard", "interop", "--logdir", "tb", "--follow", "--interval",
                     "0.2", check=0)
    finally:
        driver.wait(timeout=60)
    assert driver.returncode == 1  # some trials failed, by design
    lines = follow.stdout.splitlines()
    assert lines[-1] == "interop: its driver is not running; the mirror is final"
    # runs written while their trials ran, and appended to later
    assert any(" updated" in line and " 0 updated" not in line for line in lines), lines
    _assert_logdir_is_the_store(cli.cwd / "tb", cli.runs, "interop")


def _trials(cli):
    try:
        return read_store(cli.runs, "interop")[1]
    except Exception:  # the store is not created yet
        return []


@pytest.mark.slow
def test_tensorboards_hparams_dashboard_lists_every_trial(cli):
    """A real `tensorboard --logdir` server: its HParams plugin's session groups (what the
    HPARAMS tab's table shows) are the 8 trials with their parameters, status and last
    loss."""
    run_search(cli)
    cli("tensorboard", "interop", "--logdir", "tb", check=0)
    trials, curves = _store(cli.runs, "interop")
    program = Path(sys.executable).parent / "tensorboard"
    server = subprocess.Popen([str(program), "--logdir", str(cli.cwd / "tb"), "--host",
                               "127.0.0.1", "--port", "0"], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, cwd=cli.cwd,
                              env={**os.environ, "HOME": str(cli.cwd)})
    try:
        base = None
        deadline = time.monotonic() + 60
        while base is None and time.monotonic() < deadline:  # "TensorBoard 2.x at http://..."
            line = server.stdout.readline()
            assert line, "tensorboard ended before it listened"
            if " at http://" in line:
                base = line.split(" at ")[1].split()[0].rstrip("/")
        assert base
        query = {"experimentName": "", "allowedStatuses": [
            "STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE", "STATUS_RUNNING"],
            "colParams": [], "startIndex": 0, "sliceSize": 100}
        groups: list = []
        while len(groups) < 8 and time.monotonic() < deadline:  # its first load takes a while
            request = urllib.request.Request(
                base + "/data/plugin/hparams/session_groups", json.dumps(query).encode(),
                {"Content-Type": "application/json"})
            opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
            with opener.open(request, timeout=30) as reply:
                groups = json.load(reply).get("sessionGroups", [])
            time.sleep(0.3)
        shown = {int(g["name"]): g for g in groups}
        assert sorted(shown) == [t.id for t in trials]
        for t in trials:
            group = shown[t.id]
            assert group["hparams"] == {**t.params, "x": str(t.params["x"]),
                                        "steps": str(t.params["steps"])}
            assert group["sessions"][0]["status"] == STATUS[t.state]
            loss = {m["name"]["tag"]: m["value"] for m in group["metricValues"]}["loss"]
            assert loss == curves[t.id]["loss"][max(curves[t.id]["loss"])]
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_without_tensorboard_it_says_what_to_install(cli):
    run_search(cli)
    shadow = cli.cwd / "shadow" / "tensorboard"  # a tensorboard that fails to import
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError(\"No module named 'tensorboard'\")\n")
    path = os.pathsep.join(filter(None, [str(shadow.parent), os.environ.get("PYTHONPATH")]))
    proc = cli("tensorboard", "interop", "--logdir", "tb", env={"PYTHONPATH": path}, check=2)
    assert "pip install 'hpsearch[tensorboard]'" in proc.stderr and proc.stdout == ""
    assert not (cli.cwd / "tb").exists()


@pytest.mark.slow  # 3.1 s in the quick tier (2026-11-30): over its 3 s rule
def test_bad_logdirs_and_names(cli):
    run_search(cli)
    (cli.cwd / "file").write_text("")
    proc = cli("tensorboard", "interop", "--logdir", "file/tb", check=2)
    assert "a file is in the way" in proc.stderr
    proc = cli("tensorboard", "interop", "--logdir", "file", check=2)
    assert "is not a folder" in proc.stderr
    proc = cli("tensorboard", "nope", "--logdir", "tb", check=2)
    assert "no experiment 'nope'" in proc.stderr


def test_help_has_examples(cli):
    for command, flag in (("tensorboard", "--logdir"), ("mlflow", "--tracking-uri")):
        text = cli(command, "--help", check=0).stdout
        assert "examples:" in text and f"hpsearch {command} quadratic {flag}" in text
        assert f"pip install 'hpsearch[{command}]'" in text and "--follow" in text


@pytest.mark.parametrize("kind", ["fifo", "link", "garbage"])
def test_a_state_file_it_did_not_write_is_refused_not_followed_or_waited_on(cli, kind):
    """The log dir may be shared: a FIFO where the state file belongs must not hang the
    sync, a link is not followed, bytes that are not its state are exit 2."""
    run_search(cli)
    logdir = cli.cwd / "tb"
    logdir.mkdir()
    state = logdir / ".hpsearch-tensorboard.json"
    if kind == "fifo":
        os.mkfifo(state)
    elif kind == "link":
        (cli.cwd / "elsewhere.json").write_text('{"format": 1, "trials": {}}')
        state.symlink_to(cli.cwd / "elsewhere.json")
    else:
        state.write_bytes(b"\xff\xfe not json" + b"[" * 100000)
    proc = cli("tensorboard", "interop", "--logdir", "tb", check=2, timeout=60)
    assert ".hpsearch-tensorboard.json" in proc.stderr and "Traceback" not in proc.stderr


def test_the_documented_logdir_pattern_makes_its_parent_folders(cli):
    """Issue 38 item 10: `--logdir tb/NAME` in a folder without tb/ (before: exit 2,
    'folder tb does not exist')."""
    run_search(cli)
    proc = cli("tensorboard", "interop", "--logdir", "tb/interop", check=0)
    assert (cli.cwd / "tb" / "interop").is_dir(), proc.stderr

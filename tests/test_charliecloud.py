"""Real trials inside a charliecloud (ch-run) container.

The image: these machines reach package registries only, so nothing is pulled or built from a
Dockerfile. The test makes a skeleton root file system in a temporary folder (empty mount
points, the usr-merge links bin -> usr/bin ..., /etc stubs that ch-run binds over) and the spec
binds the host's /usr, this Python's install prefix, the virtual environment and the repository
(hpsearch is installed from it) into it. It takes milliseconds, and it is a real container:
ch-run enters new namespaces and pivots into the skeleton, so only the bound paths are there
(the host's /etc/debian_version, for one, is not). containers/README.md explains it, next to
how to build the real example image.

The trial's own directory and the workdir are bound by the runtime at the same path; the
trial reads its params and writes metrics.jsonl and result.json there through hpsearch.trial,
which proves the HPSEARCH_* variables reach it.

Needs ch-run (Debian: `apt-get install -y charliecloud-runtime`) and user namespaces; skipped
with the reason otherwise, and failed instead under CI=true, where it must run.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from hpsearch.launch import RankLayout, make_launcher, make_runtime
from hpsearch.spec.model import Container

ROOT = Path(__file__).resolve().parent.parent
MERGED_USR = ("bin", "sbin", "lib", "lib64")


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"charliecloud test cannot run under CI: {reason}", pytrace=False)
    pytest.skip(reason)


def _host_paths() -> list[str]:
    """What the trial needs from the host: /usr, the Python prefixes, the repository."""
    paths = ["/usr"]
    for p in (sys.base_prefix, sys.prefix, str(ROOT)):
        p = os.path.realpath(p)
        if not any(Path(p).is_relative_to(q) for q in paths):
            paths.append(p)
    return paths


def _skeleton(image: Path, mount_points: list[str]) -> None:
    for name in ("dev", "proc", "sys", "tmp", "home", "root", "mnt", "run", "etc", "usr"):
        (image / name).mkdir(parents=True, exist_ok=True)
    for name in MERGED_USR:
        host = Path("/") / name
        if host.is_symlink():
            (image / name).symlink_to(os.readlink(host))
        elif host.is_dir():
            mount_points.append(str(host))
    for name in ("passwd", "group", "hosts", "resolv.conf"):
        (image / "etc" / name).touch()
    for path in mount_points:  # ch-run 0.31 binds only onto directories that exist
        (image / path.lstrip("/")).mkdir(parents=True, exist_ok=True)


@pytest.fixture
def image(tmp_path):
    if shutil.which("ch-run") is None:
        _unavailable("ch-run not found: apt-get install -y charliecloud-runtime")
    binds = _host_paths()
    _skeleton(tmp_path / "image", binds)
    probe = subprocess.run(["ch-run", *[a for b in binds for a in ("-b", b)],
                            str(tmp_path / "image"), "--", "true"],
                           env={**os.environ, "USER": os.environ.get("USER", "root")},
                           capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        _unavailable(f"ch-run cannot start a container here: {probe.stderr.strip()}")
    return tmp_path / "image", tuple(binds)


TRIAL = r'''
import json, os, sys
from hpsearch import trial
p = trial.params()
seen = {"argv": sys.argv[1:], "params": p, "ch_running": "CH_RUNNING" in os.environ,
        "host_etc_visible": os.path.exists("/etc/debian_version"), "cwd": os.getcwd(),
        "rank": {n: os.environ.get(n) for n in ("RANK", "WORLD_SIZE", "LOCAL_RANK",
                 "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT")}}
if os.environ.get("WITH_DDP"):
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    total = torch.tensor([dist.get_rank() + 1.0])
    dist.all_reduce(total)
    seen["sum"] = total.item()
    dist.destroy_process_group()
with open(trial.trial_dir() / f"seen-{os.environ['RANK']}.json", "w") as out:
    json.dump(seen, out)
if os.environ["RANK"] == "0":
    for step in range(3):
        trial.report(step, loss=p["lr"] * (3 - step))
    trial.result(loss=p["lr"])
'''
PARAMS = {"lr": 0.5, "tag": "it's a $(x)"}
COMMAND = "python trial.py --tag 'it'\"'\"'s a $(x)'"


def _run_trial(tmp_path: Path, image, launcher: str, tasks: int,
               extra_env: dict) -> tuple[Path, int]:
    """Runs the trial as launcher.wrap() composes it, as the local executor would."""
    image_dir, binds = image
    workdir, tdir = tmp_path / "work", tmp_path / "runs" / "ch" / "trials" / "00001"
    workdir.mkdir()
    (tdir / "checkpoints").mkdir(parents=True)
    (workdir / "trial.py").write_text(TRIAL)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    layout = RankLayout(tasks_per_node=tasks, master_port=port,
                        binds=(str(workdir), str(tdir)), workdir=str(workdir))
    runtime = make_runtime(Container("charliecloud", str(image_dir), binds))
    text = make_launcher(launcher).wrap(COMMAND, layout, runtime)
    env = {k: v for k, v in os.environ.items() if k != "USER"}  # the script sets it
    env.update(extra_env, PATH=f"{Path(sys.executable).parent}:{env['PATH']}",
               HPSEARCH_EXPERIMENT="ch", HPSEARCH_TRIAL_ID="1", HPSEARCH_ATTEMPT="1",
               HPSEARCH_TRIAL_DIR=str(tdir), HPSEARCH_CHECKPOINT_DIR=str(tdir / "checkpoints"),
               HPSEARCH_PARAMS=json.dumps(PARAMS), OMP_NUM_THREADS="1")
    proc = subprocess.run(["/bin/sh", "-c", text], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, f"{text}\n{proc.stdout}\n{proc.stderr}"
    assert "ch-run" in text
    return tdir, port


def _check_trial_files(tdir: Path) -> None:
    lines = [json.loads(line) for line in (tdir / "metrics.jsonl").read_text().splitlines()]
    assert [(m["step"], m["loss"]) for m in lines] == [(0, 1.5), (1, 1.0), (2, 0.5)]
    assert json.loads((tdir / "result.json").read_text()) == {"loss": 0.5}


def test_trial_in_charliecloud_sees_params_and_writes_metrics(tmp_path, image):
    tdir, port = _run_trial(tmp_path, image, "none", 1, {})
    seen = json.loads((tdir / "seen-0.json").read_text())
    assert seen["params"] == PARAMS and seen["argv"] == ["--tag", "it's a $(x)"]
    assert seen["ch_running"] and not seen["host_etc_visible"]  # inside the image
    assert seen["cwd"] == str(tmp_path / "work")
    assert seen["rank"] == {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0",
                            "LOCAL_WORLD_SIZE": "1", "NODE_RANK": "0",
                            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    _check_trial_files(tdir)


@pytest.mark.slow
def test_torchrun_in_charliecloud_two_ranks_all_reduce(tmp_path, image):
    """torchrun runs inside the container and starts 2 gloo ranks there."""
    tdir, port = _run_trial(tmp_path, image, "torchrun", 2, {"WITH_DDP": "1"})
    seen = [json.loads((tdir / f"seen-{r}.json").read_text()) for r in range(2)]
    assert [s["rank"] for s in seen] == [
        {"RANK": str(r), "WORLD_SIZE": "2", "LOCAL_RANK": str(r), "LOCAL_WORLD_SIZE": "2",
         "NODE_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
        for r in range(2)]
    assert all(s["sum"] == 3.0 and s["ch_running"] and s["params"] == PARAMS for s in seen)
    _check_trial_files(tdir)


IN_IMAGE = """import os, runpy
assert os.environ.get("CH_RUNNING") and not os.path.exists("/etc/debian_version"), "not in it"
runpy.run_path("train.py", run_name="__main__")
"""


def test_pbt_members_segments_in_charliecloud_resume_from_the_checkpoints_they_took(cli, image):
    """A pbt search of the toy (examples/pbt_toy) whose every segment runs in the image:
    each member's final Q is the toy's, replayed under the schedule its model lived through
    the checkpoints it took, to the bit (a segment with other parameters, or resumed from
    another checkpoint, would change it); one slot and a seed fix the exploits."""
    from hpsearch.search.pbt_schedule import lived
    from tests.helpers import read_store
    from tests.test_pbt import _history, _replayed, _spec
    image_dir, binds = image
    spec = _spec(cli, "ch-pbt", parallel=1, steps=16)
    (cli.cwd / "in_image.py").write_text(IN_IMAGE)
    spec.write_text(spec.read_text().replace("train.py", "in_image.py") + (
        f"container: {{runtime: charliecloud, image: '{image_dir}', binds: {list(binds)}}}\n"))
    proc = cli("submit", spec, "--no-tui", check=0, timeout=120)
    _, trials = read_store(cli.runs, "ch-pbt")
    history = _history(cli.runs, "ch-pbt")
    assert [t.state for t in trials] == ["completed"] * 4, proc.stdout
    assert any(lineage for _, lineage, _ in history.values()), proc.stdout
    schedules = {tid: h[0] for tid, h in history.items()}
    for t in trials:
        assert _replayed(lived(schedules, t.id), 16) == t.objective_values[0], t.id
        assert [s for s, _ in history[t.id][2]] == list(range(16)), t.id  # each step once

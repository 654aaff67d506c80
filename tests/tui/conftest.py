"""Fixtures of the live-view tests: a store of many trials built with the Store API, and a
real terminal (tmux) to run `hpsearch submit` / `watch` in.

tmux is needed for the terminal tests. Missing, they skip and say why; with CI set they fail
instead (CI must run them; scripts/test.sh installs tmux as root).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpsearch.store.runs import STORE_FILE
from hpsearch.store.store import Store

SPEC = """\
name: {name}
command: "sh trial.sh {{x}}"
search:
  strategy: random
  trials: {trials}
  parallel: 2
  seed: 1
  space:
    x: {{type: float, low: 0.0, high: 10.0}}
objective: {{metric: loss, direction: minimize}}
executor: {{type: {executor}, timeout: 2m}}
"""


def build_store(exp_dir: Path, trials: int, name: str = "big", executor: str = "local",
                running: int = 4, directions: tuple[str, ...] = ("minimize",)) -> Path:
    """A store holding `trials` trials (all completed but `running` in flight and every 50th
    failed), each with 5 steps of metrics, written through the Store API in one batch."""
    exp_dir.mkdir(parents=True, exist_ok=True)
    objective = "{metric: loss, direction: minimize}" if len(directions) == 1 else \
        "[{metric: loss, direction: minimize}, {metric: cost, direction: minimize}]"
    spec = SPEC.format(name=name, trials=trials, executor=executor).replace(
        "{metric: loss, direction: minimize}", objective)
    store = Store.create(exp_dir / STORE_FILE, name=name, spec_yaml=spec,
                         spec_file=str(exp_dir / "spec.yaml"), base_dir=str(exp_dir),
                         strategy="random", directions=list(directions),
                         trials_requested=trials)
    with store.batch():
        for i in range(trials):
            x = (i * 7919 % 1000) / 100.0
            store.insert_trial(i, {"x": x, "opt": ["sgd", "adam"][i % 2]},
                               str(exp_dir / "trials" / f"{i:05d}"), {})
            store.mark_running(i, 1, "host", None, None, None,
                               f"{1000 + i}" if executor == "slurm" else None)
            loss = (x - 5) ** 2
            store.add_metrics(i, 1, [{"step": s, "loss": loss + 1 / (s + 1)} for s in range(5)])
            if i >= trials - running:
                if executor == "slurm":
                    store.update_placement(i, 1, "RUNNING", None, "node[1-2]", "leaf1")
                continue
            if i % 50 == 49:
                store.finish_attempt(i, 1, "failed", 3, "exit code 3")
            else:
                values = [loss] if len(directions) == 1 else [loss, abs(x)]
                store.finish_attempt(i, 1, "completed", 0, None, values)
    store.close()
    return exp_dir


def build_pilot_store(exp_dir: Path, now: float | None = None) -> Path:
    """A Slurm search with three pilots, written through the Store API:
    pilot 1 (job 5001) runs on node[1-2] under leaf1 since now-120 with trials 0 and 1 on
    node1 and trial 2 on node2, and its heartbeat file says 200 s left as of now-10;
    pilot 2 (job 5002) is pending since it was submitted; pilot 3 (job 5000) held node[3-4]
    under leaf2 from now-600 to now-300 and ran trial 3 (completed) on node3."""
    import json
    now = time.time() if now is None else now
    exp_dir.mkdir(parents=True, exist_ok=True)
    store = Store.create(exp_dir / STORE_FILE, name=exp_dir.name,
                         spec_yaml=SPEC.format(name=exp_dir.name, trials=6, executor="slurm"),
                         spec_file=str(exp_dir / "spec.yaml"), base_dir=str(exp_dir),
                         strategy="random", directions=["minimize"], trials_requested=6)
    store.add_pilot(3, "hps.pil.t.pilot.3")
    store.update_pilot(3, job_id="5000", state="running", nodes="node[3-4]", leaves="leaf2",
                       started=now - 600)
    store.insert_trial(3, {"x": 3.0}, str(exp_dir / "trials" / "00003"), {})
    store.mark_running(3, 1, "node3", None, None, None, "5000")
    store.finish_attempt(3, 1, "completed", 0, None, [4.0])
    store.update_placement(3, 1, None, None, "node3", "leaf2")
    store.update_pilot(3, state="ended", ended=now - 300, reason="Slurm job 5000 TIMEOUT")
    store.add_pilot(1, "hps.pil.t.pilot.1")
    store.update_pilot(1, job_id="5001", state="running", nodes="node[1-2]", leaves="leaf1",
                       started=now - 120)
    store.add_pilot(2, "hps.pil.t.pilot.2")
    store.update_pilot(2, job_id="5002", state="pending")
    for trial, node in ((0, "node1"), (1, "node1"), (2, "node2")):
        store.insert_trial(trial, {"x": float(trial)}, str(exp_dir / "trials" / f"{trial:05d}"),
                           {})
        store.mark_running(trial, 1, node, None, None, None, "5001")
    store.close()
    beat = exp_dir / "pilots" / "1" / "heartbeat.json"
    beat.parent.mkdir(parents=True)
    beat.write_text(json.dumps({"state": "running", "remaining": 200.0, "time": now - 10,
                                "seq": 7, "nodes": "node[1-2]", "job_id": "5001"}))
    return exp_dir


def _need(tool: str) -> str:
    path = shutil.which(tool)
    if path:
        return path
    reason = f"{tool} is not installed (scripts/test.sh installs it as root)"
    if os.environ.get("CI"):
        pytest.fail(f"CI is set, so the terminal tests must run, but: {reason}",
                    pytrace=False)
    pytest.skip(reason)


class Terminal:
    """A detached tmux session of a given size on a private server (its own socket)."""

    def __init__(self, tmp: Path, width: int = 80, height: int = 24) -> None:
        self.tmux = _need("tmux")
        self.socket = tmp / "tmux.sock"
        self.width, self.height = width, height

    def _run(self, *args: str) -> str:
        return subprocess.run([self.tmux, "-S", str(self.socket), *args], check=True,
                              capture_output=True, text=True, timeout=30).stdout

    def start(self, cwd: Path, env: dict[str, str]) -> None:
        """A plain shell (no rc files) in cwd, with env set, the venv's python first."""
        exports = [f"-e{k}={v}" for k, v in env.items()]
        self._run("new-session", "-d", "-s", "t", "-x", str(self.width), "-y",
                  str(self.height), "-c", str(cwd), *exports,
                  "env", f"PATH={Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
                  "PS1=$ ", "bash", "--norc", "--noprofile")
        self._run("set-option", "-t", "t", "status", "off")
        self._run("resize-window", "-t", "t", "-x", str(self.width), "-y", str(self.height))

    def send(self, *keys: str) -> None:
        self._run("send-keys", "-t", "t", *keys)

    def screen(self) -> str:
        return self._run("capture-pane", "-p", "-t", "t")

    def wait_for(self, predicate, timeout: float = 60, what: str = "") -> str:
        """Capture the pane until predicate(text) holds; fail with the last capture."""
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            text = self.screen()
            if predicate(text):
                return text
            time.sleep(0.2)
        pytest.fail(f"the terminal never showed {what} in {timeout}s; last screen:\n{text}",
                    pytrace=False)

    def close(self) -> None:
        subprocess.run([self.tmux, "-S", str(self.socket), "kill-server"],
                       capture_output=True, timeout=30)


@pytest.fixture
def terminal(tmp_path: Path):
    term = Terminal(tmp_path)
    yield term
    term.close()

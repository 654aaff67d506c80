"""What a person sees in a real terminal: tmux runs `hpsearch submit` (the live view is
the default on a terminal) and `hpsearch watch` against live searches, and capture-pane
reads the screen. Checks progress advancing, the best value, a failed trial shown as
failed, and Ctrl-C or q leaving `watch` with the search still running to its end."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest

from hpsearch.store.lockfile import DriverLock
from tests.helpers import read_store

pytestmark = pytest.mark.slow

# x = 1..N on a grid; loss = (x - 6)^2 + 4 - step, so x = 6 ends best at loss 1; x = 3 fails.
TRIAL = """\
x=$1
for s in 0 1 2 3; do
  sleep "$TRIAL_SLEEP"
  echo "@hpsearch step=$s loss=$(( (x - 6) * (x - 6) + 4 - s ))"
done
if [ "$x" = 3 ]; then echo "boom at x=3" >&2; exit 3; fi
"""
SPEC = """\
name: tui
command: "sh trial.sh {{x}}"
env: {{TRIAL_SLEEP: "{sleep}"}}
search:
  strategy: grid
  parallel: 2
  space:
    x: {{type: int, low: 1, high: {count}}}
objective: {{metric: loss, direction: minimize}}
executor: {{type: local, timeout: 2m}}
"""


def _setup(cli, sleep: float, count: int) -> Path:
    (cli.cwd / "trial.sh").write_text(TRIAL)
    return cli.write_spec(SPEC.format(sleep=sleep, count=count))


def _finished(screen: str) -> int | None:
    found = re.search(r"(\d+)/(\d+) finished", screen)
    return int(found.group(1)) if found else None


def _env(cli) -> dict[str, str]:
    return {"HPSEARCH_RUNS_DIR": str(cli.runs), "PYTHONUNBUFFERED": "1", "TERM": "xterm-256color"}


def test_submit_on_a_terminal_shows_progress_best_value_and_failed_trial(cli, terminal):
    spec = _setup(cli, sleep=0.4, count=10)
    terminal.start(cli.cwd, _env(cli))
    terminal.send(f"{sys.executable} -m hpsearch submit {spec}; echo EXIT=$?", "Enter")
    first = terminal.wait_for(lambda s: _finished(s) is not None and "tui" in s,
                              what="the live view")
    assert "Ctrl-C stops the search" in first  # submit's footer says what Ctrl-C does
    lines = first.rstrip("\n").splitlines()
    assert len(lines) <= 24 and all(len(line) <= 80 for line in lines)
    seen = _finished(first)
    advanced = terminal.wait_for(lambda s: (_finished(s) or 0) > seen + 1,
                                 what="progress advancing")
    assert "running" in advanced
    failed = terminal.wait_for(
        lambda s: any(re.match(r"\s*2\s+x=3\s+failed", line) for line in s.splitlines()),
        what="trial 2 (x=3) shown as failed")
    assert "1 failed" in failed  # and counted
    best = terminal.wait_for(lambda s: "best: #5" in s and "loss=1 " in s + " ",
                             what="the best trial (#5, x=6, loss 1)")
    assert "x=6" in best.split("best: #5", 1)[1].splitlines()[0]
    done = terminal.wait_for(lambda s: re.search(r"^EXIT=\d", s, re.M), what="submit ending")
    # The view gave the screen back; the summary follows (1: a trial failed).
    assert "experiment tui: completed" in done and re.search(r"^EXIT=1", done, re.M), done
    assert "best trial: #5 loss=1" in done


@pytest.mark.parametrize("key", ["C-c", "q"])
def test_ctrl_c_or_q_leaves_watch_and_the_search_runs_on(cli, terminal, key):
    spec = _setup(cli, sleep=0.5, count=8)
    cli("submit", spec, "--detach", check=0)
    exp_dir = cli.runs / "tui"
    terminal.start(cli.cwd, _env(cli))
    terminal.send(f"{sys.executable} -m hpsearch watch tui; echo WATCH_EXIT=$?", "Enter")
    screen = terminal.wait_for(lambda s: "running" in s and _finished(s) is not None,
                               what="the live view with trials running")
    assert "q or Ctrl-C leaves the view; the search goes on" in screen
    terminal.send(key)
    after = terminal.wait_for(lambda s: re.search(r"^WATCH_EXIT=\d", s, re.M),
                              what=f"watch leaving on {key}")
    assert re.search(r"^WATCH_EXIT=0", after, re.M) and "the search goes on" in after, after
    terminal.send("echo typed-ok", "Enter")  # the terminal is given back as it was: echo on
    terminal.wait_for(lambda s: s.count("typed-ok") >= 2, what="the typed line echoed")
    driver = DriverLock(exp_dir).holder()
    assert driver, "the driver stopped with the view"
    _, trials = read_store(cli.runs, "tui")
    finished_at_ctrl_c = sum(t.state in ("completed", "failed") for t in trials)
    assert finished_at_ctrl_c < 8
    deadline = time.monotonic() + 60
    while DriverLock(exp_dir).holder() and time.monotonic() < deadline:
        time.sleep(0.2)
    exp, trials = read_store(cli.runs, "tui")
    assert exp.status == "completed"
    assert sum(t.state in ("completed", "failed") for t in trials) == 8 > finished_at_ctrl_c
    assert all(t.state != "cancelled" for t in trials)

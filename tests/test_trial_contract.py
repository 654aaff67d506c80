"""What a trial sees and writes: environment, trial dir files, hpsearch.trial, ingest."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from hpsearch.store.reader import Reader
from tests.helpers import read_store

TRIAL_SCRIPT = r'''
import json, os, sys
from hpsearch import trial
p = trial.params()
env = {k: v for k, v in os.environ.items() if k.startswith("HPSEARCH_")}
print(json.dumps({"argv": sys.argv[1:], "env": env}))
print("to stderr", file=sys.stderr)
start = 0
if trial.latest_checkpoint() is not None:
    start = int(trial.latest_checkpoint().name.split("-")[1]) + 1
for step in range(start, STEPS):
    trial.report(step, loss=p["lr"] * (STEPS - step), acc=step / STEPS)
    (trial.checkpoint_dir() / f"ckpt-{step}").write_text(str(step))
trial.result(loss=p["lr"])
'''


def test_trial_sees_env_params_and_writes_its_files(cli):
    (cli.cwd / "t.py").write_text(TRIAL_SCRIPT.replace("STEPS", "5"))
    spec = cli.write_spec("""
        name: contract
        command: "{python} t.py --lr {lr} --tag {tag}"
        search:
          strategy: grid
          space:
            lr: {choices: [0.5, 0.25]}
            tag: {value: "a b"}
        objective: {metric: loss}
        env: {EXTRA: "yes"}
        """)
    cli("submit", spec, check=0)
    exp, trials = read_store(cli.runs, "contract")
    reader = Reader(cli.runs / "contract" / "store.sqlite")
    for t in trials:
        tdir = cli.runs / "contract" / "trials" / f"{t.id:05d}"
        assert t.trial_dir == str(tdir)
        seen = json.loads((tdir / "stdout.log").read_text().splitlines()[0])
        assert seen["argv"] == ["--lr", str(t.params["lr"]), "--tag", "a b"]
        env = seen["env"]
        assert env["HPSEARCH_EXPERIMENT"] == "contract"
        assert env["HPSEARCH_TRIAL_ID"] == str(t.id)
        assert env["HPSEARCH_TRIAL_DIR"] == str(tdir)
        assert env["HPSEARCH_CHECKPOINT_DIR"] == str(tdir / "checkpoints")
        assert json.loads(env["HPSEARCH_PARAMS"]) == t.params == json.loads(
            (tdir / "params.json").read_text())
        assert "to stderr" in (tdir / "stderr.log").read_text()
        assert json.loads((tdir / "result.json").read_text()) == {"loss": t.params["lr"]}
        # all 5 were saved; the default policy keeps the newest 2, and the best (step 4)
        assert sorted(p.name for p in (tdir / "checkpoints").iterdir()) == ["ckpt-3", "ckpt-4"]
        assert (tdir / "exit_code").read_text().split() == ["0", str(t.attempt)]
        # result.json wins over the last report (lr * 1) for the objective
        assert t.objective_values == [t.params["lr"]]
        rows = reader.metrics(t.id)
        assert [(m["step"], m["name"]) for m in rows] == [
            (s, n) for s in range(5) for n in ("acc", "loss")]
        assert {m["value"] for m in rows if m["name"] == "loss" and m["step"] == 0} == {
            t.params["lr"] * 5}
    reader.close()


def test_trial_module_imports_nothing_heavy():
    code = ("import sys, hpsearch.trial; heavy = [m for m in sys.modules if m.split('.')[0] in "
            "('optuna', 'yaml', 'sqlite_utils', 'sqlite3', 'numpy', 'rich', 'torch', 'scipy')]; "
            "print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_checkpoint_signal_after_the_result_does_not_kill_the_finished_trial(tmp_path):
    """Python puts its signal handlers back to the default as it exits: a SIGUSR2 that came
    then killed a trial that had written its result (exit 140, its attempt counted failed;
    seen in CI). After trial.result() a checkpoint signal asks for nothing: ignored. Here a
    shell sends the trial SIGUSR2 without a pause from before its result until it is gone;
    before the result, the signal still asks it to stop (should_stop)."""
    import os
    code = ("import os, subprocess, sys, time; from hpsearch import trial; trial.should_stop(); "
            "spam = subprocess.Popen(['sh', '-c', f'while kill -USR2 {os.getpid()} "
            "2>/dev/null; do :; done'], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); "
            "time.sleep(0.2); print(trial.should_stop(), "
            "flush=True); trial.result(loss=1.0)")
    for _ in range(5):
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env={**os.environ, "HPSEARCH_TRIAL_DIR": str(tmp_path)},
                              timeout=30)
        assert (proc.returncode, proc.stdout) == (0, "True\n"), proc.stderr
    assert json.loads((tmp_path / "result.json").read_text()) == {"loss": 1.0}


def test_trial_module_refuses_bad_metrics(tmp_path, monkeypatch):
    from hpsearch import trial
    monkeypatch.setenv("HPSEARCH_TRIAL_DIR", str(tmp_path))
    with pytest.raises(TypeError):
        trial.report(1, loss="high")
    with pytest.raises(TypeError):
        trial.report(1.5, loss=1.0)
    with pytest.raises(ValueError):
        trial.report(1, time=2.0)
    trial.report(3, loss=0.5)
    rec = json.loads((tmp_path / "metrics.jsonl").read_text())
    assert rec["step"] == 3 and rec["loss"] == 0.5
    assert not trial.should_stop()
    (tmp_path / "STOP").touch()
    assert trial.should_stop()


def test_many_trials_reporting_at_once_lose_no_line(cli):
    # 8 trials at once, each 400 reports through hpsearch.trial and 400 stdout lines, as fast
    # as they can: every one must reach the store.
    (cli.cwd / "burst.py").write_text(
        "import sys\nfrom hpsearch import trial\n"
        "for s in range(400):\n"
        "    trial.report(s, a=s * 1.0)\n"
        "    print(f'@hpsearch step={s} b={s * 2}', flush=True)\n"
        "trial.result(loss=float(sys.argv[1]))\n")
    spec = cli.write_spec("""
        name: burst
        command: "{python} burst.py {x}"
        search:
          strategy: random
          trials: 8
          parallel: 8
          seed: 1
          space:
            x: {low: 0.0, high: 1.0}
        objective: {metric: loss}
        """)
    cli("submit", spec, check=0)
    reader = Reader(cli.runs / "burst" / "store.sqlite")
    counts = reader.db.execute(
        "select trial, name, count(*), sum(value) from metrics group by trial, name").fetchall()
    reader.close()
    assert len(counts) == 16
    for trial_id, name, n, total in counts:
        assert n == 400
        assert total == sum(range(400)) * (1 if name == "a" else 2)


def test_malformed_report_lines_are_skipped_with_a_warning(cli):
    spec = cli.write_spec("""
        name: garbage
        command: 'printf "{\\"step\\": 1, \\"loss\\": 2}\\nnot json\\n{\\"step\\": \\"x\\"}\\n" >> "$HPSEARCH_TRIAL_DIR/metrics.jsonl"; echo "@hpsearch step=2 loss={x}"; echo "@hpsearch oops"'
        search:
          strategy: random
          trials: 1
          space:
            x: {low: 0.0, high: 1.0}
        objective: {metric: loss}
        """)
    proc = cli("submit", spec, check=0)
    assert "skipped malformed report line: 'not json'" in proc.stdout
    _, (t,) = read_store(cli.runs, "garbage")
    assert t.objective_values == [t.params["x"]]
    reader = Reader(cli.runs / "garbage" / "store.sqlite")
    warnings = [e["message"] for e in reader.events(limit=100) if e["kind"] == "warning"]
    steps = sorted((m["step"], m["value"]) for m in reader.metrics(0))
    reader.close()
    assert len(warnings) == 3
    assert steps == [(1, 2.0), (2, pytest.approx(t.params["x"]))]

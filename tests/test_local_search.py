"""End-to-end searches on the local executor, through the real CLI."""

from __future__ import annotations

import csv
import io
import json
import time

import pytest

from tests.helpers import AWK_QUAD, quad, read_store

STRATEGY_SPEC = """
name: s-{strategy}
command: "{command}"
search:
  strategy: {strategy}
  trials: {trials}
  parallel: 3
  seed: 5
  space:
    x: {{low: -3.0, high: 3.0{step}}}
    y: {{low: -4, high: 0}}
objective: {{metric: loss, direction: minimize}}
"""


def _spec(cli, strategy: str, trials: int = 10, name_suffix: str = ""):
    step = ", step: 1.5" if strategy == "grid" else ""
    command = AWK_QUAD.replace("\\", "\\\\").replace('"', '\\"')
    text = STRATEGY_SPEC.format(strategy=strategy, command=command, trials=trials, step=step)
    text = text.replace(f"name: s-{strategy}", f"name: s-{strategy}{name_suffix}")
    if strategy == "grid":  # a grid may omit trials: it runs every point
        text = text.replace(f"  trials: {trials}\n", "")
    return cli.write_spec(text, f"{strategy}{name_suffix}.yaml")


@pytest.mark.slow  # 5.1 s in the quick tier (2026-11-30): over its 3 s rule
@pytest.mark.parametrize("strategy", ["grid", "random", "tpe", "gp", "cmaes", "qmc", "nsga2",
                                      "nsga3"])
def test_each_strategy_runs_a_real_search(cli, strategy):
    if strategy == "gp":
        pytest.importorskip("torch", reason="GPSampler needs torch (scripts/test.sh installs "
                                            "the CPU build)")
    spec = _spec(cli, strategy)
    proc = cli("submit", spec, "--executor", "local", check=0)
    exp, trials = read_store(cli.runs, f"s-{strategy}")
    expected = 5 * 5 if strategy == "grid" else 10
    assert exp.status == "completed"
    assert [t.id for t in trials] == list(range(expected))
    assert all(t.state == "completed" for t in trials)
    for t in trials:  # each value is the trial's own computation on its own params
        assert t.objective_values[0] == pytest.approx(quad(t.params["x"], t.params["y"]))
        assert -3.0 <= t.params["x"] <= 3.0 and -4 <= t.params["y"] <= 0
        assert isinstance(t.params["y"], int)
    best = min(trials, key=lambda t: t.objective_values[0])
    assert f"best trial: #{best.id}" in proc.stdout
    if strategy == "grid":
        assert "grid: 5 x 5 = 25 points; 25 trials" in proc.stdout
        assert sorted((t.params["x"], t.params["y"]) for t in trials) == sorted(
            (x, y) for x in (-3.0, -1.5, 0.0, 1.5, 3.0) for y in range(-4, 1))


@pytest.mark.slow  # over 5 s in the quick tier on 2026-11-28 (docs/testing.md#tiers)
def test_seed_makes_search_reproducible(cli):
    def params_of(suffix, strategy):
        spec = _spec(cli, strategy, trials=8, name_suffix=suffix)
        cli("submit", spec, check=0)
        return [t.params for t in read_store(cli.runs, f"s-{strategy}{suffix}")[1]]

    assert params_of("-a", "random") == params_of("-b", "random")
    assert params_of("-a", "qmc") == params_of("-b", "qmc")


def test_tpe_with_one_slot_is_reproducible(cli):
    runs = []
    for suffix in ("-a", "-b"):
        text = _spec(cli, "tpe", trials=14, name_suffix=suffix).read_text()
        path = cli.write_spec(text.replace("parallel: 3", "parallel: 1"), f"tpe1{suffix}.yaml")
        cli("submit", path, check=0)
        runs.append([t.params for t in read_store(cli.runs, f"s-tpe{suffix}")[1]])
    assert runs[0] == runs[1]


@pytest.mark.parametrize("strategy, third", [("nsga2", ""), ("nsga3", "f3")])
def test_multi_objective_keeps_the_pareto_front(cli, strategy, third):
    """nsga2 with two objectives; nsga3, made for three and more, with a third."""
    spec = cli.write_spec("""
        name: mo
        command: >-
          awk -v x={x} 'BEGIN { printf "@hpsearch result f1=%.17g f2=%.17g f3=%.17g\\n",
          x*x, (x-2)*(x-2), (x-1)*(x-1) }'
        search:
          strategy: STRATEGY
          trials: 24
          parallel: 4
          seed: 1
          space:
            x: {low: -2.0, high: 4.0}
        objective:
          - {metric: f1, direction: minimize}
          - {metric: f2, direction: minimize}
        """.replace("STRATEGY", strategy) + (
        f"  - {{metric: {third}, direction: minimize}}\n" if third else ""))
    cli("submit", spec, check=0)
    _, trials = read_store(cli.runs, "mo")
    out = json.loads(cli("best", "mo", "--json", check=0).stdout)
    front = {item["trial"] for item in out}
    points = {t.id: t.objective_values for t in trials}

    def dominates(a, b):
        return all(p <= q for p, q in zip(a, b)) and any(p < q for p, q in zip(a, b))

    for tid, vals in points.items():
        dominated = any(dominates(other, vals) for other in points.values())
        assert (tid in front) == (not dominated)
    # The best trial of each objective alone is on the front.
    assert min(points, key=lambda i: (points[i][0], points[i][1])) in front
    assert min(points, key=lambda i: (points[i][1], points[i][0])) in front
    assert len(front) >= 3
    assert all(set(item["values"]) == {"f1", "f2"} | ({third} if third else set())
               for item in out)


@pytest.mark.slow  # 4.0 s in the quick tier (2026-11-30): over its 3 s rule
def test_slots_are_freed_as_each_trial_ends_no_batch_barrier(cli):
    # Trial 0 sleeps 3 s; the others 0.1 s. With 2 slots, the short trials must keep
    # flowing through the second slot while trial 0 still runs.
    spec = cli.write_spec("""
        name: async
        command: 'if [ {trial_id} = 0 ]; then sleep 3; else sleep 0.1; fi; echo "@hpsearch step=0 loss={x}"'
        search:
          strategy: random
          trials: 8
          parallel: 2
          seed: 0
          space:
            x: {low: 0.0, high: 1.0}
        objective: {metric: loss}
        """)
    cli("submit", spec, check=0)
    _, trials = read_store(cli.runs, "async")
    long = trials[0]
    during = [t for t in trials[1:] if t.finished < long.finished]
    assert len(during) >= 6, [(t.id, t.started, t.finished) for t in trials]


def test_failed_trial_recorded_with_exit_code_and_stderr_tail(cli):
    spec = cli.write_spec("""
        name: fails
        command: 'if [ {trial_id} = 1 ]; then echo "CUDA out of memory (pretend)" >&2; exit 3; fi; echo "@hpsearch step=0 loss={x}"'
        search:
          strategy: random
          trials: 3
          parallel: 1
          seed: 0
          space:
            x: {low: 0.0, high: 1.0}
        objective: {metric: loss}
        """)
    proc = cli("submit", spec, check=1)
    _, trials = read_store(cli.runs, "fails")
    assert [t.state for t in trials] == ["completed", "failed", "completed"]
    assert trials[1].exit_code == 3
    assert trials[1].error.startswith("exit code 3")
    assert "CUDA out of memory (pretend)" in trials[1].error
    assert "trial 1 failed: exit code 3" in proc.stdout
    status = cli("status", "fails", check=0).stdout
    assert "failed" in status and "exit code 3" in status


def test_retry_reruns_a_failed_trial_as_a_new_attempt(cli):
    spec = cli.write_spec("""
        name: retry
        command: 'if [ "$HPSEARCH_ATTEMPT" = 1 ]; then exit 7; fi; echo "@hpsearch step=0 loss={x}"'
        search:
          strategy: random
          trials: 2
          parallel: 2
          seed: 0
          space:
            x: {low: 0.0, high: 1.0}
        objective: {metric: loss}
        retries: 1
        """)
    cli("submit", spec, check=0)
    _, trials = read_store(cli.runs, "retry")
    assert all(t.state == "completed" and t.attempt == 2 for t in trials)
    tdir = cli.runs / "retry" / "trials" / "00000"
    assert (tdir / "stdout.attempt1.log").exists() and (tdir / "stdout.log").exists()


@pytest.mark.slow  # 4.2 s in the quick tier (2026-11-30): over its 3 s rule
def test_timeout_stops_a_trial_by_process_group(cli):
    spec = cli.write_spec("""
        name: slow
        command: 'sleep 60 & sleep 60; echo "@hpsearch step=0 loss={x}"'
        search:
          strategy: random
          trials: 1
          space:
            x: {low: 0.0, high: 1.0}
        objective: {metric: loss}
        executor: {type: local, timeout: 1, grace: 1}
        """)
    began = time.monotonic()
    cli("submit", spec, check=1)
    assert time.monotonic() - began < 20
    _, (t,) = read_store(cli.runs, "slow")
    assert t.state == "failed" and "timeout" in t.error


def test_objective_never_reported_fails_the_trial(cli):
    spec = cli.write_spec("""
        name: silent
        command: 'echo "@hpsearch step=0 other={x}"'
        search:
          strategy: random
          trials: 1
          space:
            x: {low: 0.0, high: 1.0}
        objective: {metric: loss}
        """)
    cli("submit", spec, check=1)
    _, (t,) = read_store(cli.runs, "silent")
    assert t.state == "failed" and "objective metric 'loss' was never reported" in t.error


def test_gpu_slots_give_each_running_trial_its_own_devices(cli):
    spec = cli.write_spec("""
        name: gpus
        command: 'echo "$CUDA_VISIBLE_DEVICES" > "$HPSEARCH_TRIAL_DIR/devices"; sleep 0.3; echo "@hpsearch step=0 loss={x}"'
        search:
          strategy: random
          trials: 9
          parallel: 8
          seed: 0
          space:
            x: {low: 0.0, high: 1.0}
        objective: {metric: loss}
        resources: {gpus_per_node: 2}
        executor: {type: local, gpus: [0, 1, 2, 3, 5, 6]}
        """)
    cli("submit", spec, check=0)
    _, trials = read_store(cli.runs, "gpus")
    devices = {}
    for t in trials:
        devices[t.id] = (cli.runs / "gpus" / "trials" / f"{t.id:05d}" / "devices").read_text().split()[0]
        assert len(devices[t.id].split(",")) == 2 and t.gpus == devices[t.id]
    for a in trials:  # trials that overlapped in time never shared a device
        for b in trials:
            if a.id < b.id and a.started < b.finished and b.started < a.finished:
                assert not set(devices[a.id].split(",")) & set(devices[b.id].split(","))
    # 6 devices / 2 per trial: at most 3 at once even with parallel: 8
    assert max(sum(1 for t in trials if t.started <= s.started < t.finished)
               for s in trials) <= 3


def test_export_csv_and_json_hold_every_trial(cli):
    spec = _spec(cli, "random", trials=6)
    cli("submit", spec, check=0)
    rows = list(csv.DictReader(io.StringIO(cli("export", "s-random", check=0).stdout)))
    assert [int(r["trial"]) for r in rows] == list(range(6))
    assert all(float(r["loss"]) == pytest.approx(quad(float(r["param_x"]), int(r["param_y"])))
               for r in rows)
    out = cli.cwd / "t.json"
    cli("export", "s-random", "--format", "json", "--out", out, check=0)
    data = json.loads(out.read_text())
    assert len(data) == 6 and {"trial", "state", "loss", "param_x", "trial_dir"} <= set(data[0])


def test_best_top_k_is_sorted_and_names_trial_dirs(cli):
    spec = _spec(cli, "random", trials=8)
    cli("submit", spec, check=0)
    out = json.loads(cli("best", "s-random", "-k", "3", "--json", check=0).stdout)
    _, trials = read_store(cli.runs, "s-random")
    expected = sorted(trials, key=lambda t: t.objective_values[0])[:3]
    assert [o["trial"] for o in out] == [t.id for t in expected]
    assert all((cli.runs / "s-random" / "trials").exists() and o["trial_dir"].endswith(
        f"{o['trial']:05d}") for o in out)


def test_submit_refuses_an_existing_experiment_and_resume_flag_continues(cli):
    spec = _spec(cli, "random", trials=3)
    cli("submit", spec, check=0)
    proc = cli("submit", spec, check=2)
    assert "already exists" in proc.stderr and "hpsearch resume s-random" in proc.stderr
    cli("submit", spec, "--resume", check=0)
    assert len(read_store(cli.runs, "s-random")[1]) == 3

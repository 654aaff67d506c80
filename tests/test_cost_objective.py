"""Cost as an objective (docs/spec.md#cost-as-an-objective): node_hours, gpu_hours and wall_s,
measured by the driver over all of a trial's attempts, named in `objective` like a reported
metric. Real local searches: a two-objective one whose Pareto front `best` and the report
show, gpu_hours alone, a retried trial's total, a trial that reports a reserved name; the
spec's refusals; and on Slurm, the same sacct records `hpsearch report` reads."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import re

import pytest

import hpsearch
from hpsearch.driver.cost import Costs
from hpsearch.interop.store_view import read_view
from hpsearch.report import budget, export
from hpsearch.report.data import collect
from hpsearch.slurm.failures import SlurmError
from hpsearch.slurm.sacct import JobUsage
from hpsearch.store.reader import Reader
from hpsearch.store.store import Store
from tests.conftest import EXAMPLES
from tests.helpers import read_store

# Accuracy from `work` (longer work, better), GPUs from `gpus`: a 2-GPU trial does the same
# work as its 1-GPU twin at twice the GPU-hours, so it is never on the front.
TWO = """
    name: cost2
    command: >-
      sleep {work}; awk -v w={work} 'BEGIN { printf "@hpsearch result acc=%.3f\\n",
      (w > 0.5 ? 0.95 : 0.9) }'
    search:
      strategy: grid
      parallel: 2
      space:
        work: {choices: [0.2, 0.6]}
        gpus: {choices: [1, 2]}
    objective:
      - {metric: acc, direction: maximize}
      - {metric: gpu_hours, direction: minimize}
    resources: {gpus_per_node: "{gpus}"}
    executor: {type: local, gpus: [0, 1]}
    """


def _attempt_seconds(runs, name: str) -> dict[int, float]:
    """Each trial's seconds over all its attempts, from the store's start and end times."""
    reader = Reader(runs / name / "store.sqlite")
    try:
        rows = reader.all_attempts()
    finally:
        reader.close()
    out: dict[int, float] = {}
    for a in rows:
        out[a["trial"]] = out.get(a["trial"], 0.0) + a["finished"] - a["started"]
    return out


def _dominated(vals, others) -> bool:
    better = [(o[0] >= vals[0] and o[1] <= vals[1] and (o[0] > vals[0] or o[1] < vals[1]))
              for o in others]
    return any(better)


@pytest.mark.slow  # 3.4 s in the quick tier (2026-11-30): over its 3 s rule
def test_accuracy_against_gpu_hours_gives_the_pareto_front_in_best(cli):
    spec = cli.write_spec(TWO)
    cli("submit", spec, "--no-tui", "-q", check=0)
    _, trials = read_store(cli.runs, "cost2")
    seconds = _attempt_seconds(cli.runs, "cost2")
    assert len(trials) == 4 and all(t.state == "completed" for t in trials)
    for t in trials:  # GPUs x the hours it ran, as the report's accounting counts it
        acc, gpu_hours = t.objective_values
        assert gpu_hours == pytest.approx(t.params["gpus"] * seconds[t.id] / 3600, rel=1e-9)
        # real time, not a constant: the store's start is written just after the process
        # starts, so on a loaded machine it may trail the sleep's start by some milliseconds
        assert seconds[t.id] >= 0.8 * t.params["work"]
    out = json.loads(cli("best", "cost2", "--json", check=0).stdout)
    front = {item["trial"] for item in out}
    points = {t.id: t.objective_values for t in trials}
    for tid, vals in points.items():
        assert (tid in front) == (not _dominated(vals, points.values())), (tid, points)
    assert all(t.params["gpus"] == 1 for t in trials if t.id in front)  # a 1-GPU twin wins
    assert all(set(item["values"]) == {"acc", "gpu_hours"} for item in out)
    shown = cli("best", "cost2", check=0).stdout
    assert shown.startswith(f"Pareto front of cost2: {len(front)} trial(s) (maximize acc, "
                            "minimize gpu_hours)")



@pytest.mark.slow  # matplotlib draws every figure: about 10 s here
def test_the_report_has_a_pareto_section_of_the_front_best_accuracy_first(cli):
    cli("submit", cli.write_spec(TWO), "--no-tui", "-q", check=0)
    _, trials = read_store(cli.runs, "cost2")
    points = {t.id: t.objective_values for t in trials}
    front = {tid for tid, vals in points.items() if not _dominated(vals, points.values())}
    cli("report", "cost2", "--out", cli.cwd / "rep", check=0)
    page = (cli.cwd / "rep" / "report.html").read_text()
    section = page[page.index("<h2 id='pareto'>Pareto front</h2>"):]
    section = section[:section.index("</table>")]
    assert f"{len(front)} of 4 completed trials are on the front" in section
    assert "gpu_hours: what hpsearch measured over all of the trial's attempts" in section
    listed = [int(n) for n in re.findall(r"<tr><td>(\d+)</td>", section)]
    assert sorted(listed) == sorted(front)
    accs = [points[tid][0] for tid in listed]
    assert accs == sorted(accs, reverse=True)  # best accuracy first
    assert (cli.cwd / "rep" / "pareto_front.png").exists()


CHEAP = """
    name: cheap
    command: "sleep {work}"
    search:
      strategy: grid
      space:
        work: {choices: [0.4, 0.1]}
        gpus: {choices: [2, 1]}
    objective: {metric: gpu_hours, direction: minimize}
    resources: {gpus_per_node: "{gpus}"}
    executor: {type: local, gpus: [0, 1]}
    """


def test_gpu_hours_alone_is_an_objective_and_the_trial_reports_nothing(cli):
    spec = cli.write_spec(CHEAP)
    shown = cli("validate", spec, check=0).stdout
    assert "objective: minimize gpu_hours (measured by hpsearch)" in shown
    cli("submit", spec, "--no-tui", "-q", check=0)
    _, trials = read_store(cli.runs, "cheap")
    assert [t.state for t in trials] == ["completed"] * 4
    top = json.loads(cli("best", "cheap", "--json", check=0).stdout)
    assert top[0]["params"] == {"work": 0.1, "gpus": 1}
    assert 0 < top[0]["values"]["gpu_hours"] < min(
        t.objective_values[0] for t in trials if t.params != {"work": 0.1, "gpus": 1})


def test_export_gives_the_gpu_hours_objective_and_the_budget_beside_it(cli):
    """The objective's column holds the objective's value, as `best` and the sampler saw
    it; the budget's accounting of the same name is kept as hpsearch_gpu_hours. Export reads
    no sacct: on Slurm that accounting knows no GPUs (0), and used to overwrite the
    objective's column."""
    cli("submit", cli.write_spec(CHEAP), "--no-tui", "-q", check=0)
    _, trials = read_store(cli.runs, "cheap")
    objective = {t.id: t.objective_values[0] for t in trials}
    view = read_view(cli.runs / "cheap")  # as on Slurm: the budget's GPU-hours are 0
    data = collect(cli.runs / "cheap", use_sacct=False, view=view)
    budgets = {b.trial: dataclasses.replace(b, gpu_hours=0.0)
               for b in budget.trial_budgets(data.trials, data.curves, data.usage)}
    records = export.records(view, budgets)
    assert {rec["trial"]: rec["gpu_hours"] for rec in records} == objective
    assert {rec["hpsearch_gpu_hours"] for rec in records} == {0.0}

    rows = list(csv.DictReader(io.StringIO(cli("export", "cheap", check=0).stdout)))
    assert {int(row["trial"]): float(row["gpu_hours"]) for row in rows} == objective
    for row in rows:  # here the budget counts the same hours (the local executor's GPUs)
        assert float(row["hpsearch_gpu_hours"]) == pytest.approx(objective[int(row["trial"])])
    assert list(rows[0]).count("gpu_hours") == 1

    frame = hpsearch.load("cheap", cli.runs).trials_dataframe().set_index("number")
    assert frame["value"].to_dict() == objective


def test_wall_s_sums_every_attempt_of_a_retried_trial(cli):
    spec = cli.write_spec("""
        name: retried
        command: >-
          if [ -e "$HPSEARCH_TRIAL_DIR/once" ]; then sleep 0.2; echo "@hpsearch result acc={x}";
          else touch "$HPSEARCH_TRIAL_DIR/once"; sleep 0.4; exit 1; fi
        search:
          strategy: grid
          space:
            x: {choices: [1]}
        objective:
          - {metric: acc, direction: maximize}
          - {metric: wall_s, direction: minimize}
          - {metric: node_hours, direction: minimize}
        retries: 1
        """)
    cli("submit", spec, "--no-tui", "-q", check=0)
    _, (trial,) = read_store(cli.runs, "retried")
    assert trial.state == "completed" and trial.attempt == 2
    acc, wall_s, node_hours = trial.objective_values
    assert wall_s == pytest.approx(_attempt_seconds(cli.runs, "retried")[0], rel=1e-9)
    assert wall_s >= 0.6  # both attempts: 0.4 s that failed, 0.2 s that completed
    assert node_hours == pytest.approx(wall_s / 3600, rel=1e-9)  # one node on the local host


def test_a_trial_reporting_a_reserved_name_is_warned_and_the_measured_cost_counts(cli):
    spec = cli.write_spec("""
        name: reserved
        command: >-
          echo "@hpsearch step=0 wall_s=1000"; echo "@hpsearch result acc={x} wall_s=2000"
        search:
          strategy: grid
          space:
            x: {choices: [1, 2]}
        objective:
          - {metric: acc, direction: maximize}
          - {metric: wall_s, direction: minimize}
        """)
    proc = cli("submit", spec, "--no-tui", check=0)
    warning = ("it reports wall_s itself; the objective uses the cost hpsearch measured "
               "instead (node_hours, gpu_hours and wall_s are reserved")
    assert proc.stdout.count(warning) + proc.stderr.count(warning) == 1  # printed once
    _, trials = read_store(cli.runs, "reserved")
    assert all(0 < t.objective_values[1] < 100 for t in trials)  # measured, not reported
    events = cli("events", "reserved", check=0).stdout
    assert events.count(warning) == 2  # stored for each trial


REFUSED = """
    name: refused
    command: "echo {{x}}"
    search:
      strategy: random
      trials: 2
      space:
        x: {{choices: [1, 2]}}
    {tail}
    """


@pytest.mark.parametrize("tail, line, key, expected", [
    ("objective: {metric: gpu_hours}\n    executor: {type: local, gpus: [0]}\n"
     "    search_pruner: median", 6, "search.pruner",
     "early stopping judges the objective's reports during a trial, and gpu_hours is a cost "
     "hpsearch measures only when the trial ends; remove search.pruner, or make the objective "
     "a metric the trial reports"),
    ("objective: {metric: wall_s}\n    checkpoints: {keep_best: 1}", 9,
     "checkpoints.keep_best", "keep_best ranks checkpoints by the first objective at their "
     "step, and wall_s is a cost hpsearch measures only when the trial ends"),
    ("objective:\n      - {metric: acc}\n      - {metric: gpu_hours}", 10,
     "objective[1].metric", "gpu_hours is GPUs x hours, and the local executor gives trials "
     "no GPU slots without executor.gpus (auto, or device ids such as [0, 1]): every trial's "
     "would be 0; give trials GPUs, or use node_hours or wall_s"),
])
def test_the_spec_refuses_a_cost_objective_it_cannot_serve(cli, tail, line, key, expected):
    text = REFUSED.format(tail=tail)
    if "search_pruner" in text:  # the pruner goes in search
        text = text.replace("    search_pruner: median\n", "").replace(
            "  trials: 2\n", "  trials: 2\n      pruner: median\n")
    proc = cli("validate", cli.write_spec(text), check=2)
    assert f"spec.yaml:{line}: {key}: {expected}" in proc.stderr, proc.stderr


def test_wall_s_needs_no_gpus_and_gpu_hours_on_slurm_needs_gpus_asked(cli):
    base = ('name: ok\ncommand: "echo {x}"\n'
            "search: {strategy: random, trials: 2, space: {x: {choices: [1, 2]}}}\n")
    cli("validate", cli.write_spec(base + "objective: {metric: wall_s}\n"), check=0)
    slurm = cli.write_spec(base + "objective: {metric: gpu_hours}\nexecutor: {type: slurm}\n")
    proc = cli("plan", slurm, "--limit", "0")
    assert proc.returncode == 2
    assert ("objective.metric: gpu_hours is GPUs x hours, and trials ask Slurm for no GPUs "
            "(resources.gpus_per_node is 0)") in proc.stderr


def test_on_slurm_the_cost_is_sacct_s_as_the_report_reads_it(tmp_path):
    store = Store(tmp_path / "store.sqlite")
    store.create_experiment("s", "name: s\n", "s.yaml", str(tmp_path), "random",
                            ["minimize"], 1)
    store.insert_trial(0, {"x": 1}, str(tmp_path / "t0"), {}, None)
    store.begin_attempt(0, 1, "first")
    store.mark_running(0, 1, "", None, None, None, "101")
    store.finish_attempt(0, 1, "failed", 1, "preempted", failure="node_fail")
    store.begin_attempt(0, 2, "retry")
    store.mark_running(0, 2, "", None, None, None, "102")
    asked: list[list[str]] = []

    def sacct(ids):
        asked.append(ids)
        return [JobUsage("101", "NODE_FAIL", 600.0, 2, 8, 16),
                JobUsage("102", "COMPLETED", 1200.0, 2, 8, 16)]

    said: list[str] = []
    costs = Costs(["acc", "gpu_hours", "node_hours", "wall_s"], store, said.append, sacct)
    measured = costs.measure(0, {"acc"})
    assert asked == [["101", "102"]]
    assert measured == {"gpu_hours": pytest.approx(8 * 1800 / 3600),
                        "node_hours": pytest.approx(2 * 1800 / 3600), "wall_s": 1800.0}

    def down(ids):
        raise SlurmError(["sacct", "-j", ",".join(ids)], 1, "sacct: error: slurmdbd is down")

    fallback = Costs(["wall_s"], store, said.append, down).measure(0, set())
    assert 0 <= fallback["wall_s"] < 60  # the store's times: just now
    assert said == ["trial 0: sacct failed, its cost is timed from the store: Slurm command "
                    "`sacct -j 101,102` exited 1: sacct: error: slurmdbd is down"]


@pytest.mark.slow  # 4.0 s in the quick tier (2026-11-30): over its 3 s rule
def test_the_cost_example_runs_locally_and_best_shows_its_front(cli):
    example = EXAMPLES / "cost" / "spec.yaml"
    assert "gpu_hours (measured by hpsearch)" in cli("validate", example, check=0).stdout
    text = example.read_text().replace("trials: 16", "trials: 4")
    spec = cli.write_spec(text + f"workdir: {example.parent}\n")  # where train.py is
    cli("submit", spec, "--no-tui", "-q", check=0)
    _, trials = read_store(cli.runs, "cost")
    assert [t.state for t in trials] == ["completed"] * 4
    shown = cli("best", "cost", check=0).stdout
    assert shown.startswith("Pareto front of cost: ")
    assert "(maximize val_acc, minimize gpu_hours)" in shown

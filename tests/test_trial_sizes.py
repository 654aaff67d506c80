"""Per-trial resources (docs/spec.md#per-trial-resources): a field of `resources` that names a
searched parameter. The spec's checks of every value, each trial's own resources, and each
place that reads them: the batch script, arrays (one per size), placement, retries, the
local executor's GPU slots and `plan`. On the emulated cluster: tests/slurm/test_trial_sizes.py.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from hpsearch.driver import retry
from hpsearch.errors import BadInput
from hpsearch.executors.slurm import SlurmExecutor
from hpsearch.launch.attempt import build_launch
from hpsearch.pilot import protocol
from hpsearch.pilot.fleet import pilot_job_parameters
from hpsearch.placement.planner import Planner
from hpsearch.preflight import parse_spec
from hpsearch.slurm.sbatch import batch_script
from hpsearch.spec.model import Resources, Retries, RetryRule, slot_width
from tests.helpers import read_store
from tests.test_planner import TOPOLOGY, TableSlurm

SIZED = """\
name: sizes
command: 'echo {lr}'
resources:
  nodes: "{nodes}"
  gpus_per_node: "{gpus}"
  time: "{limit}"
  mem: "{memory}"
search:
  strategy: grid
  space:
    lr: {choices: [0.1]}
    nodes: {choices: [1, 2]}
    gpus: {type: int, low: 1, high: 2}
    limit: {choices: ["00:30:00", 90]}
    memory: {value: 4G}
objective: {metric: loss}
executor: {type: slurm}
"""


def _spec(text: str = SIZED, base: Path = Path("/tmp")):
    return parse_spec(text, "spec.yaml", base)


def _bad(text: str) -> BadInput:
    with pytest.raises(BadInput) as caught:
        _spec(text)
    return caught.value


# -- the spec ------------------------------------------------------------------------------

def test_a_field_names_a_parameter_and_holds_the_largest_value_it_takes():
    res = _spec().resources
    assert res.per_trial == (("nodes", "nodes"), ("gpus_per_node", "gpus"), ("time", "limit"),
                             ("mem", "memory"))
    # the search-wide value: what a pilot or the local GPU slots must allow for
    assert (res.nodes, res.gpus_per_node, res.time, res.mem) == (2, 2, "90", "4G")


def test_each_trial_has_its_own_resources_from_its_parameters():
    res = _spec().resources
    own = res.for_params({"lr": 0.1, "nodes": 2, "gpus": 1, "limit": "00:30:00",
                          "memory": "4G"})
    assert own == Resources(nodes=2, gpus_per_node=1, time="00:30:00", mem="4G")
    assert own.size() == "nodes=2 tasks_per_node=1 gpus_per_node=1 cpus_per_task=1 " \
                         "mem=4G time=00:30:00"
    assert res.for_params({"nodes": 1, "gpus": 2, "limit": 90, "memory": "4G"}).time == "90"
    fixed = Resources(nodes=3)
    assert fixed.for_params({"nodes": 1}) is fixed  # no per-trial field: the spec's own


def test_a_parameter_that_only_sizes_trials_need_not_be_in_the_command():
    spec = _spec(SIZED.replace("echo {lr}", "echo {lr} {nodes}"))
    assert spec.resources.nodes == 2  # either way valid


@pytest.mark.parametrize("change, line, key, message", [
    (("nodes: {choices: [1, 2]}", "nodes: {choices: [1, 0]}"), 12,
     "search.space.nodes.choices[1]", "expected an integer >= 1; got 0 (resources.nodes is "
                                      "\"{nodes}\": every value of 'nodes' must be a valid nodes)"),
    (("gpus: {type: int, low: 1, high: 2}", "gpus: {type: int, low: -1, high: 2}"), 13,
     "search.space.gpus.low", "expected an integer >= 0; got -1"),
    (("limit: {choices: [\"00:30:00\", 90]}", "limit: {choices: [\"00:30:00\", 1h]}"), 14,
     "search.space.limit.choices[1]", "expected a Slurm time"),
    (("memory: {value: 4G}", "memory: {value: lots}"), 15, "search.space.memory.value",
     "expected a size such as 4G"),
    (('nodes: "{nodes}"', 'nodes: "{node}"'), 4, "resources.nodes",
     '"{node}" names no parameter in search.space; did you mean {nodes}?'),
    (('nodes: "{nodes}"', 'nodes: "{nodes}x"'), 4, "resources.nodes",
     'expected a value, or exactly "{name}" naming a parameter'),
    (('nodes: "{nodes}"', 'nodes: "{lr}"'), 11, "search.space.lr.choices[0]",
     "expected an integer; got a number 0.1"),
    (("  mem: \"{memory}\"\n", "  mem: \"{memory}\"\n  partition: \"{memory}\"\n"), 8,
     "resources.partition", "partition cannot take a parameter's value"),
])
def test_a_bad_value_is_named_at_its_file_line_and_key(change, line, key, message):
    exc = _bad(SIZED.replace(*change))
    assert (exc.file, exc.line, exc.key) == ("spec.yaml", line, key), str(exc)
    assert message in exc.detail, exc.detail


def test_a_float_range_or_a_conditional_parameter_cannot_size_a_trial():
    floaty = SIZED.replace("strategy: grid", "strategy: random\n  trials: 2").replace(
        "lr: {choices: [0.1]}", "lr: {low: 0.1, high: 1.0}").replace('"{nodes}"', '"{lr}"')
    exc = _bad(floaty)
    assert (exc.line, exc.key) == (4, "resources.nodes")
    assert "parameter 'lr' is a float range" in exc.detail
    conditional = SIZED.replace("lr: {choices: [0.1]}", "lr: {choices: [0.1, 0.2]}").replace(
        "nodes: {choices: [1, 2]}", "nodes: {choices: [1, 2], when: {lr: 0.1}}")
    exc = _bad(conditional)
    assert exc.key == "resources.nodes" and "exists only in some trials" in exc.detail


def test_pilots_take_per_trial_sizes_in_slots_of_the_smallest_trial():
    pilots = "executor: {type: slurm, pilots: {nodes: 2, time: '02:00:00', slots_per_node: 4}}"
    sized = SIZED.replace("memory: {value: 4G}", "memory: {choices: [2G, 4G, 3000]}")
    spec = _spec(sized.replace("executor: {type: slurm}", pilots))
    job = spec.slurm_job()
    assert job.resources.nodes == 2 and job.node_sizes == (1, 2)
    # a slot is the smallest trial's share of a node: 1 GPU, 2G; a 2-GPU trial takes 2 slots
    assert (job.slot.nodes, job.slot.gpus_per_node, job.slot.mem) == (1, 1, "2G")
    assert (job.resources.gpus_per_node, job.resources.mem) == (2, "4G")
    assert slot_width(spec.resources.for_params(_params(1, 2)), job.slot) == 2
    assert slot_width(spec.resources.for_params({**_params(2, 1), "memory": "2G"}),
                      job.slot) == 1
    assert slot_width(spec.resources.for_params({**_params(2, 1), "memory": "3000"}),
                      job.slot) == 2  # 3000 MB: more than one slot's 2048
    # the pilot job asks for its slots: 4 per node of the smallest trial's GPUs and memory
    asked = pilot_job_parameters(job, "p")
    assert asked["gpus_per_node"] == 4 and asked["additional_parameters"]["mem"] == "8192M"
    exc = _bad(sized.replace("executor: {type: slurm}", pilots.replace("slots_per_node: 4",
                                                                       "slots_per_node: 1")))
    assert exc.key == "executor.pilots.slots_per_node" and "takes 2 slots of a node" in exc.detail
    exc = _bad(sized.replace("executor: {type: slurm}", pilots.replace("nodes: 2", "nodes: 1")))
    assert exc.key == "executor.pilots.nodes" and "cannot hold a trial of 2 nodes" in exc.detail


def test_an_assignment_carries_its_trials_own_size_and_time_limit():
    spec = _spec(SIZED.replace("executor: {type: slurm}", "executor: {type: slurm, pilots: "
                               "{nodes: 2, time: '02:00:00', slots_per_node: 2}}"))
    launch = build_launch(spec.trial_recipe(True), 3, 1, _params(2, 2, 90))
    data = protocol.launch_to_dict(launch, 2)
    assert {k: data[k] for k in ("nodes", "gpus_per_node", "tasks_per_node", "time", "width",
                                 "mem_mb")} \
        == {"nodes": 2, "gpus_per_node": 2, "tasks_per_node": 1, "time": 5400.0, "width": 2,
            "mem_mb": 4096}


def test_submit_refuses_a_bad_size_with_exit_2_and_writes_nothing(cli):
    path = cli.write_spec(SIZED.replace("[1, 2]", "[2, 0]"))
    proc = cli("submit", path, "--no-tui", "-q")
    assert proc.returncode == 2
    assert "spec.yaml:12: search.space.nodes.choices[1]: expected an integer >= 1" in proc.stderr
    assert not cli.runs.exists()


# -- what reads a trial's resources ---------------------------------------------------------

def _params(nodes: int, gpus: int, limit="00:30:00") -> dict:
    return {"lr": 0.1, "nodes": nodes, "gpus": gpus, "limit": limit, "memory": "4G"}


def test_each_trial_gets_a_batch_script_of_its_own_size():
    spec = _spec()
    small = batch_script(spec.slurm_job(), build_launch(spec.trial_recipe(True), 0, 1, _params(1, 1)))
    large = batch_script(spec.slurm_job(), build_launch(spec.trial_recipe(True), 1, 1, _params(2, 2, 90)))
    for text, nodes, gpus, limit in ((small, 1, 1, "00:30:00"), (large, 2, 2, "90")):
        assert f"#SBATCH --nodes={nodes}\n" in text
        assert f"#SBATCH --gres=gpu:{gpus}\n" in text
        assert f"#SBATCH --time={limit}\n" in text
        assert "#SBATCH --mem=4G\n" in text
    assert "WORLD_SIZE=1 " in small  # the launcher's layout is the trial's too


def test_a_retry_scales_the_trials_own_time_limit():
    spec = _spec()
    rules = Retries(rules=(("timeout", RetryRule(max=1, time_factor=2.0)),))
    history = [retry.Attempt(1, "timeout", None, None)]
    for limit, doubled in (("00:30:00", "0-01:00:00"), (90, "0-03:00:00")):
        own = spec.resources.for_params(_params(1, 1, limit))
        plan = retry.next_overrides(rules, own, history, {})
        assert plan.sbatch_extra == (f"--time={doubled}",)


class _Recorder:
    """Stands in for the Slurm command runner: records each batch script, answers ids."""

    def __init__(self) -> None:
        self.scripts: list[str] = []

    def max_array_size(self) -> int:
        return 1000

    def config_value(self, key: str) -> str:
        return "topology/none"

    def sbatch(self, script: str) -> str:
        self.scripts.append(script)
        return str(100 + len(self.scripts))


def test_single_node_trials_go_in_one_array_per_size(tmp_path):
    spec = _spec(SIZED.replace("executor: {type: slurm}",
                               f"runs_dir: {tmp_path}\nexecutor: {{type: slurm}}"))
    slurm = _Recorder()
    executor = SlurmExecutor(spec.slurm_job(), slurm)
    sizes = [(1, 1), (1, 2), (1, 1), (2, 1), (1, 2), (1, 1)]
    for trial, (nodes, gpus) in enumerate(sizes):
        executor.submit(build_launch(spec.trial_recipe(True), trial, 1, _params(nodes, gpus)))
    assert len(slurm.scripts) == 1  # the 2-node trial: a job of its own, at once
    assert "#SBATCH --nodes=2\n" in slurm.scripts[0]
    started = executor._submit_waiting()
    arrays = slurm.scripts[1:]
    assert len(arrays) == 2 and {s.trial_id for s in started} == {0, 1, 2, 4, 5}
    one, two = arrays
    assert "#SBATCH --array=0-2%1\n" in one and "#SBATCH --gres=gpu:1\n" in one
    assert re.search(r"trials 0 \(attempt 1\), 2 \(attempt 1\), 5 \(attempt 1\)", one)
    assert "#SBATCH --array=0-1%1\n" in two and "#SBATCH --gres=gpu:2\n" in two
    assert re.search(r"trials 1 \(attempt 1\), 4 \(attempt 1\)", two)


def test_placement_finds_nodes_for_each_trials_own_size(tmp_path):
    (tmp_path / "topology.conf").write_text(TOPOLOGY)
    spec = parse_spec(textwrap.dedent("""\
        name: p
        command: 'echo {x}'
        search: {strategy: random, trials: 4, space: {x: {low: 0, high: 1},
                                                      nodes: {choices: [1, 2, 4]}}}
        objective: {metric: loss}
        resources: {nodes: "{nodes}"}
        executor: {type: slurm}
        placement: {topology: topology.conf, max_wait: 60}
        """), "spec.yaml", tmp_path)
    plan = Planner(spec.slurm_job(), TableSlurm(busy={"node1", "node3"}))
    assert plan.choose(0, 1, nodes=4).options == ("--nodelist=node[5-8]",)  # the one leaf
    assert plan.choose(1, 1, nodes=2).wait  # no leaf has 2 free nodes left: it waits
    assert plan.choose(2, 1, nodes=1).options == ()  # a single node goes in an array


def test_local_trials_of_one_and_two_gpus_share_two_gpu_slots(cli):
    spec = cli.write_spec("""
        name: gpus
        command: >-
          echo "$CUDA_VISIBLE_DEVICES" > "$HPSEARCH_TRIAL_DIR/devices"; sleep 0.3;
          echo "@hpsearch step=0 loss={x}"
        search:
          strategy: grid
          parallel: 2
          space:
            x: {choices: [0.1, 0.2, 0.3]}
            gpus: {choices: [1, 2]}
        objective: {metric: loss}
        resources: {gpus_per_node: "{gpus}"}
        executor: {type: local, gpus: [0, 1]}
        """)
    cli("submit", spec, "--no-tui", "-q", check=0)
    _, trials = read_store(cli.runs, "gpus")
    assert len(trials) == 6
    devices = {}
    for t in trials:
        seen = (cli.runs / "gpus" / "trials" / f"{t.id:05d}" / "devices").read_text().split()
        devices[t.id] = seen[0].split(",")
        assert len(devices[t.id]) == t.params["gpus"] and t.gpus == seen[0]
    for a in trials:  # trials that overlapped in time never shared a GPU
        for b in trials:
            if a.id < b.id and a.started < b.finished and b.started < a.finished:
                assert not set(devices[a.id]) & set(devices[b.id]), (a.id, b.id)
                assert a.params["gpus"] == b.params["gpus"] == 1


def test_plan_shows_each_trials_size(cli):
    spec = cli.write_spec(SIZED.replace("executor: {type: slurm}", "executor: {type: local}"))
    proc = cli("plan", spec, "--limit", "0", check=0)
    sizes = re.findall(r"size: (.*)", proc.stdout)
    assert len(sizes) == 8
    assert "nodes=1 tasks_per_node=1 gpus_per_node=1 cpus_per_task=1 mem=4G time=00:30:00" \
        in sizes
    assert "nodes=2 tasks_per_node=1 gpus_per_node=2 cpus_per_task=1 mem=4G time=90" in sizes
    shown = cli("validate", spec, check=0).stdout
    assert "resources per trial: nodes from {nodes}, gpus_per_node from {gpus}, time from " \
           "{limit}, mem from {memory} (the largest: nodes=2 " in shown
    fixed = cli.write_spec("""
        name: one
        command: 'echo {x}'
        search: {strategy: grid, space: {x: {choices: [1, 2]}}}
        objective: {metric: loss}
        """, "one.yaml")
    assert "size:" not in cli("plan", fixed, check=0).stdout  # one size: nothing new to show


class _QuietAccounting(_Recorder):
    """Slurm whose accounting has not yet written a job's record (sacct: nothing), as
    slurmdbd lags behind slurmctld; squeue lists what is in `queue`."""

    def __init__(self) -> None:
        super().__init__()
        self.queue: dict[str, str] = {}
        self.cancelled: list[str] = []

    def sacct_runs(self, job_ids):
        return {}

    def squeue(self, job_ids=None):
        from hpsearch.slurm.parse import QueueRecord
        return [QueueRecord(j, None, None, state, None, ("node1",))
                for j, state in self.queue.items() if job_ids is None or j in job_ids]

    def scancel(self, job_ids, signal=None):
        self.cancelled += job_ids

    def job_record(self, job_id):
        return None


def test_a_stopped_job_that_left_the_queue_ends_before_sacct_lists_it(tmp_path):
    """A pruned trial's job, scancelled and gone from squeue, has ended: its slot is free
    at once, not when slurmdbd writes its record (the test cluster took 4 s for array
    tasks; benchmarks/peers_cluster.py's job-array row went from 17-18 s to 11 s)."""
    spec = _spec(SIZED.replace("executor: {type: slurm}",
                               f"runs_dir: {tmp_path}\nexecutor: {{type: slurm, "
                               "poll_interval: 0.01}"))
    slurm = _QuietAccounting()
    executor = SlurmExecutor(spec.slurm_job(), slurm)
    executor.submit(build_launch(spec.trial_recipe(True), 0, 1, _params(1, 1)))
    job_id = "101"
    slurm.queue[job_id] = "RUNNING"
    events = [e for _ in range(50) for e in executor.poll(0.01)]
    assert any(getattr(e, "sched_state", None) == "RUNNING" for e in events), events
    executor.cancel(0)
    events = [e for _ in range(5) for e in executor.poll(0.01)]
    assert slurm.cancelled == [job_id] and not any(hasattr(e, "reason") for e in events)
    del slurm.queue[job_id]  # Slurm ended it; sacct does not list it yet
    ended = [e for _ in range(50) for e in executor.poll(0.01) if hasattr(e, "reason")]
    assert [(e.trial_id, e.reason) for e in ended] == [(0, "cancelled")], ended
    assert "its accounting record not written yet" in ended[0].detail

"""The placement planner's bookkeeping, without a cluster: node state is sinfo text in the
format of tests/slurm/captured/sinfo_nodes_*.txt, parsed by the real parser and served by a
stand-in for the command runner. The planner against real Slurm is in
tests/slurm/test_placement.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpsearch.errors import BadInput
from hpsearch.placement import planner as planner_mod
from hpsearch.placement.planner import Planner
from hpsearch.preflight import parse_spec
from hpsearch.slurm.parse import parse_sinfo_nodes

TOPOLOGY = "SwitchName=leaf1 Nodes=node[1-2]\nSwitchName=leaf2 Nodes=node[3-4]\n" \
           "SwitchName=leaf3 Nodes=node[5-8]\n"


class TableSlurm:
    """Answers sinfo with a node table (busy nodes allocated, others idle); counts calls."""

    def __init__(self, busy: set[str]) -> None:
        self.busy, self.sinfo_calls = busy, 0

    def config_value(self, key: str) -> str:
        return "topology/none"

    def sinfo_nodes(self):
        self.sinfo_calls += 1
        lines = [f"node{i}|{'allocated' if f'node{i}' in self.busy else 'idle'}|debug*|none"
                 for i in range(1, 9)]
        return parse_sinfo_nodes("\n".join(lines) + "\n")


def _planner(tmp_path: Path, busy: set[str], nodes: int = 2, extra: str = "") -> Planner:
    (tmp_path / "topology.conf").write_text(TOPOLOGY)
    spec = parse_spec(f"""
name: p
command: 'echo {{x}}'
search: {{strategy: random, trials: 4, space: {{x: {{low: 0, high: 1}}}}}}
objective: {{metric: loss}}
resources: {{nodes: {nodes}}}
executor: {{type: slurm, array: false}}
placement: {{topology: topology.conf, max_wait: 60, replan_after: 1{extra}}}
""", "spec.yaml", tmp_path)
    return Planner(spec.slurm_job(), TableSlurm(busy))


def test_two_trials_in_one_burst_never_get_the_same_nodes(tmp_path):
    plan = _planner(tmp_path, busy={"node1", "node3"})
    first = plan.choose(0, 1)
    second = plan.choose(1, 1)
    assert first.options == ("--nodelist=node[5-6]",) and first.leaves == ("leaf3",)
    assert second.options == ("--nodelist=node[7-8]",)  # leaf3's other two, not the same
    assert plan.choose(2, 1).wait  # no leaf has two free nodes left: hold it
    assert plan.slurm.sinfo_calls == 1  # one sinfo reading serves the burst


def test_a_started_job_releases_its_promise_and_best_fit_packs(tmp_path):
    plan = _planner(tmp_path, busy={"node1", "node3"}, nodes=1)
    assert plan.choose(0, 1).options == ("--nodelist=node2",)  # a lone free node first
    assert plan.choose(1, 1).options == ("--nodelist=node4",)
    plan.started(0, 1)
    assert plan.choose(2, 1).options == ("--nodelist=node2",)


def test_replan_moves_a_pending_job_only_to_other_free_nodes(tmp_path, monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(planner_mod.time, "monotonic", lambda: clock[0])
    plan = _planner(tmp_path, busy={"node1", "node3"})
    assert plan.choose(0, 1).options == ("--nodelist=node[5-6]",)
    assert plan.replan(0, 1) is None  # not pending long enough
    clock[0] += 2
    assert plan.replan(0, 1) is None  # node[5-6] are still the best choice
    plan.slurm.busy |= {"node5"}  # someone else took one of them meanwhile
    clock[0] += 6  # past the node state's refresh (executor.poll_interval, 5 s)
    moved = plan.replan(0, 1)
    assert moved.options == ("--nodelist=node[6-7]",) and moved.leaves == ("leaf3",)


def test_replanning_many_pending_jobs_reads_node_state_once_per_poll_interval(
        tmp_path, monkeypatch):
    """Each pending job re-planned used to read sinfo afresh: 40 pending jobs, 40 sinfo
    calls per round. The calls per minute must not grow with the jobs in flight."""
    clock = [100.0]
    monkeypatch.setattr(planner_mod.time, "monotonic", lambda: clock[0])
    plan = _planner(tmp_path, busy=set(), nodes=1)
    for trial in range(40):
        plan.choose(trial, 1)
    for _ in range(3):  # three rounds of re-planning, one poll_interval (5 s) apart
        clock[0] += 5.5
        for trial in range(40):
            plan.replan(trial, 1)
    assert plan.slurm.sinfo_calls == 1 + 3, plan.slurm.sinfo_calls


def test_policy_any_and_arrays_place_nothing(tmp_path):
    assert _planner(tmp_path, set(), extra=", policy: any").choose(0, 1).options == ()
    array = _planner(tmp_path, set(), nodes=1)
    array.array = True
    array._mode = None
    assert array.choose(0, 1).options == ()


def test_a_bad_topology_file_is_bad_input_at_submit(tmp_path):
    (tmp_path / "topology.conf").write_text("SwitchName=leaf1 Nodes=node[1-\n")
    spec = parse_spec("""
name: p
command: 'echo {x}'
search: {strategy: random, trials: 1, space: {x: {low: 0, high: 1}}}
objective: {metric: loss}
executor: slurm
placement: {topology: topology.conf}
""", "spec.yaml", tmp_path)
    with pytest.raises(BadInput, match="topology.conf:1"):
        Planner(spec.slurm_job(), TableSlurm(set()))


@pytest.mark.parametrize("placement, message", [
    ("{policy: leaf}", "unknown placement policy 'leaf'"),
    ("{max_wait: soon}", "expected a positive duration"),
    ("{mode: tree}", "unknown placement mode 'tree'"),
    ("{polcy: any}", "did you mean 'policy'"),
])
def test_bad_placement_keys_name_the_line_and_key(tmp_path, placement, message):
    with pytest.raises(BadInput, match=message) as info:
        parse_spec(f"""name: p
command: 'echo {{x}}'
search: {{strategy: random, trials: 1, space: {{x: {{low: 0, high: 1}}}}}}
objective: {{metric: loss}}
placement: {placement}
""", "spec.yaml", tmp_path)
    assert info.value.line == 5 and "placement" in str(info.value)


def test_nodes_a_retry_excludes_are_never_named(tmp_path):
    plan = _planner(tmp_path, busy={"node1", "node3"})
    chosen = plan.choose(0, 2, ("--mem=4G", "--exclude=node5"))
    assert chosen.options == ("--nodelist=node[6-7]",)

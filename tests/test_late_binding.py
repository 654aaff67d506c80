"""`executor.bind: late` without a cluster: which sites a job names, its `--partition=`, the
spec's checks, and which site a node belongs to (hpsearch.executors.late_binding; on the
emulated cluster: tests/slurm/test_late_binding.py)."""

from __future__ import annotations

import textwrap

import pytest

from hpsearch.errors import BadInput
from hpsearch.executors import late_binding
from hpsearch.preflight import load_spec
from hpsearch.slurm.parse import NodeState
from hpsearch.spec.model import Site, SitePilots
from tests.test_brokerage import SPEC

A, B = Site("a", partition="left"), Site("b", partition="right")


def test_a_job_names_the_open_sites_of_its_cluster_account_and_qos_only():
    others = [Site("c", partition="gpu", cluster="hpsearch2"),   # another cluster
              Site("d", partition="right", account="proj"),      # another account
              Site("e", partition="right", qos="low"),           # another qos
              Site("f", partition="big", pilots=SitePilots(nodes=2)),  # pilots of its own
              Site("g"),                                         # the default partition
              Site("h", partition="left")]                       # its own partition again
    assert late_binding.partners(A, [A, B, *others]) == [B]
    assert late_binding.partners(Site("g"), [A, B]) == []       # no partition to name
    assert late_binding.partition_list(A, [B]) == "left,right"
    assert late_binding.partition_list(B, [A]) == "right,left"  # its own first


def _load(tmp_path, tail):
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC + textwrap.indent(textwrap.dedent(tail), "  "))
    return load_spec(path)


def test_bind_defaults_to_late_and_takes_early(tmp_path):
    sites = "sites: [{partition: left}, {partition: right}]\n"
    assert _load(tmp_path, sites).executor.bind == "late"
    assert _load(tmp_path, sites + "bind: early\n").executor.bind == "early"
    assert _load(tmp_path, "pilots: {nodes: 1}\n" + sites).executor.pilots is not None


@pytest.mark.parametrize("tail, key, message", [
    ("sites: [{partition: a}]\nbind: soon\n", "executor.bind", "expected early or late"),
    ("bind: late\n", "executor.bind", "it needs executor.sites"),
    ("sites: [{partition: a}]\npilots: {nodes: 1}\nbind: late\n", "executor.bind",
     "pilots bind trials late already"),
])
def test_a_bad_bind_names_its_key_and_why(tmp_path, tail, key, message):
    with pytest.raises(BadInput) as caught:
        _load(tmp_path, tail)
    assert caught.value.key == key and message in str(caught.value), caught.value


class _Sinfo:
    """Answers sinfo_nodes() as a cluster of node1-4 in left, node5-8 in right and node5 in
    left too; counts the calls."""

    def __init__(self):
        self.calls = 0

    def sinfo_nodes(self):
        self.calls += 1
        return [NodeState(f"node{i}", "IDLE", "idle", frozenset(),
                          ("left",) if i < 5 else ("right", "left") if i == 5 else ("right",),
                          None) for i in range(1, 9)]


def test_the_site_of_a_node_is_the_one_sent_to_where_its_partition_has_it():
    sinfo = _Sinfo()
    nodes = late_binding.NodePartitions(sinfo)
    assert nodes.site_of("node2", A, [B]) == A
    assert nodes.site_of("node7", A, [B]) == B
    assert nodes.site_of("node5", A, [B]) == A  # in both: where it was sent
    assert nodes.site_of("node5", B, [A]) == B
    assert sinfo.calls == 1  # asked once
    assert nodes.site_of("node9", A, [B]) is None  # not known, and not asked again yet
    assert sinfo.calls == 1
    nodes.asked -= late_binding.REFRESH_AFTER  # later: a node it does not know is asked for
    assert nodes.site_of("node9", A, [B]) is None and sinfo.calls == 2


def test_plan_shows_each_job_waiting_in_its_site_s_partition_first_then_the_others(cli):
    """`plan` prints the batch scripts the jobs would have: with bind: late, the partitions
    of the sites of one cluster (its site's first); a site of another cluster stays alone."""
    spec = cli.write_spec(SPEC.replace("trials: 2", "trials: 3, parallel: 3") + """\
  bind: late
  sites:
    - {partition: left}
    - {partition: right}
    - {name: far, cluster: c2, partition: gpu}
""")
    out = cli("plan", spec, "--limit", "3", check=0).stdout
    assert "bind: late: a single-node job waits in the partitions" in out, out
    sites = [line for line in out.splitlines() if line.startswith("  site: ")]
    assert [s.split()[1] for s in sites] == ["left", "right", "far"], sites
    assert [line for line in out.splitlines() if line.startswith("#SBATCH --partition=")] \
        == ["#SBATCH --partition=left,right", "#SBATCH --partition=right,left",
            "#SBATCH --partition=gpu"], out

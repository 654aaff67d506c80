"""Where pilots go (hpsearch.pilot.places) and how many pending ones are not needed
(hpsearch.pilot.supply.Supply.surplus), without a cluster: the places are built from a real
spec (their Slurm objects run no command until asked), the pilots are plain records of
state. On the emulated cluster: tests/slurm/test_brokerage_pilots.py."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from hpsearch.pilot.places import Broker, make_places
from hpsearch.pilot.supply import Supply
from hpsearch.preflight import load_spec
from hpsearch.slurm.failures import TRANSIENT, SlurmError
from hpsearch.store import rows

SPEC = """\
name: p
command: echo {x}
search: {strategy: random, trials: 4, space: {x: {low: 0, high: 1}}}
objective: {metric: loss}
executor:
  type: slurm
  move_after: 30
  pilots: {max: 4, time: "00:10:00"}
  sites:
    - {partition: left}
    - {name: far, cluster: c2, max: 1}
"""


@dataclass
class Pilot:  # what the broker reads of hpsearch.pilot.fleet.PilotJob
    site: str | None
    state: str = rows.PILOT_PENDING
    stop_sent: bool = False
    submitted: float = field(default_factory=time.time)
    ended_as: str | None = None


def _broker(tmp_path, text=SPEC):
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    job = load_spec(path).slurm_job()
    broker = Broker(make_places(job, None), job.executor.move_after)
    broker.looked = math.inf  # no look at the sites' queues: these weigh the pilots alone
    return broker


def test_each_site_is_a_place_with_its_partition_and_cluster(tmp_path):
    broker = _broker(tmp_path)
    left, far = broker.places
    assert (left.name, left.job.resources.partition, left.slurm.cluster) == ("left", "left",
                                                                              None)
    assert (far.name, far.slurm.cluster) == ("far", "c2")
    assert left.health is not far.health  # a cluster that does not answer backs off alone


def test_a_site_s_own_pilot_size_decides_whether_its_pilot_starts_now(tmp_path):
    """Pilots of 2 nodes at left, of 4 at far (its own `pilots: {nodes: 4}`): with 3 idle
    nodes at each, only left's pilot starts now, so it goes there, and a pilot pending at
    far moves to left after brokerage.QUICK_MOVE; not the other way round."""
    broker = _broker(tmp_path, SPEC.replace("max: 4,", "max: 4, nodes: 2,").replace(
        "max: 1}", "max: 2, pilots: {nodes: 4}}"))
    assert broker.pilot_nodes == {"left": 2, "far": 4}
    assert [place.planner.k for place in broker.places] == [2, 4]  # each plans its own
    broker.loads["left"].idle = broker.loads["far"].idle = 3
    far_first = [Pilot("far", rows.PILOT_RUNNING)] * 3  # far's weight is the higher one
    assert broker.choose(far_first).name == "left"
    waiting = Pilot("far", submitted=time.time() - 3)
    assert [(p.site, place.name) for p, place in broker.stuck([waiting])] == [("far", "left")]
    broker.loads["left"].idle, broker.loads["far"].idle = 1, 5
    assert broker.stuck([Pilot("left", submitted=time.time() - 3)])[0][1].name == "far"


def test_pilots_alternate_between_equal_sites_and_max_caps_one(tmp_path):
    broker = _broker(tmp_path)
    pilots: list[Pilot] = []
    for _ in range(4):
        place = broker.choose(pilots)
        assert place is not None
        pilots.append(Pilot(place.name))
    assert [p.site for p in pilots] == ["left", "far", "left", "left"]  # far: max 1


def test_a_site_whose_pilots_run_takes_more_and_a_backing_off_one_none(tmp_path):
    broker = _broker(tmp_path, SPEC.replace(", max: 1", ""))
    pilots = [Pilot("left", rows.PILOT_RUNNING), Pilot("far")]
    assert broker.choose(pilots).name == "left"  # (1+1)/(0+10) against (0+1)/(1+10)
    broker.places[0].health.submit_failed(SlurmError(["sbatch"], 1, "timed out"), TRANSIENT)
    assert broker.choose(pilots).name == "far"
    broker.places[1].health.submit_failed(SlurmError(["sbatch"], 1, "timed out"), TRANSIENT)
    assert broker.choose(pilots) is None


def test_a_pilot_pending_past_move_after_moves_to_a_site_with_nothing_pending(tmp_path):
    broker = _broker(tmp_path)
    old = Pilot("left", submitted=time.time() - 31)
    assert [(p, place.name) for p, place in broker.stuck([old])] == [(old, "far")]
    young = Pilot("left", submitted=time.time() - 5)
    assert broker.stuck([young]) == []
    # nowhere to go: far has one of ours pending (and is full)
    assert broker.stuck([old, Pilot("far")]) == []
    # a stopped pilot is not moved again; a running one is not pending
    assert broker.stuck([Pilot("left", stop_sent=True, submitted=0.0)]) == []
    assert broker.stuck([Pilot("left", rows.PILOT_RUNNING, submitted=0.0)]) == []
    never = _broker(tmp_path, SPEC.replace("move_after: 30", "move_after: false"))
    assert never.stuck([old]) == []


def test_waits_and_failures_are_the_sites_measures(tmp_path):
    broker = _broker(tmp_path)
    broker.started(Pilot("left", submitted=time.time() - 4))
    broker.ended(Pilot("far", ended_as="NODE_FAIL"))
    broker.failed(Pilot("far"))
    assert 3.9 < broker.loads["left"].waits[0] < 5
    assert len(broker.loads["far"].failures) == 2 and broker.loads["far"].ended == 1
    lines = broker.describe()
    assert lines[0].startswith("left: weight ") and "2 site failures" in lines[1], lines


def test_pending_pilots_beyond_what_the_ready_trials_need_are_surplus():
    supply = Supply(max_pilots=4, trials_per_pilot=2)
    assert supply.surplus(ready=0, free_running=0, pending=2) == 2  # nothing waits
    assert supply.surplus(ready=3, free_running=1, pending=2) == 1  # 2 wait: one pilot
    assert supply.surplus(ready=5, free_running=0, pending=2) == 0  # 5 wait: 3 pilots
    assert supply.surplus(ready=2, free_running=2, pending=1) == 1  # the running take them


def test_a_pilot_pending_at_a_busy_site_moves_at_once_where_nodes_are_idle(tmp_path):
    """A pending pilot moves after brokerage.QUICK_MOVE, not move_after, to a site with idle
    nodes for it (the sites' looks set idle); one move per idle node."""
    broker = _broker(tmp_path, SPEC.replace(", max: 1", ""))
    broker.loads["left"].idle, broker.loads["far"].idle = 0, 1
    waited = [Pilot("left", submitted=time.time() - 3) for _ in range(2)]
    assert [place.name for _, place in broker.stuck(waited)] == ["far"]  # far's one node
    broker.loads["far"].idle = 0
    assert broker.stuck(waited) == []  # nowhere idle, and younger than move_after (30 s)

"""The broker that splits a search's trials across sites (`executor.sites`, issue 40,
docs/brokerage.md): JEDI's weight (running + 1) / (pending + 10), a site skipped while its
backlog is over twice what it runs, failures of the site halving its weight for a while,
and `max` capping what it holds; and the spec's `executor.sites`, checked at its line."""

from __future__ import annotations

import textwrap

import pytest

from hpsearch.errors import BadInput
from hpsearch.executors import brokerage
from hpsearch.executors.brokerage import SiteLoad
from hpsearch.executors.registry import chosen
from hpsearch.preflight import load_spec
from hpsearch.spec.model import Site

A, B = Site("a", partition="left"), Site("b", partition="right")


def _split(sites, loads, trials, now=0.0):
    """Where `trials` trials go, one after another, each adding to its site's pending."""
    went = []
    for _ in range(trials):
        site = brokerage.choose(sites, loads, now)
        if site is None:
            break
        loads[site.name].pending += 1
        went.append(site.name)
    return went


def test_equal_sites_take_turns_and_the_first_of_a_tie_goes_first():
    loads = {"a": SiteLoad(), "b": SiteLoad()}
    assert _split([A, B], loads, 4) == ["a", "b", "a", "b"]


def test_a_site_whose_jobs_run_takes_more_than_one_whose_jobs_pend():
    loads = {"a": SiteLoad(running=4), "b": SiteLoad(pending=3)}
    went = _split([A, B], loads, 6)
    assert went.count("a") == 6, went  # b: (0+1)/(3+10) against a: (4+1)/(k+10)
    assert brokerage.verdict(A, SiteLoad(running=4), 0).weight == pytest.approx(0.5)
    assert brokerage.verdict(B, SiteLoad(pending=3), 0).weight == pytest.approx(1 / 13)


def test_a_backlog_over_twice_what_runs_skips_the_site_and_all_skipped_is_none():
    assert brokerage.verdict(A, SiteLoad(pending=4), 0).skipped is None  # bootstrap: 2 x 2
    skipped = brokerage.verdict(A, SiteLoad(pending=5), 0).skipped
    assert skipped and "backlog (5 pending against 0 running)" in skipped
    assert brokerage.verdict(A, SiteLoad(running=3, pending=6), 0).skipped is None
    assert brokerage.choose([A, B], {"a": SiteLoad(pending=5), "b": SiteLoad(pending=9)},
                            0) is None


def test_max_caps_a_site_and_the_rest_goes_elsewhere():
    small = Site("a", partition="left", max=2)
    loads = {"a": SiteLoad(), "b": SiteLoad()}
    assert _split([small, B], loads, 5) == ["a", "b", "a", "b", "b"]
    assert "full (2 of max 2 in flight)" in brokerage.verdict(small, loads["a"], 0).skipped


def test_the_weight_setting_scales_a_site():
    heavy = Site("a", partition="left", weight=3.0)  # first, up to the backlog's limit
    assert _split([B, heavy], {"a": SiteLoad(), "b": SiteLoad()}, 7) == ["a"] * 5 + ["b"] * 2


def test_a_site_that_fails_is_backed_off_and_recovers_as_the_failures_fade():
    failed = SiteLoad(failures=[1000.0, 1000.0])
    assert brokerage.failure_factor(failed.failures, 1000.0) == pytest.approx(0.25)
    later = 1000.0 + 3 * brokerage.FAILURE_HALF_LIFE
    assert brokerage.failure_factor(failed.failures, later) == pytest.approx((1 - 0.5 / 8) ** 2)
    loads = {"a": failed, "b": SiteLoad()}
    assert _split([A, B], loads, 3, now=1000.0) == ["b", "b", "b"]
    assert _split([A, B], {"a": failed, "b": SiteLoad()}, 3, now=later) == ["b", "b", "a"]


def test_a_site_whose_slurm_does_not_answer_is_skipped_until_it_does():
    """Its controller down (benchmarks/brokerage.py's clusters scenario found trials sent
    there and held until it came back): the others take every trial meanwhile."""
    down = SiteLoad(running=3, unreachable="its queries fail")
    assert brokerage.verdict(A, down, 0).skipped == "unreachable (its queries fail)"
    assert _split([A, B], {"a": down, "b": SiteLoad()}, 3) == ["b", "b", "b"]
    assert _split([A, B], {"a": SiteLoad(running=3), "b": SiteLoad()}, 3) == ["a", "a", "a"]


def test_describe_says_the_weight_the_counts_and_why_skipped():
    load = SiteLoad(running=1, pending=5, waits=[2.0, 4.0, 9.0], ended=3)
    line = brokerage.describe(brokerage.verdict(A, load, 0), load)
    assert line == ("a: weight 0.133 (1 running, 5 pending, 3 ended, median queue wait "
                    "4.0 s); skipped: backlog (5 pending against 1 running)")


SPEC = """\
name: s
command: echo {x}
search: {strategy: random, trials: 2, space: {x: {low: 0, high: 1}}}
objective: {metric: loss, direction: minimize}
executor:
  type: slurm
"""


def _load(tmp_path, executor_tail):
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC + textwrap.indent(textwrap.dedent(executor_tail), "  "))
    return load_spec(path)


def test_sites_in_the_spec_choose_the_sites_executor_with_names_and_defaults(tmp_path):
    spec = _load(tmp_path, """\
        sites:
          - {partition: left, max: 3}
          - {name: other, cluster: hpsearch2, partition: debug, account: proj, qos: low,
             weight: 0.5}
          - {cluster: hpsearch2}
        """)
    assert spec.executor.sites == (
        Site("left", partition="left", max=3),
        Site("other", partition="debug", cluster="hpsearch2", account="proj", qos="low",
             weight=0.5),
        Site("hpsearch2", cluster="hpsearch2"))
    assert chosen(spec.executor).facts.name == "sites"
    assert chosen(_load(tmp_path, "array: true\n").executor).facts.name == "slurm"


@pytest.mark.parametrize("tail, line, key, message", [
    ("sites: []\n", 7, "executor.sites", "a non-empty list of sites"),
    ("sites: [{partition: a}, {partition: a}]\n", 7, "executor.sites[1]",
     "two sites are named 'a'"),
    ("sites:\n  - {partition: a, max: 0}\n", 8, "executor.sites[0].max", ">= 1"),
    ("sites:\n  - {partition: a, weight: -1}\n", 8, "executor.sites[0].weight", "a number > 0"),
    ("sites:\n  - {partition: 'a b'}\n", 8, "executor.sites[0].partition", "Slurm partition"),
    ("sites:\n  - {partition: a, nodes: 2}\n", 8, "executor.sites[0].nodes", "unknown key"),
])
def test_a_bad_site_names_its_key_and_line(tmp_path, tail, line, key, message):
    with pytest.raises(BadInput) as caught:
        _load(tmp_path, tail)
    assert (caught.value.line, caught.value.key) == (line, key), caught.value
    assert message in str(caught.value)


def test_sites_need_slurm(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC.replace("type: slurm", "type: local") + "  sites: [{partition: a}]\n")
    with pytest.raises(BadInput, match="sites are Slurm partitions or clusters"):
        load_spec(path)


def test_plan_shows_the_sites_the_split_of_the_first_trials_and_each_trial_s_site(cli):
    spec = cli.write_spec(SPEC.replace("trials: 2", "trials: 5, parallel: 4, seed: 1") + """\
  sites:
    - {partition: left, max: 1}
    - {name: far, cluster: c2, partition: gpu, qos: low}
resources: {time: "auto 00:30:00", scouts: 2}
""")
    out = cli("plan", spec, "--limit", "5", check=0).stdout
    assert "sites: 2, each trial to the best weight" in out, out
    assert "  left: partition left, max 1, weight 1; 1 of the first 4 trials" in out, out
    assert "  far: partition gpu, cluster c2, qos low, weight 1; 3 of the first 4 trials" in out
    assert "scouts: the first 2 trials ask for the ceiling (time 00:30:00)" in out, out
    sites = [line for line in out.splitlines() if line.startswith("  site: ")]
    assert sites[:4] == ["  site: left", "  site: far (cluster c2: sbatch -M c2)",
                         "  site: far (cluster c2: sbatch -M c2)",
                         "  site: far (cluster c2: sbatch -M c2)"], sites
    assert sites[4].endswith("(shown as an example: decided when it is launched)"), sites
    assert out.count("#SBATCH --partition=gpu") == 3 and "#SBATCH --qos=low" in out, out


def test_plan_of_pilots_over_sites_splits_the_first_pilots_and_binds_no_trial_to_a_site(cli):
    """With pilots the broker places pilots, not trials: each trial runs in whichever
    pilot starts first (hpsearch.pilot.places)."""
    spec = cli.write_spec(SPEC.replace("trials: 2", "trials: 3, parallel: 4") + """\
  pilots: {max: 3, time: "00:10:00"}
  sites:
    - {partition: left}
    - {name: far, cluster: c2, pilots: {nodes: 2, slots_per_node: 4}}
""")
    assert chosen(load_spec(spec).executor).facts.name == "pilots"
    out = cli("plan", spec, check=0).stdout
    assert "sites: 2, each pilot to the best weight (docs/brokerage.md); trials run in " \
        "whichever pilot starts first" in out, out
    assert "  left: partition left, weight 1; 2 of the first 3 pilots" in out, out
    assert "  far: cluster c2, weight 1; 1 of the first 3 pilots; its pilots: 2 nodes x 4 " \
        "slots for 00:10:00" in out, out
    assert "  site: " not in out, out
    # the first pilot's script is the first site's (its partition)
    assert "pilot 1's batch script (at site left):" in out and "#SBATCH --partition=left" \
        in out, out


def test_a_site_may_give_its_pilots_their_own_time_limit_and_size(tmp_path):
    from hpsearch.executors.sites import site_job
    from hpsearch.pilot.fleet import pilot_job_parameters
    spec = _load(tmp_path, """\
        pilots: {time: "01:00:00", nodes: 2, slots_per_node: 2, max: 4}
        sites:
          - {partition: short, pilots: {time: "00:20:00"}}
          - {partition: long}
          - {partition: fat, pilots: {nodes: 1, slots_per_node: 8}}
        """)
    short, long, fat = spec.executor.sites
    job = spec.slurm_job()
    pilots = [site_job(job, site).executor.pilots for site in (short, long, fat)]
    assert [(p.time, p.nodes, p.slots_per_node, p.max) for p in pilots] == [
        ("00:20:00", 2, 2, 4), ("01:00:00", 2, 2, 4), ("01:00:00", 1, 8, 4)]
    # the pilot's job asks for its site's size: a slot is one CPU here
    assert [(p["nodes"], p["cpus_per_task"]) for p in (
        pilot_job_parameters(site_job(job, site), "n") for site in (long, fat))] == [(2, 2), (1, 8)]


@pytest.mark.parametrize("tail, key, message", [
    ("pilots: true\nsites: [{partition: a, pilots: {}}]\n",
     "executor.sites[0].pilots", "a mapping such as {time:"),
    ("pilots: true\nsites: [{partition: a, pilots: {time: 5, max: 2}}]\n",
     "executor.sites[0].pilots.max", "unknown key"),
    ("pilots: true\nsites: [{partition: a, pilots: {nodes: 0}}]\n",
     "executor.sites[0].pilots.nodes", ">= 1"),
    ("sites: [{partition: a, pilots: {nodes: 2}}]\n",
     "executor.sites[0].pilots", "set executor.pilots too"),
    ("pilots: true\nsites: [{partition: a, pilots: {time: soon}}]\n",
     "executor.sites[0].pilots.time", "a Slurm time limit"),
])
def test_a_bad_site_pilot_setting_names_its_key(tmp_path, tail, key, message):
    with pytest.raises(BadInput) as caught:
        _load(tmp_path, tail)
    assert caught.value.key == key and message in str(caught.value), caught.value


def test_a_site_s_pilots_too_short_for_a_trial_are_refused(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC + """\
  pilots: {time: "01:00:00"}
  sites:
    - {partition: a}
    - {partition: b, pilots: {time: "00:05:00"}}
resources: {time: "00:10:00"}
""")
    with pytest.raises(BadInput) as caught:
        load_spec(path)
    assert caught.value.key == "executor.sites[1].pilots.time", caught.value
    assert "a pilot of time 00:05:00 could never start a trial of time 00:10:00" \
        in str(caught.value)


def test_a_site_where_a_trial_would_start_now_goes_first_and_others_jobs_weigh():
    """benchmarks/brokerage.py: JEDI's weight alone kept sending trials to the site that ran
    the most while the other had idle nodes. Idle nodes beyond what waits there go first;
    other users' jobs pending in a partition lower its weight as ours do."""
    loads = {"a": SiteLoad(running=4), "b": SiteLoad(idle=2)}
    assert brokerage.choose([A, B], loads, 0.0).name == "b"  # a weighs 0.5, b 0.1: b starts it now
    loads["b"].pending = 2  # ours fill b's idle nodes: back to the weight
    assert not loads["b"].starts_now() and brokerage.choose([A, B], loads, 0.0).name == "a"
    loads = {"a": SiteLoad(others=30), "b": SiteLoad()}
    assert brokerage.choose([A, B], loads, 0.0).name == "b"  # 1/40 against 1/10
    loads = {"a": SiteLoad(idle=3, others=3), "b": SiteLoad()}
    assert not loads["a"].starts_now()  # 3 idle, 3 others' jobs waiting for them
    two_nodes = {"a": SiteLoad(idle=1), "b": SiteLoad(idle=4)}
    assert brokerage.choose([A, B], two_nodes, 0.0, nodes=2).name == "b"
    line = brokerage.describe(brokerage.verdict(A, SiteLoad(others=3, idle=0), 0.0),
                    SiteLoad(others=3, idle=0))
    assert "3 others' jobs pending, 0 nodes idle" in line, line


def test_pending_jobs_that_idle_nodes_take_weigh_as_running():
    """benchmarks/brokerage.py's busy scenario (2026-11-30): at the start right had 4 idle
    nodes and left none, 2 of the other user's jobs queued ahead there. Right's first 4 jobs
    not yet seen running, the weight counted them as pending and sent 3 of the next 4 trials
    to left, where they waited behind the other user's jobs while right's nodes idled 1-3 s
    each at the end of its first wave. Counted as running (its idle nodes take them), right
    takes them all, and its backlog is what waits beyond its idle nodes."""
    loads = {"a": SiteLoad(idle=0, others=2), "b": SiteLoad(idle=4)}
    assert _split([A, B], loads, 8) == ["b"] * 8
    assert loads["b"].starting() == 4
    assert brokerage.verdict(B, loads["b"], 0).weight == pytest.approx(5 / 14)
    assert brokerage.verdict(B, SiteLoad(pending=12, idle=4), 0).skipped is None
    assert brokerage.verdict(B, SiteLoad(pending=13, idle=4), 0).skipped == (
        "backlog (9 pending against 4 running or starting)")
    assert SiteLoad(pending=3, idle=5, others=1).starting(nodes=2) == 2  # 2 jobs of 2 nodes
    assert SiteLoad(pending=3).starting() == 0  # idle nodes not known
    # where both start it now, the one with more idle nodes first: equal sites alternate
    both = {"a": SiteLoad(idle=4), "b": SiteLoad(idle=4)}
    assert _split([A, B], both, 8) == ["a", "b"] * 4


def test_a_pending_job_moves_at_once_to_a_site_with_idle_nodes_and_else_after_move_after():
    """benchmarks/brokerage.py's busy scenario: Slurm's own `--partition=a,b` starts a job
    wherever a node is idle, while moves after move_after alone left jobs pending at a site
    that had no node for them. A job pending QUICK_MOVE at a site with no idle node for it
    moves to one with idle nodes beyond what waits there; without idle nodes elsewhere, it
    moves after move_after to a site with nothing of ours pending, as before."""
    quick = brokerage.QUICK_MOVE

    def target(loads, waited, move_after=30.0, home="a"):
        site = brokerage.move_target([A, B], loads, 0.0, home, waited, move_after)
        return None if site is None else site.name

    busy_a = {"a": SiteLoad(running=4, pending=2, idle=0), "b": SiteLoad(running=3, idle=1)}
    assert target(busy_a, quick - 0.5) is None           # too young
    assert target(busy_a, quick) == "b"                   # b has an idle node for it
    assert target(busy_a, quick, move_after=None) is None  # `move_after: false`: never
    assert target(busy_a, 1.0, move_after=1.0) == "b"     # a shorter move_after is the limit
    # its own site has an idle node for it (itself among its pending): it stays
    assert target({"a": SiteLoad(pending=1, idle=1), "b": SiteLoad(idle=4)}, 10.0) is None
    # b's idle node is another user's next job's: no quick move, nor after move_after
    # while one of ours pends at b
    taken = {"a": SiteLoad(pending=2, idle=0), "b": SiteLoad(pending=1, idle=1, others=1)}
    assert target(taken, 10.0) is None and target(taken, 31.0) is None
    # after move_after: a site with nothing of ours pending, idle nodes or not
    assert target({"a": SiteLoad(pending=2, idle=0), "b": SiteLoad(running=4, idle=0)},
                  31.0) == "b"
    # a skipped site (full) takes no move
    full = brokerage.move_target([A, Site("b", partition="right", max=3)],
                                 {"a": SiteLoad(pending=2, idle=0),
                                  "b": SiteLoad(running=3, idle=1)}, 0.0, "a", 31.0, 30.0)
    assert full is None


def test_a_site_s_pilots_too_small_for_a_trial_are_refused_at_the_site_s_key(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC + """\
  pilots: {nodes: 2}
  sites:
    - {partition: a}
    - {partition: b, pilots: {nodes: 1}}
resources: {nodes: 2}
""")
    with pytest.raises(BadInput) as caught:
        load_spec(path)
    assert caught.value.key == "executor.sites[1].pilots.nodes", caught.value
    assert "a pilot of 1 node(s) cannot hold a trial of 2 nodes" in str(caught.value)


def test_of_two_equal_sites_the_one_whose_trials_step_faster_takes_the_next_trial():
    """PanDA weighs sites by their power; here by the trials' own step times: b's trials
    take 3 s a step where a's take 1, so b weighs a third and a takes the next trial,
    although b comes first; with one site measured alone, nothing is scaled."""
    a, b = Site("a", partition="a"), Site("b", partition="b")
    loads = {"a": SiteLoad(running=1, seconds_per_step=1.0),
             "b": SiteLoad(running=1, seconds_per_step=3.0)}
    weights = {v.site.name: v.weight for v in brokerage.verdicts([b, a], loads, 0.0)}
    assert weights["b"] == pytest.approx(weights["a"] / 3)
    assert brokerage.choose([b, a], loads, 0.0) is a
    loads["a"].seconds_per_step = None
    assert brokerage.choose([b, a], loads, 0.0) is b  # b alone measured: no factor; first
    assert "3 s a step" in brokerage.describe(brokerage.verdicts([b], loads, 0.0)[0], loads["b"])

"""Memory in pilots (issue 40 item 3, docs/brokerage.md#scouts), without a cluster: what an
attempt's peak memory is (the local executor's wait4 and its samples of the trial's processes
summed, as a pilot runs its trials), the slots
of pilots submitted once the scouts sized the trials (hpsearch.pilot.sizing, the pilot
executor's supply and binding), and a trial in a pilot killed for want of memory
(hpsearch.pilot.oom). On the emulated cluster: tests/slurm/test_scouts.py."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from hpsearch.launch.attempt import Launch
from hpsearch.pilot import oom, sizing
from hpsearch.pilot.executor import PilotExecutor
from hpsearch.pilot.fleet import pilot_job_parameters
from hpsearch.preflight import parse_spec
from hpsearch.store.reader import Reader
from hpsearch.store.runs import STORE_FILE
from hpsearch.store.store import Store

SPEC = """\
name: mem
command: "true {x}"
search: {strategy: random, trials: 8, space: {x: {low: 0.0, high: 1.0}}}
objective: {metric: loss}
resources: {mem: "auto 4000M", time: "auto 00:30:00", scouts: 2}
executor:
  type: slurm
  pilots: {max: 3, slots_per_node: 2}
"""


def _job(tmp_path: Path, text: str = SPEC):
    spec = parse_spec(text, "mem.yaml", tmp_path, tmp_path / "runs")
    return spec, spec.slurm_job()


def _launch(tmp_path: Path, spec, trial: int, mem: str | None,
            time: str | None = None) -> Launch:
    """An attempt as the scouts sized it (its own mem and time), or at the ceiling (None)."""
    tdir = tmp_path / "runs" / "mem" / "trials" / f"{trial:05d}"
    own = dataclasses.replace(spec.resources, mem=mem, time=time or spec.resources.time) \
        if mem else None
    return Launch(trial, 1, "true", {"HPSEARCH_TRIAL_DIR": str(tdir)}, tdir, tmp_path,
                  {"x": 0.5}, resources=own)


def test_an_attempt_s_peak_memory_is_stored_from_the_process_that_reaped_it(cli):
    """wait4's ru_maxrss of the trial's shell holds its waited-for python's: 150 MiB
    touched is seen, a shell alone is a few MiB."""
    spec = cli.write_spec(f"""
        name: peak
        command: >-
          if [ {{trial_id}} = 0 ]; then {sys.executable} -c
          'b = bytearray(150 << 20); b[::4096] = bytes(len(b[::4096]))'; fi;
          echo "@hpsearch step=0 loss={{x}}"
        search: {{strategy: grid, space: {{x: {{choices: [1, 2]}}}}}}
        objective: {{metric: loss}}
        """)
    cli("submit", spec, "--no-tui", "-q")
    with Reader(cli.runs / "peak" / STORE_FILE) as reader:
        peaks = [row["max_rss_mb"] for row in reader.db.query(
            "select max_rss_mb from attempts order by trial")]
    assert 150 <= peaks[0] < 400 and 0 < peaks[1] < 50, peaks


def test_an_attempt_s_peak_memory_sums_the_processes_it_runs_at_once(cli):
    """Three pythons holding 80 MiB each at the same time, one in a session of its own (as
    torchrun's workers are): the stored peak is their sum, as Slurm's MaxRSS sums a task's
    processes; the largest process alone (wait4) would be about 90 MiB."""
    hold = (f"{sys.executable} -c 'import time; b = bytearray(80 << 20); "
            "b[::4096] = bytes(len(b[::4096])); time.sleep(2.5)'")
    spec = cli.write_spec(f"""
        name: tree
        command: >-
          {hold} & setsid {hold} & {hold}; wait; echo "@hpsearch step=0 loss={{x}}"
        search: {{strategy: grid, space: {{x: {{choices: [1]}}}}}}
        objective: {{metric: loss}}
        """)
    cli("submit", spec, "--no-tui", "-q")
    with Reader(cli.runs / "tree" / STORE_FILE) as reader:
        peak = reader.db.execute("select max_rss_mb from attempts").fetchone()[0]
    assert 240 <= peak < 400, peak


def test_new_pilots_get_the_time_for_ten_of_the_longest_sized_trial_if_that_is_shorter(
        tmp_path):
    spec, job = _job(tmp_path)
    sized = [_launch(tmp_path, spec, 1, "300M", "00:01:00"),
             dataclasses.replace(_launch(tmp_path, spec, 2, "300M", "00:03:00"), time_factor=2)]
    # 10 x 3 min x 2 + 30 s, in whole minutes; its pilot takes no trial with under 6 min left
    assert sizing.time_for(sized, job, "04:00:00") == ("01:01:00", 360.0)
    assert sizing.time_for(sized, job, "01:00:00") is None  # not shorter than the pilots'
    assert sizing.time_for(sized + [_launch(tmp_path, spec, 3, None)], job, "04:00:00") is None
    assert sizing.time_for([_launch(tmp_path, spec, 4, "300M", "00:30:00")], job,
                           "04:00:00") is None  # at the ceiling again (killed at its limit)
    cut = sizing.Cut(300, "00:21:00", 120.0)  # moved to a site of shorter pilots: theirs
    assert sizing.within(cut, "00:15:00") == sizing.Cut(300)
    assert sizing.within(cut, "01:00:00") == cut
    assert pilot_job_parameters(job, "p", (), cut)["additional_parameters"]["time"] == "00:21:00"


def test_new_pilots_get_slots_of_the_memory_the_ready_trials_were_sized_to(tmp_path):
    spec, job = _job(tmp_path)
    unsized = _launch(tmp_path, spec, 0, None)
    small, larger = _launch(tmp_path, spec, 1, "300M"), _launch(tmp_path, spec, 2, "450M")
    assert sizing.slot_mem_for([small, larger], job) == 450
    assert sizing.slot_mem_for([small, unsized], job) is None  # a scout: the ceiling
    assert sizing.slot_mem_for([_launch(tmp_path, spec, 3, "4000M")], job) is None
    assert sizing.slot_mem_for([small], _job(tmp_path, SPEC.replace(
        '"auto 4000M"', '"4000M"'))[1]) is None  # mem not `auto`: never cut
    # a pilot of 450M slots holds 300M and 450M trials, not a 600M one (its estimate grew
    # after a kill at the scouted limit) nor one at the ceiling; a pilot at the ceiling all
    assert [sizing.holds(450, launch, job) for launch in
            (small, larger, _launch(tmp_path, spec, 4, "600M"), unsized)] == [
        True, True, False, False]
    assert sizing.holds(None, _launch(tmp_path, spec, 4, "600M"), job)
    # its job asks Slurm for slots_per_node such slots a node
    assert pilot_job_parameters(job, "p", (), sizing.Cut(450))[
        "additional_parameters"]["mem"] == "900M"
    assert pilot_job_parameters(job, "p")["additional_parameters"]["mem"] == "8000M"


class _Slurm:  # no command runs: the supply's submits are recorded, not made
    def config_value(self, key: str) -> None:
        return None


def test_the_supply_submits_sized_pilots_and_binds_no_trial_where_it_does_not_fit(tmp_path):
    spec, job = _job(tmp_path)
    job.experiment_dir.mkdir(parents=True)
    Store.create(job.experiment_dir / STORE_FILE, name="mem", spec_yaml=SPEC,
                 spec_file=str(tmp_path / "mem.yaml"), base_dir=str(tmp_path),
                 strategy="random", directions=["minimize"], trials_requested=8).close()
    store = Store(job.experiment_dir / STORE_FILE)
    try:
        executor = PilotExecutor(job, store, _Slurm())
        asked: list[int | None] = []
        place = executor.fleet.places[0]
        executor.fleet.submit = lambda place=None, cut=sizing.AS_SPEC: asked.append(
            cut(executor.fleet.places[0]) if callable(cut) else cut)
        executor.ready = [_launch(tmp_path, spec, 1, "300M", "00:01:00"),
                          _launch(tmp_path, spec, 2, "300M", "00:02:00")]
        executor._supply()
        # one pilot of two 300M slots for the two sized trials, with time for ten of the
        # longer one and PILOT_RESERVE (30 s): 21 minutes, not executor.pilots.time's hour
        assert asked == [sizing.Cut(300, "00:21:00", 120.0)]
        assert place.pilots.time == "01:00:00"
        executor.ready = [_launch(tmp_path, spec, 0, None)]
        asked.clear()
        executor._supply()
        assert asked == [sizing.AS_SPEC]  # a trial at its ceiling: a pilot as the spec says
    finally:
        store.close()


def test_a_trial_in_a_pilot_killed_near_its_memory_is_out_of_memory(tmp_path):
    assert oom.verdict(137, 290.0, 300.0, None, None).startswith("killed by SIGKILL at a peak")
    assert oom.verdict(-9, 100.0, 300.0, 4, 5) == \
        "killed by SIGKILL while its pilot's cgroup counted an OOM kill"
    assert oom.verdict(137, 100.0, 300.0, 4, 4) is None  # killed, but not for memory
    assert oom.verdict(1, 299.0, 300.0, 0, 1) is None    # not killed
    assert oom.verdict(137, 299.0, None, None, None) is None  # no share to judge by
    # the OOM kills of this process's cgroup (v2), from its memory.events
    proc = tmp_path / "cgroup"
    proc.write_text("0::/system.slice/slurmstepd.scope/job_7/step_batch\n")
    events = tmp_path / "fs/system.slice/slurmstepd.scope/job_7/step_batch/memory.events"
    events.parent.mkdir(parents=True)
    events.write_text("low 0\nhigh 0\nmax 3\noom 2\noom_kill 2\n")
    assert oom.oom_kills(tmp_path / "fs", proc) == 2
    assert oom.oom_kills(tmp_path / "none", proc) is None

"""A second Unix user attacks a running pilot search on the emulated cluster (issue 22): the
pilot dir's folders are opened to everyone, as a setgid project space under umask 002 would
leave them, and the other user plants an assignment, a stop file, a cancel file, an end of
a running attempt and a request to grow the search. None is obeyed: the owner's search ends
exactly as without the attacker, every trial once, all in the first pilot."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

from hpsearch.launch.attempt import Launch
from hpsearch.pilot import protocol
from tests.helpers import read_store
from tests.slurm.test_pilot_fencing import _events, _wait_for
from tests.slurm.test_pilots import _attempts
from tests.test_other_users import _write_as, other_uid  # noqa: F401 (a fixture)

RUN = uuid.uuid4().hex[:6]


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []

SPEC = """
name: {name}
command: >-
  echo "start $HPSEARCH_TRIAL_ID" >> {mark}; [ "$HPSEARCH_TRIAL_ID" -ge 2 ] || sleep 6;
  echo "@hpsearch step=0 loss={{x}}"
search:
  strategy: grid
  parallel: 2
  space:
    x: {{choices: [1, 2, 3, 4]}}
objective: {{metric: loss}}
resources: {{nodes: 1, time: "00:02:00"}}
executor:
  type: slurm
  poll_interval: 1s
  pilots: {{nodes: 1, time: "00:10:00", max: 2, slots_per_node: 2, idle_timeout: 10,
            heartbeat: 0.5}}
"""


def test_what_another_user_plants_in_a_running_pilot_search_is_not_obeyed(
        cli, slurm_cluster, tmp_path, other_uid):  # noqa: F811
    # Trials 0 and 1 run (6 s) while the other user plants; 2 and 3, in the same pilot
    # after the planted stop, need not sleep.
    name, mark = f"pl-other-{RUN}", tmp_path / "started.log"
    marker = tmp_path / "ran-as-the-owner"
    spec = cli.write_spec(SPEC.format(name=name, mark=mark))
    driver = cli.popen("submit", spec, env=slurm_cluster.env)
    try:
        assert _wait_for(lambda: len(_lines(mark)) >= 2, 120), "no two trials started"
        paths = protocol.PilotPaths(protocol.pilots_dir(cli.runs / name) / "1")
        for folder in (paths.root, paths.dir("inbox"), paths.dir("cancel"), paths.dir("ended")):
            os.chmod(folder, 0o777)
        requests = cli.runs / name / "requests"
        requests.mkdir(exist_ok=True)
        os.chmod(requests, 0o777)
        theirs = Launch(9, 1, f"touch {marker}", {}, tmp_path / "t9", tmp_path)
        _write_as(other_uid, paths.dir("inbox"), protocol.name_of(9, 1),
                  protocol.launch_to_dict(theirs))
        _write_as(other_uid, paths.root, paths.stop.name, {})
        _write_as(other_uid, paths.dir("cancel"), protocol.name_of(0, 1), {"time": time.time()})
        _write_as(other_uid, paths.dir("ended"), protocol.name_of(1, 1),
                  {"exit_code": 0, "reason": "exited", "detail": ""})
        _write_as(other_uid, requests, f"trials-{time.time_ns():020d}-1.json",
                  {"id": "not-the-owner", "total": 30})
        out, err = driver.communicate(timeout=240)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 0, out + err
    experiment, trials = read_store(cli.runs, name)
    assert experiment.trials_requested == 4 and len(trials) == 4
    assert all(t.state == "completed" and t.objective_values == [t.params["x"]]
               for t in trials), trials
    attempts = _attempts(cli.runs, name)
    assert all(len(a) == 1 for a in attempts.values()), attempts  # each trial ran once
    assert len({a[0]["job_id"] for a in attempts.values()}) == 1  # all in the first pilot
    assert not marker.exists()
    assert sorted(_lines(mark)) == ["start 0", "start 1", "start 2", "start 3"]
    refused = "\n".join(e["message"] for e in _events(cli.runs, name))
    assert f"owned by uid {other_uid}" in refused  # the request, the planted end
    assert "refused request file" in refused and "ended" in refused
    log = "\n".join(f.read_text(errors="replace")
                    for f in (protocol.pilots_dir(cli.runs / name) / "submitit").rglob("*.out"))
    for planted in ("inbox", "stop", "cancel"):
        assert any(planted in line and "refused" in line for line in log.splitlines()), log
    assert Path(paths.stop).stat().st_uid == other_uid  # still there, never obeyed

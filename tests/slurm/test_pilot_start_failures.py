"""Pilots that fail at start, on the emulated cluster: the search backs off, then stops and
says why, instead of submitting a pilot every second for ever.

How they fail is what was seen: the runs dir is reachable by a group of the owner's login
session that Slurm does not give the job (a membership added by `newgrp`, `sg`, or too
recently for slurmctld's group cache; here a group with no members in /etc/group, held by
the driver's process only). The driver writes the runs dir; the pilot's batch step, run as
the owner with the groups Slurm knows, cannot reach it: slurmstepd cannot open the job's
output file (Permission denied) and the job ends FAILED, exit 0:53, within a second.

Before the fix the driver submitted a new pilot each second as long as it ran (121 pilots
in 2 minutes); now it stops after start_failures.LIMIT pilots, exit 1, the experiment
`failed` with the reason, and its trials never ran: none failed, each waits for `resume`."""

from __future__ import annotations

import dataclasses
import grp
import os
import subprocess
import time
import uuid

import pytest

from hpsearch.pilot.start_failures import LIMIT
from hpsearch.store.reader import Reader
from hpsearch.store.runs import STORE_FILE
from tests.helpers import ensure_system_entry, read_store
from tests.site import PYTHON, site  # noqa: F401 (a fixture)

RUN = uuid.uuid4().hex[:6]
LOGIN_GROUP = "hpsearch-login"  # a group of the login session only: no member in /etc/group
SPEC = """
name: {name}
command: 'echo "@hpsearch step=0 loss={{x}}"'
search: {{strategy: grid, parallel: 2, space: {{x: {{choices: [1, 2, 3, 4]}}}}}}
objective: {{metric: loss}}
resources: {{nodes: 1, time: "00:02:00"}}
executor:
  type: slurm
  poll_interval: 0.5
  pilots: {{nodes: 1, time: "00:05:00", max: 2, slots_per_node: 1, idle_timeout: 5}}
"""


@pytest.fixture
def owner_in_slurm(site, slurm_cluster):  # noqa: F811
    slurm_cluster.run("sacctmgr", "-i", "add", "user", site.owner.name, "account=root",
                      check=False)
    return site


def _events(runs, name: str) -> list[dict]:
    reader = Reader(runs / name / STORE_FILE)
    try:
        return reader.events(limit=1000)
    finally:
        reader.close()


def _pilot_records(slurm_cluster, user: str, name: str) -> list[list[str]]:
    """JobID, State, ExitCode of the experiment's pilot jobs in accounting."""
    out = slurm_cluster.run("sacct", "-X", "-P", "-n", "-u", user, "-S", "now-1hours",
                            "-o", "JobID,JobName%200,State,ExitCode").stdout
    return [[job, state, code] for job, job_name, state, code in
            (line.split("|") for line in out.splitlines() if line)
            if job_name.startswith(f"hps.{name}.") and ".pilot." in job_name]


def test_pilots_that_cannot_start_back_off_then_stop_the_search_saying_why(
        owner_in_slurm, slurm_cluster):
    at = owner_in_slurm
    login_gid = ensure_system_entry(["groupadd", "--system"], grp.getgrnam,
                                    LOGIN_GROUP).gr_gid
    assert at.owner.name not in grp.getgrnam(LOGIN_GROUP).gr_mem
    owner = dataclasses.replace(at.owner, groups=(login_gid,))  # its login session's groups
    name = f"startfail-{RUN}"
    home = at.home()
    space = at.base / f"login-only-{RUN}"  # the group's space: root's, 3770 (site.project)
    space.mkdir()
    os.chown(space, 0, login_gid)
    os.chmod(space, 0o3770)
    spec = home / "spec.yaml"
    spec.write_text(SPEC.format(name=name))
    os.chown(spec, at.owner.uid, at.owner.gid)
    runs = space / "runs"
    env = {**owner.env(), "SLURM_CONF": slurm_cluster.env["SLURM_CONF"]}
    began = time.monotonic()
    try:
        proc = owner.run([PYTHON, "-m", "hpsearch", "submit", str(spec), "--runs-dir",
                          str(runs), "--no-tui"], cwd=home, env=env, timeout=75)
    except subprocess.TimeoutExpired as exc:
        pilots = _pilot_records(slurm_cluster, at.owner.name, name)
        slurm_cluster.run("scancel", "-u", at.owner.name, check=False)
        pytest.fail(f"the search never stopped: {len(pilots)} pilots in {exc.timeout} s")
    took = time.monotonic() - began
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert took < 60, (took, out)

    experiment, trials = read_store(runs, name)
    assert experiment.status == "failed", experiment
    events = _events(runs, name)
    [message] = [e["message"] for e in events if e["kind"] == "gave_up"]
    assert any(e["kind"] == "failed" and e["message"].startswith(message) for e in events)
    assert message.startswith(f"search stopped: {LIMIT} pilots in a row ended without running "
                              f"a trial (at most {LIMIT}); the last, pilot "), message
    pilots = _pilot_records(slurm_cluster, at.owner.name, name)
    deadline = time.monotonic() + 20  # sacct lags slurmctld a little
    while len(pilots) < LIMIT and time.monotonic() < deadline:
        time.sleep(0.5)
        pilots = _pilot_records(slurm_cluster, at.owner.name, name)
    assert len(pilots) == LIMIT, pilots  # before the fix: one more every second
    assert all(state == "FAILED" and code == "0:53" for _, state, code in pilots), pilots
    last = max(pilots, key=lambda record: int(record[0]))[0]
    assert f"(Slurm job {last}): Slurm job {last} FAILED, exit 0:53; its output " in message
    assert f"{last}_0_log.out: there is none (Slurm could not create it" in message
    assert f"runs dir ({runs / name}) is reachable" in message
    assert message in out  # the user is told, not only the store
    assert "ended before it ran a trial (1 in a row" in out  # and told of the back-off

    assert trials and all(t.state == "queued" for t in trials), trials  # none ran, none failed

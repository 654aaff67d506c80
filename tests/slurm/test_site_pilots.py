"""Issue 37 on the emulated cluster, as a site is set up (tests/site.py): an ordinary owner,
not root, runs a `share: group` pilot search whose runs dir is in a setgid project space
with a default ACL for the project group; while its trials run, another ordinary user of
that group attacks as the issue found possible: appends forged `@hpsearch` lines to a
running trial's log, plants a checkpoint where the trial will look for one, swaps a log
for a link, drops an assignment in the pilot's inbox. Each is refused by the file system
(the folders follow the umask, not the ACL), the group can still read the results, and the
search ends exactly as without the attacker, every trial once.

Before the fix the inherited ACL made the trial folders group-writable and the forged
line was appended."""

from __future__ import annotations

import os
import time
import uuid

import pytest

from tests.helpers import read_store
from tests.site import PYTHON, acls_under, site  # noqa: F401 (a fixture)
from tests.slurm.test_pilots import _attempts

RUN = uuid.uuid4().hex[:6]
SPEC = """
name: {name}
command: >-
  echo "trial's own" > "$HPSEARCH_CHECKPOINT_DIR/step-00000001.pt";
  touch "$HPSEARCH_TRIAL_DIR/running"; sleep 4; echo "@hpsearch step=0 loss={{x}}"
search: {{strategy: grid, parallel: 2, space: {{x: {{choices: [1, 2, 3, 4]}}}}}}
objective: {{metric: loss}}
share: group
resources: {{nodes: 1, time: "00:02:00"}}
executor:
  type: slurm
  poll_interval: 0.5
  pilots: {{nodes: 1, time: "00:05:00", max: 1, slots_per_node: 2, idle_timeout: 5}}
"""
ATTACKS = (
    'echo "@hpsearch step=1 loss=-100" >> "$1/stdout.log"',
    'echo "malicious pickle" > "$1/checkpoints/step-00000009.pt"',
    'echo "malicious pickle" > "$1/checkpoints/step-00000001.pt"',
    'ln -sf /etc/passwd "$1/stderr.log"',
    'echo "{}" > "$1/params.json"',
)


@pytest.fixture
def owner_in_slurm(site, slurm_cluster):  # noqa: F811
    """The site's owner, with a Slurm association (the cluster enforces them)."""
    slurm_cluster.run("sacctmgr", "-i", "add", "user", site.owner.name, "account=root",
                      check=False)
    return site


def test_a_group_member_cannot_touch_a_running_pilot_search_under_a_default_acl(
        owner_in_slurm, slurm_cluster):
    at = owner_in_slurm
    name = f"site-pl-{RUN}"
    home, project = at.home(), at.project(f"proj-{RUN}")
    spec = home / "spec.yaml"
    spec.write_text(SPEC.format(name=name))
    os.chown(spec, at.owner.uid, at.owner.gid)
    runs = project / "runs"
    env = {**at.owner.env(), "SLURM_CONF": slurm_cluster.env["SLURM_CONF"]}
    driver = at.owner.popen([PYTHON, "-m", "hpsearch", "submit", str(spec), "--runs-dir",
                               str(runs)], cwd=home, env=env)
    exp = runs / name
    try:
        deadline = time.monotonic() + 120
        while not (exp / "trials" / "00000" / "running").exists():
            if driver.poll() is not None or time.monotonic() > deadline:
                driver.kill()
                pytest.fail(f"trial 0 never ran: {driver.communicate()}")
            time.sleep(0.2)
        trial0 = exp / "trials" / "00000"
        for script in ATTACKS:
            proc = at.other.sh(script, str(trial0))
            assert proc.returncode != 0 and "Permission denied" in proc.stderr, (script, proc)
        inbox = exp / "pilots"
        proc = at.other.sh('ls "$1"', str(inbox))
        assert proc.returncode != 0 and "Permission denied" in proc.stderr, proc
        out, err = driver.communicate(timeout=240)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 0, out + err
    assert exp.stat().st_uid == at.owner.uid
    assert acls_under(exp) == {}
    experiment, trials = read_store(runs, name)
    assert [(t.state, t.objective_values) for t in trials] == [
        ("completed", [x]) for x in (1, 2, 3, 4)]
    assert all(len(a) == 1 for a in _attempts(runs, name).values())  # each trial once
    assert (trial0 / "checkpoints" / "step-00000001.pt").read_text() == "trial's own\n"
    proc = at.other.hpsearch("best", name, "--runs-dir", runs, cwd="/")
    assert proc.returncode == 0 and "x=1" in proc.stdout, proc.stdout + proc.stderr

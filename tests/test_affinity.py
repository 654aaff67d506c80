"""A pilot's trial is born on its slot's cores (hpsearch.launch.affinity): the local executor
(the pilot's runner, a node agent's) narrows its own thread around the spawn, so the trial's
shell needs no awk or taskset; where it cannot tell the slot, the runner says why on the
trial's stderr (its shell, with the same CPUs, could not either). On the emulated cluster with
task/affinity: tests/slurm/test_gpu_binding.py."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from hpsearch.executors.base import Ended
from hpsearch.executors.local import LocalExecutor
from hpsearch.launch.affinity import slot_cpus, spawning_on
from hpsearch.launch.attempt import Launch
from hpsearch.pilot.protocol import launch_from_dict, launch_to_dict

ALLOWED = sorted(os.sched_getaffinity(0))
SHOW = "sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status"


def _slot(fields: str, node_cpus: int = len(ALLOWED)) -> dict[str, str]:
    return {"HPSEARCH_CPU_FIELDS": fields, "HPSEARCH_NODE_CPUS": str(node_cpus)}


def test_a_slots_positions_name_the_cpus_this_process_is_allowed():
    assert slot_cpus(_slot("1")) == {ALLOWED[0]}
    assert slot_cpus(_slot(",".join(str(i + 1) for i in range(len(ALLOWED))))) == set(ALLOWED)
    assert slot_cpus(_slot(str(len(ALLOWED)))) == {ALLOWED[-1]}


@pytest.mark.parametrize("env", [
    {}, _slot(""), _slot("1", len(ALLOWED) + 1), _slot(str(len(ALLOWED) + 1)), _slot("0"),
    _slot("one"), {"HPSEARCH_CPU_FIELDS": "1"}])
def test_no_slot_is_told_where_the_process_cannot_tell_it(env):
    """No slot named; allowed more or fewer CPUs than the pilot's on the node (Slurm bound
    nothing, or fewer); a position outside them; not a number."""
    assert slot_cpus(env) is None


def test_the_spawning_thread_gets_its_cpus_back():
    with spawning_on({ALLOWED[0]}) as narrowed:
        assert narrowed and os.sched_getaffinity(0) == {ALLOWED[0]}
    assert sorted(os.sched_getaffinity(0)) == ALLOWED
    with spawning_on(None) as narrowed:
        assert not narrowed and sorted(os.sched_getaffinity(0)) == ALLOWED


def _run(tmp_path: Path, env: dict[str, str], narrow: bool) -> tuple[str, str]:
    trial_dir = tmp_path / "trial"
    launch = Launch(1, 1, SHOW, {"HPSEARCH_TRIAL_DIR": str(trial_dir), "HPSEARCH_ATTEMPT": "1",
                                 **env}, trial_dir, tmp_path, narrow_cpus=narrow)
    runner = LocalExecutor(1)
    runner.submit(launch)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if any(isinstance(e, Ended) and e.exit_code == 0 for e in runner.poll(0.5)):
            break
    else:
        pytest.fail("the trial did not end")
    return ((trial_dir / "stdout.log").read_text().strip(),
            (trial_dir / "stderr.log").read_text())


def test_a_pilot_trial_is_born_on_its_slots_cpus(tmp_path):
    out, err = _run(tmp_path, _slot(str(len(ALLOWED))), narrow=True)
    assert out == str(ALLOWED[-1]) and err == ""
    assert sorted(os.sched_getaffinity(0)) == ALLOWED  # the runner's own, given back


def test_where_the_runner_cannot_tell_the_slot_the_trials_stderr_says_so(tmp_path,
                                                                           monkeypatch):
    """Once, in CPU_NARROW's words, and with no awk, sed or taskset run for it (a marker
    that each of them, first on PATH, would leave)."""
    fakes = tmp_path / "bin"
    fakes.mkdir()
    for tool in ("awk", "sed", "taskset"):
        (fakes / tool).write_text(f"#!/bin/sh\ntouch {tmp_path}/ran-{tool}\n")
        (fakes / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{fakes}:{os.environ['PATH']}")
    out, err = _run(tmp_path, _slot("1", len(ALLOWED) + 1), narrow=True)
    allowed = subprocess.run(["/bin/sh", "-c", SHOW.replace("sed", "/bin/sed")],
                             capture_output=True, text=True, check=True).stdout.strip()
    assert err == ("hpsearch: warning: this step was not narrowed to the cores of its trial "
                   f"(positions 1 of the pilot {len(ALLOWED) + 1} CPUs on the node; it may "
                   f"run on CPUs {allowed}): it may share cores with other trials\n")
    assert sorted(p.name for p in tmp_path.glob("ran-*")) == ["ran-sed"]  # the trial's own


def test_a_trial_not_from_a_pilot_is_not_narrowed_whatever_its_environment(tmp_path):
    out, err = _run(tmp_path, _slot("1"), narrow=False)
    mine = subprocess.run(["/bin/sh", "-c", SHOW], capture_output=True, text=True, check=True)
    assert out == mine.stdout.strip() and err == ""


def test_the_agent_is_told_to_narrow_what_the_pilot_sends_it():
    launch = Launch(3, 2, ":", _slot("1"), Path("/t"), Path("/w"), narrow_cpus=True)
    assert launch_from_dict(launch_to_dict(launch)).narrow_cpus
    assert not launch_from_dict({**launch_to_dict(launch), "narrow_cpus": "yes"}).narrow_cpus

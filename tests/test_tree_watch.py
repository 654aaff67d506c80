"""hpsearch.pilot.tree_watch without a cluster: the program a pilot runs first on its other
nodes where the scouts size memory. It measures the trial's whole process tree, passes its
exit status on, outlives the signals Slurm sends the step (the trial's shell gets them from
Slurm itself), and its peak is read only for its own attempt, from a file of this user's.
(The same through a real pilot: tests/slurm/test_scouts.py.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from hpsearch.pilot import tree_watch

# A child of the shell that holds 150 MiB, written so its pages are resident.
HOLD = (f"{sys.executable} -c 'import time; x = b\"\\x01\" * (150 << 20); time.sleep(1.5)'; "
        "exit 3")


def _watch(trial_dir, attempt, script, **kw):
    return subprocess.Popen(tree_watch.argv(sys.executable, trial_dir, attempt,
                                            ["/bin/sh", "-c", script]), **kw)


def test_the_peak_of_the_shell_s_children_is_written_for_its_attempt(tmp_path):
    proc = _watch(tmp_path, 2, HOLD)
    assert proc.wait(timeout=30) == 3  # the shell's exit status
    peak = tree_watch.read_peak_mb(tmp_path, 2)
    assert peak is not None and 150 <= peak < 400, peak
    assert (tmp_path / tree_watch.PEAK_FILE).stat().st_mode & 0o077 == 0  # private
    assert tree_watch.read_peak_mb(tmp_path, 1) is None  # another attempt's: not this one's


def test_it_outlives_a_signal_the_shell_gets_from_slurm_and_ends_with_the_shell(tmp_path):
    """Slurm signals every process of the step: the watch sees SIGTERM and keeps waiting;
    the shell's own trap decides (here: it exits 7 once the signal comes)."""
    script = "trap 'exit 7' TERM; while :; do sleep 0.1; done"
    proc = _watch(tmp_path, 1, script, start_new_session=True)
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)  # the watch alone: it stays
    time.sleep(0.5)
    assert proc.poll() is None
    os.killpg(proc.pid, signal.SIGTERM)  # the whole step, as Slurm sends it
    assert proc.wait(timeout=10) == 7
    assert tree_watch.read_peak_mb(tmp_path, 1) is not None


def test_a_planted_peak_file_is_refused_not_followed(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("999999 1\n")
    (tmp_path / tree_watch.PEAK_FILE).symlink_to(target)
    refused = []
    assert tree_watch.read_peak_mb(tmp_path, 1, refused.append) is None
    assert refused and "refused" in refused[0], refused


def test_the_wait_between_samples_ends_when_the_shell_does(monkeypatch):
    """A sample a second, but the step ends with the trial: the wait returns once the
    process ends (its pidfd; without one, Linux before 5.3, by polling), not at the next
    sample."""
    import pytest
    for has_pidfd in (True, False):
        if not has_pidfd:
            monkeypatch.setattr(os, "pidfd_open", lambda pid: (_ for _ in ()).throw(OSError()))
        elif not hasattr(os, "pidfd_open"):
            pytest.skip("this Python has no os.pidfd_open")
        pid = os.posix_spawnp("sleep", ["sleep", "0.3"], dict(os.environ))
        began = time.monotonic()
        tree_watch._waiter(pid)(30.0)
        assert time.monotonic() - began < 10, has_pidfd  # not the 30 s asked
        os.waitpid(pid, 0)


def test_a_hostile_peak_file_gives_no_peak_and_a_too_large_one_is_refused(tmp_path):
    """Bytes that are not UTF-8, no attempt, empty, a truncated line, a digit string of 60
    digits: no peak or a finite one, never an exception; a file of many MB is refused
    unread (read_trusted's size limit), and the refusal said."""
    path = tmp_path / tree_watch.PEAK_FILE
    for raw in (b"\xff\xfe 1\n", b"4096\n", b"", b"40", b"12 x\n", b"\x00\x01\x02"):
        path.write_bytes(raw)
        assert tree_watch.read_peak_mb(tmp_path, 1) is None, raw
    path.write_bytes(b"9" * 60 + b" 1\n")
    assert tree_watch.read_peak_mb(tmp_path, 1) == int("9" * 60) / 1024  # finite
    path.write_bytes(b"1" * (8 << 20))
    refused = []
    assert tree_watch.read_peak_mb(tmp_path, 1, refused.append) is None and refused

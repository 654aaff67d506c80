"""The pilot job's command on its node (hpsearch.pilot.submitted), without Slurm: it runs
submitit's pickle only if this user wrote it, in a folder only this user can write. Another
user's pickle (tests/test_other_users.py), a link or a folder open to others is refused:
exit 2, the reason on stderr, nothing unpickled."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hpsearch.slurm.pilot_jobs import pilot_parameters, submit_pilot

JOB_ID = "4242"


def submitted(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A pilot submitted as hpsearch submits one, its sbatch answered with JOB_ID, under a
    project space's umask 002; its pickled function makes the folder `marker`. Returns
    (submitit folder, pickle, marker)."""
    folder, marker = tmp_path / "submitit", tmp_path / "ran"
    old = os.umask(0o002)
    try:
        submit_pilot(folder, pilot_parameters("hps.t.pilot.1", 1, "00:05:00", 1, 0, None, {}),
                     lambda script: JOB_ID, os.mkdir, marker)
    finally:
        os.umask(old)
    pickle = folder / f"{JOB_ID}_submitted.pkl"
    assert pickle.is_file() and not marker.exists()
    return folder, pickle, marker


def run_on_node(folder: Path) -> subprocess.CompletedProcess:
    """What the pilot's batch script runs, with the environment submitit's JobEnvironment
    reads there."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SUBMITIT_"))}
    env.update(SUBMITIT_EXECUTOR="slurm", SLURM_JOB_ID=JOB_ID)
    return subprocess.run([sys.executable, "-u", "-m", "hpsearch.pilot.submitted", str(folder)],
                          env=env, capture_output=True, text=True, timeout=60)


def assert_refused(proc: subprocess.CompletedProcess, pickle: Path, marker: Path,
                   why: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert f"refused to load {pickle}: {why}" in proc.stderr, proc.stderr
    assert "nothing was unpickled" in proc.stderr
    assert not marker.exists()


def test_the_owners_pickle_runs_in_a_folder_made_private_whatever_the_umask(tmp_path):
    folder, pickle, marker = submitted(tmp_path)
    assert folder.stat().st_mode & 0o777 == 0o700  # not 0775, as umask 002 would make it
    proc = run_on_node(folder)
    assert proc.returncode == 0, proc.stderr
    assert marker.is_dir()
    assert (folder / f"{JOB_ID}_0_result.pkl").exists()  # submitit's own ending


def test_a_link_in_place_of_the_pickle_is_refused(tmp_path):
    folder, pickle, marker = submitted(tmp_path)
    elsewhere = tmp_path / "elsewhere.pkl"
    pickle.rename(elsewhere)
    pickle.symlink_to(elsewhere)
    assert_refused(run_on_node(folder), pickle, marker, "a symbolic link")


def test_a_folder_others_may_write_is_refused(tmp_path):
    folder, pickle, marker = submitted(tmp_path)
    os.chmod(folder, 0o777)
    assert_refused(run_on_node(folder), pickle, marker,
                   f"its folder {folder} is writable by others (mode 777")


def test_a_fifo_in_place_of_the_pickle_is_refused_without_blocking(tmp_path):
    folder, pickle, marker = submitted(tmp_path)
    pickle.unlink()
    os.mkfifo(pickle)
    assert_refused(run_on_node(folder), pickle, marker, "not a regular file")

"""Files read from shared storage, as any user (no second user needed; with one:
tests/test_other_users.py): a file whose presence is the signal counts only if it is a
regular file of this user's (present); a link, a FIFO or a folder in place of a file hpsearch
reads gives nothing, never blocks, and is named once."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

from hpsearch.store.trusted import present


def _oddities(folder: Path) -> dict[str, str]:
    """name -> why each is refused: a link to a regular file, a FIFO, a folder."""
    folder.mkdir(exist_ok=True)
    (folder / "real").write_text("1\n")
    (folder / "link").symlink_to(folder / "real")
    os.mkfifo(folder / "fifo")
    (folder / "dir").mkdir()
    return {"link": "a symbolic link", "fifo": "not a regular file",
            "dir": "not a regular file"}


def test_present_is_true_only_for_a_regular_file_of_this_user(tmp_path):
    told: list[str] = []
    for name, why in _oddities(tmp_path).items():
        assert not present(tmp_path / name, on_refused=told.append)
        assert told.pop() == f"refused {tmp_path / name}: {why}"
    assert present(tmp_path / "real") and not present(tmp_path / "missing")
    assert not present(tmp_path / "real", owner=os.geteuid() + 1)
    assert not present(tmp_path / "real" / "below")  # NotADirectoryError: no signal


def test_a_metrics_file_that_is_a_link_to_a_file_is_not_read(tmp_path):
    """Before, a link was followed (only its target's type was checked): a trial dir could
    feed the driver another file of the owner's as its metrics."""
    from hpsearch.ingest.trial_files import TrialFiles
    elsewhere = tmp_path / "elsewhere.jsonl"
    elsewhere.write_text('{"step": 0, "loss": 0.5}\n')
    (tmp_path / "metrics.jsonl").symlink_to(elsewhere)
    files = TrialFiles(tmp_path)
    assert files.read_new(final=True) == []
    assert files.warnings == ["metrics.jsonl: ignored: not a regular file (a symbolic link); "
                              "not read"]


def test_a_driver_job_record_that_is_not_a_file_names_no_job(tmp_path, capfd):
    """`cancel` and `status` read driver.job: a FIFO there must not hang them, and a link
    names no job to signal."""
    from hpsearch.driver import slurm_job
    from hpsearch.ingest.outcome import resume_hint
    for name, why in _oddities(tmp_path / "odd").items():
        exp = tmp_path / name
        exp.mkdir()
        os.rename(tmp_path / "odd" / name, exp / slurm_job.DRIVER_JOB_FILE)
        path = exp / slurm_job.DRIVER_JOB_FILE
        assert slurm_job.stop(exp, wait=1) is None  # no Slurm asked: there is no job
        assert f"hpsearch: refused {path}: {why}\n" in capfd.readouterr().err
        assert resume_hint("x", exp) == f"continue it with: hpsearch resume x ({path} " \
                                         f"ignored: {why})"


def test_a_cancel_request_that_is_a_link_or_a_fifo_cancels_nothing(tmp_path):
    from hpsearch.driver import slurm_job
    for name in _oddities(tmp_path / "odd"):
        exp = tmp_path / name
        exp.mkdir()
        os.rename(tmp_path / "odd" / name, exp / slurm_job.CANCEL_REQUEST)
        assert not slurm_job.cancel_requested(exp)
    slurm_job.request_cancel(tmp_path / "link")  # replaces the link, not writes through it
    assert (tmp_path / "odd" / "real").read_text() == "1\n"
    assert slurm_job.cancel_requested(tmp_path / "link")


def test_an_array_manifest_that_is_not_a_file_maps_no_task_and_is_named_once(tmp_path):
    """A driver that lost an array's sbatch answer finds the array by name, then reads its
    manifest to know which task runs which trial: without a trusted one it cancels the
    array (its trials are submitted again) instead of guessing."""
    from hpsearch.executors.slurm_health import SlurmHealth
    from hpsearch.executors.slurm_submit import Submitter
    submitter = Submitter(SimpleNamespace(experiment_dir=tmp_path), None, SlurmHealth(1.0))
    arrays = submitter.arrays_dir
    arrays.mkdir()
    os.mkfifo(arrays / "a.json")
    for _ in range(2):
        assert submitter._adopt_array("77", arrays / "a.json", []) == ([], [], ["77"])
    assert [n.message for n in submitter.health.take_notes()] == [
        f"refused array manifest {arrays / 'a.json'}: not a regular file"]

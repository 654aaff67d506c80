"""The driver's watch on trial output (hpsearch.ingest.output_watch) and the executors' wake
(Executor.wake_on): real inotify on this machine's filesystem, real processes writing, real
file descriptors. What a user needs: a report written by a running trial is noticed at
once, other writes are not taken for reports, and where inotify cannot hear the writes
(a runs dir shared between hosts, HPSEARCH_INOTIFY=off) there is no watch, and the driver
says why."""

from __future__ import annotations

import os
import select
import subprocess
import time

import pytest

from hpsearch.executors.base import nap
from hpsearch.executors.local import LocalExecutor
from hpsearch.ingest.output_watch import open_watch
from hpsearch.store.filesystem import detect


def _append(path, text: str) -> None:
    """Another process appends to `path`, as a trial does."""
    subprocess.run(["sh", "-c", 'printf "%s\\n" "$1" >> "$2"', "sh", text, str(path)],
                   check=True)


def _readable(fd: int, seconds: float) -> bool:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(seconds * 1000))


@pytest.fixture
def watch(tmp_path, monkeypatch):
    monkeypatch.delenv("HPSEARCH_INOTIFY", raising=False)
    monkeypatch.delenv("HPSEARCH_STORAGE", raising=False)
    found, how = open_watch(detect(tmp_path))
    if found is None:
        pytest.skip(f"no inotify watch here: {how}")
    yield found
    found.close()


def test_a_report_is_noticed_at_once_and_other_writes_are_not_reports(tmp_path, watch):
    trial = tmp_path / "trials" / "00003"
    trial.mkdir(parents=True)
    watch.add(3, trial)
    _append(trial / "stderr.log", "Traceback ...")  # not a report file
    _append(trial / "params.json", "{}")
    assert watch.changed() == set()
    _append(trial / "metrics.jsonl", '{"step": 0, "loss": 1.0}')
    assert _readable(watch.fileno(), 5.0)  # the driver's wait ends
    assert watch.changed() == {3}
    assert watch.changed() == set()  # read once
    assert not _readable(watch.fileno(), 0.05)  # and the wait is quiet again
    _append(trial / "stdout.log", "@hpsearch step=1 loss=0.5")
    assert _readable(watch.fileno(), 5.0)
    assert watch.changed() == {3}


def test_a_trial_dir_made_after_the_launch_is_watched_by_follow_and_an_ended_one_not(
        tmp_path, watch):
    early, late = tmp_path / "00001", tmp_path / "00002"
    early.mkdir()
    watch.add(1, early)
    watch.add(2, late)  # its executor has not made it yet
    assert watch.unwatched == {2}
    late.mkdir()
    watch.follow({1: early, 2: late})
    assert watch.unwatched == set()
    _append(late / "metrics.jsonl", '{"step": 0, "loss": 1.0}')
    assert _readable(watch.fileno(), 5.0)
    assert watch.changed() == {2}
    watch.follow({2: late})  # trial 1 ended: no longer in flight
    _append(early / "metrics.jsonl", '{"step": 0, "loss": 1.0}')
    _append(late / "metrics.jsonl", '{"step": 1, "loss": 0.5}')
    assert _readable(watch.fileno(), 5.0)
    assert watch.changed() == {2}


def test_a_trial_dir_removed_and_made_again_is_watched_again(tmp_path, watch):
    trial = tmp_path / "00004"
    trial.mkdir()
    watch.add(4, trial)
    os.rmdir(trial)
    assert _readable(watch.fileno(), 5.0)  # IN_IGNORED: the kernel dropped the watch
    assert watch.changed() == set()
    trial.mkdir()
    watch.follow({4: trial})
    _append(trial / "metrics.jsonl", '{"step": 0, "loss": 1.0}')
    assert _readable(watch.fileno(), 5.0)
    assert watch.changed() == {4}


@pytest.mark.parametrize("env, said", [
    ({"HPSEARCH_STORAGE": "network"}, "HPSEARCH_STORAGE=network: shared between hosts"),
    ({"HPSEARCH_INOTIFY": "off"}, "HPSEARCH_INOTIFY=off"),
])
def test_no_watch_where_inotify_cannot_hear_the_writes_and_why(tmp_path, monkeypatch, env,
                                                                said):
    for key in ("HPSEARCH_STORAGE", "HPSEARCH_INOTIFY"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    found, how = open_watch(detect(tmp_path))
    assert found is None
    assert said in how, how


def test_the_local_executor_wait_ends_when_the_wake_fd_is_readable():
    executor = LocalExecutor(1)
    rfd, wfd = os.pipe()
    try:
        executor.wake_on(rfd)
        writer = subprocess.Popen(["sh", "-c", "sleep 0.2; echo x"], stdout=wfd)
        began = time.monotonic()
        assert executor.poll(timeout=60) == []
        assert time.monotonic() - began < 30  # not the 60 s it was given
        writer.wait()
        executor.wake_on(None)  # and without it, the wait is the timeout
        began = time.monotonic()
        executor.poll(timeout=0.3)
        assert time.monotonic() - began >= 0.25
    finally:
        executor.close()
        os.close(rfd)
        os.close(wfd)


def test_the_slurm_and_pilot_executors_nap_ends_when_the_wake_fd_is_readable():
    rfd, wfd = os.pipe()
    try:
        writer = subprocess.Popen(["sh", "-c", "sleep 0.2; echo x"], stdout=wfd)
        began = time.monotonic()
        assert nap(rfd, 60) is True
        assert time.monotonic() - began < 30
        writer.wait()
        assert nap(None, 0.01) is False
    finally:
        os.close(rfd)
        os.close(wfd)

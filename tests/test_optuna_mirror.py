"""`hpsearch optuna NAME --storage URL [--follow]`: the experiment as an Optuna study that
optuna.load_study reads back with the store's numbers, params, values, states and
intermediate values; idempotent; read-only on the store; --follow mirrors a running search."""

from __future__ import annotations

import hashlib
import time

import optuna
import pytest

from hpsearch.store.reader import Reader
from hpsearch.store.runs import STORE_FILE
from tests.helpers import read_store
from tests.interop_search import run_search, write_spec

pytestmark = pytest.mark.slow  # Optuna's RDB storage: its schema is slow to create

OPTUNA_STATE = {"completed": "COMPLETE", "failed": "FAIL", "pruned": "PRUNED"}


def _store(runs, name):
    """(trials, {trial: {step: loss}}) read from the store."""
    reader = Reader(runs / name / STORE_FILE)
    try:
        trials = reader.trials()
        return trials, {t.id: {m["step"]: m["value"] for m in reader.metrics(t.id)
                               if m["name"] == "loss"} for t in trials}
    finally:
        reader.close()


def _assert_mirror_is_the_store(study, runs, name):
    trials, curves = _store(runs, name)
    mirrored = study.get_trials()
    assert [t.number for t in mirrored] == [t.id for t in trials]
    for m, t in zip(mirrored, trials):
        assert m.user_attrs["hpsearch_trial"] == t.id
        assert m.params == t.params
        assert m.state.name == OPTUNA_STATE[t.state]
        assert m.values == (t.objective_values if t.state == "completed" else None)
        assert m.intermediate_values == curves[t.id]
        assert m.user_attrs["acc"] == float(f"0.{9 - t.params['x'] % 9}")
        assert m.user_attrs["hpsearch_state"] == t.state
    assert {t.state for t in trials} == {"completed", "failed", "pruned"}


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("storage", ["sqlite:///{cwd}/mirror.db", "{cwd}/mirror.log",
                                     "journal:{cwd}/mirror.jsonl"])
def test_a_finished_search_mirrors_into_any_storage_once(cli, storage):
    run_search(cli)
    url = storage.format(cwd=cli.cwd)
    store_file = cli.runs / "interop" / STORE_FILE
    before = _digest(store_file)
    first = cli("optuna", "interop", "--storage", url, check=0)
    assert "8 trials in study 'interop'" in first.stdout and "(8 added" in first.stdout
    again = cli("optuna", "interop", "--storage", url, check=0)
    assert "(0 added, 0 updated)" in again.stdout, again.stdout
    assert _digest(store_file) == before  # the store is only read
    if url.startswith("sqlite"):
        read = url
    else:
        from optuna.storages.journal import JournalFileBackend
        read = optuna.storages.JournalStorage(JournalFileBackend(url.removeprefix("journal:")))
    study = optuna.load_study(study_name="interop", storage=read)
    assert len(study.trials) == 8  # nothing added twice
    assert study.best_trial.params["x"] == 1 and study.best_value == 1.0
    _assert_mirror_is_the_store(study, cli.runs, "interop")


def test_follow_mirrors_a_running_search_until_its_driver_ends(cli):
    # 3 reports 3 s apart a trial, 2 at a time: the search lasts about 30 s, longer than
    # `--follow` takes to start and import optuna on a loaded machine (with 1 s, two
    # fresh-clone runs saw every trial end before its first sync: "8 added, 0 updated"; with
    # 2 s, one more, loaded by a walkthrough beside it)
    spec = write_spec(cli, sleep=3.0, parallel=2)
    driver = cli.popen("submit", spec)
    try:
        deadline = time.time() + 30
        while not (cli.runs / "interop" / STORE_FILE).exists() and time.time() < deadline:
            time.sleep(0.05)
        # --follow starts while trials run (on a loaded machine the 8 short trials could
        # all end before its first sync, and it would never see one running)
        while time.time() < deadline and not any(
                t.state == "running" for t in read_store(cli.runs, "interop")[1]):
            time.sleep(0.05)
        url = f"sqlite:///{cli.cwd}/follow.db"
        follow = cli("optuna", "interop", "--storage", url, "--follow", "--interval", "0.2",
                     check=0)
    finally:
        driver.wait(timeout=60)
    assert driver.returncode == 1  # some trials failed, by design
    lines = follow.stdout.splitlines()
    assert lines[-1] == "interop: its driver is not running; the mirror is final"
    # trials were mirrored while they ran (RUNNING or WAITING), and brought up to date later
    assert any(" updated)" in line and "0 updated)" not in line for line in lines), lines
    _assert_mirror_is_the_store(optuna.load_study(study_name="interop", storage=url),
                                cli.runs, "interop")


def test_study_name_directions_and_bad_storages(cli):
    run_search(cli)
    url = f"sqlite:///{cli.cwd}/m.db"
    cli("optuna", "interop", "--storage", url, "--study-name", "other", check=0)
    assert optuna.load_study(study_name="other", storage=url).trials[0].number == 0
    optuna.create_study(study_name="taken", storage=url, direction="maximize")
    proc = cli("optuna", "interop", "--storage", url, "--study-name", "taken", check=2)
    assert "directions ['maximize']" in proc.stderr and "--study-name" in proc.stderr
    proc = cli("optuna", "interop", "--storage", "mirror.db", check=2)
    assert "expected an RDB URL" in proc.stderr and "journal:PATH" in proc.stderr
    assert not (cli.cwd / "mirror.db").exists()
    proc = cli("optuna", "interop", "--storage", f"{cli.cwd}/no/such/dir/m.log", check=2)
    assert "does not exist" in proc.stderr
    proc = cli("optuna", "nope", "--storage", url, check=2)
    assert "no experiment 'nope'" in proc.stderr


def test_help_has_examples(cli):
    for command in ("optuna", "dashboard"):
        text = cli(command, "--help", check=0).stdout
        assert "examples:" in text and f"hpsearch {command} quadratic" in text

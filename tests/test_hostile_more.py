"""A second round of hostile input, through the real CLI, for the three classes of issue 11
that take untrusted bytes: the spec (YAML tags, merge keys, odd keys, non-finite numbers,
invisible characters, FIFOs, huge grids), trial output (folders, FIFOs and sparse 1 TB files
where report files belong, checkpoints/ linked out of the trial dir) and the runs dir
(driver.lock as a folder, FIFO or link; a read-only mount; a full disk; odd
HPSEARCH_STORAGE). Each gets exit 2 with one message naming file, line and key, or is
handled with a warning: never a traceback, a hang, a second crash on resume, or a file
touched outside the runs dir.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.helpers import read_store
from tests.test_hostile_output import _one_trial_spec
from tests.test_shared_storage import _dead_pid, _write_lock
from tests.test_spec_hostile import GOOD

SPACE = "    x: {low: 0.0, high: 1.0}\n"


def _replace(old: str, new: str) -> str:
    assert old in GOOD
    return GOOD.replace(old, new)


# (id, spec text, line, key, fragments of the one message line)
BAD_SPECS = [
    ("python-tag", _replace("name: demo", 'name: !!python/object/apply:os.system ["touch '
                            'PWNED"]'), 1, "name", ["unknown YAML tag", "python/object/apply"]),
    ("custom-tag-value", _replace("name: demo", "name: !foo bar"), 1, "name",
     ["unknown YAML tag '!foo'"]),
    ("custom-tag-key", GOOD + "!foo a: 1\n", 9, None, ["unknown YAML tag '!foo'"]),
    ("custom-tag-mapping", GOOD + "env: !foo {A: 1}\n", 9, "env", ["unknown YAML tag '!foo'"]),
    ("set-tag", GOOD + "env: !!set {A: null}\n", 9, "env", ["unknown YAML tag", "set"]),
    ("custom-tag-list", _replace(SPACE, "    x: {choices: !bar [1, 2]}\n"), 7,
     "search.space.x.choices", ["unknown YAML tag '!bar'"]),
    ("binary-tag", _replace("name: demo", "name: !!binary aGVsbG8="), 1, "name",
     ["got bytes"]),
    ("null-key", GOOD + "null: 1\n", 9, None, ["expected a name as key", "null"]),
    ("list-key", GOOD + "? [a, b]\n: 1\n", 9, None, ["expected a name as key", "list"]),
    ("merge-of-a-scalar", _replace(SPACE, SPACE + "    y: {<<: 3, high: 2.0}\n"), 8,
     "search.space.y", ["merge key '<<' takes a mapping"]),
    ("duplicate-beside-merge", _replace(SPACE, "    x: &r {low: 0.0, high: 1.0}\n"
                                        "    y: {<<: *r, high: 2.0, high: 3.0}\n"), 8,
     "search.space.y.high", ["duplicate key 'high'"]),
    ("infinite-high", _replace("high: 1.0", "high: .inf"), 7, "search.space.x.high",
     ["expected a finite number; got inf"]),
    ("1e999-high", _replace("high: 1.0", "high: 1e999"), 7, "search.space.x.high",
     ["expected a finite number"]),
    ("nan-timeout", GOOD + "executor: {type: local, timeout: .nan}\n", 9, "executor.timeout",
     ["expected a positive duration"]),
    ("infinite-timeout", GOOD + "executor: {type: local, timeout: .inf}\n", 9,
     "executor.timeout", ["expected a positive duration"]),
    ("nan-in-hh-mm-ss", GOOD + "executor: {type: local, grace: '1:nan:3'}\n", 9,
     "executor.grace", ["expected a positive duration"]),
    ("nan-poll-interval", GOOD + "executor: {type: local, poll_interval: .nan}\n", 9,
     "executor.poll_interval", ["expected a positive duration"]),
    ("rtl-override-in-metric", _replace("metric: loss", 'metric: "lo\\u202ess"'), 8,
     "objective.metric", ["U+202E (right-to-left override)"]),
    ("zero-width-in-metric", _replace("metric: loss", 'metric: "lo\\u200bss"'), 8,
     "objective.metric", ["U+200B (zero-width space)"]),
    ("line-separator-in-command", _replace("echo {x}", "echo {x} \\u2028 rm"), 2, "command",
     ["U+2028 (line separator)"]),
    ("rtl-override-in-env", GOOD + 'env: {FOO: "a\\u202eb"}\n', 9, "env.FOO", ["U+202E"]),
    ("escape-in-choice", _replace(SPACE, '    x: {choices: ["a\\e[2Jb", "c"]}\n'), 7,
     "search.space.x.choices[0]", ["U+001B (escape)"]),
    ("escape-in-fixed-value", _replace('"echo {x}"', '"echo {x} {y}"').replace(
        SPACE, SPACE + '    y: "q\\e[31m"\n'), 8, "search.space.y", ["U+001B (escape)"]),
    ("several-documents", GOOD + "---\nname: other\n", 9, None, ["another document"]),
    ("tab-indentation", _replace("  strategy", "\tstrategy"), 4, None,
     ["YAML syntax error", "'\\t'"]),
]


def _one_line_error(proc, line: int, key: str | None, fragments: list[str]) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    message = proc.stderr.rstrip("\n")
    assert "\n" not in message and "Traceback" not in message, proc.stderr
    prefix = f"hpsearch: error: spec.yaml:{line}: " + (f"{key}: " if key else "")
    assert message.startswith(prefix), message
    for fragment in fragments:
        assert fragment in message, message
    return message


@pytest.mark.parametrize("case, text, line, key, fragments", BAD_SPECS,
                         ids=[c[0] for c in BAD_SPECS])
def test_hostile_spec_values_get_one_message_naming_line_and_key(cli, case, text, line, key,
                                                                 fragments):
    (cli.cwd / "spec.yaml").write_text(text, encoding="utf-8")
    _one_line_error(cli("validate", "spec.yaml"), line, key, fragments)
    assert not (cli.cwd / "PWNED").exists() and not cli.runs.exists()


def test_merge_keys_merge_as_yaml_says_and_own_keys_win(cli):
    (cli.cwd / "spec.yaml").write_text(_replace('"echo {x}"', '"echo {x} {y} {z}"').replace(
        SPACE, "    x: &r {low: 0.0, high: 1.0}\n    y: {<<: *r, high: 2.0}\n"
               "    z: {<<: [*r, {log: true}], low: 0.5}\n"))
    proc = cli("validate", "spec.yaml", check=0)
    assert "y: float in [0.0, 2.0]" in proc.stdout
    assert "z: float in [0.5, 1.0] (log scale)" in proc.stdout


def test_a_megabyte_long_name_is_quoted_short(cli):
    (cli.cwd / "spec.yaml").write_text(_replace("name: demo", "name: " + "a" * 1_000_000))
    message = _one_line_error(cli("validate", "spec.yaml"), 1, "name", ["1,000,002 characters"])
    assert len(message) < 400


def test_a_nan_signal_lead_time_is_refused_before_plan_builds_a_batch_script(cli):
    """Before: `plan` of a Slurm spec died in round() with a traceback."""
    (cli.cwd / "spec.yaml").write_text(GOOD + "executor: slurm\n"
                                       "checkpoints: {signal: USR1, signal_before: .nan}\n")
    _one_line_error(cli("plan", "spec.yaml"), 10, "checkpoints.signal_before",
                    ["expected a positive duration"])


@pytest.mark.parametrize("kind", ["fifo", "folder", "symlink-loop", "dev-zero"])
def test_a_spec_path_that_is_no_file_is_refused_at_once(cli, kind):
    path = cli.cwd / "spec.yaml"
    if kind == "fifo":
        os.mkfifo(path)  # before: validate blocked forever in open()
    elif kind == "folder":
        path.mkdir()
    elif kind == "symlink-loop":
        path.symlink_to(path)
    else:
        path.symlink_to("/dev/zero")
    proc = cli("validate", "spec.yaml", timeout=20)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("hpsearch: error: spec.yaml"), proc.stderr
    assert proc.stderr.count("\n") == 1


def test_a_spec_read_from_a_pipe_still_works(cli):
    (cli.cwd / "good.yaml").write_text(GOOD)
    proc = subprocess.run(f"{sys.executable} -m hpsearch validate <(sleep 0.3; cat good.yaml)",
                          shell=True, executable="/bin/bash", cwd=cli.cwd, env=cli.env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "experiment demo" in proc.stdout, proc.stderr


def test_crlf_line_endings_are_fine(cli):
    (cli.cwd / "spec.yaml").write_bytes(GOOD.replace("\n", "\r\n").encode())
    cli("validate", "spec.yaml", check=0)


def test_a_grid_beyond_64_bits_capped_by_trials_plans_and_runs(cli):
    """Before: 2**70 points overflowed len() (OverflowError) in plan and submit."""
    space = "".join(f"    p{i}: {{choices: [0, 1]}}\n" for i in range(70))
    (cli.cwd / "spec.yaml").write_text(
        GOOD.replace("strategy: random", "strategy: grid").replace(SPACE, space)
        .replace('"echo {x}"', "\"echo '@hpsearch step=0 loss=1'; : {params}\""))
    plan = cli("plan", "spec.yaml", check=0)
    assert f"= {2 ** 70} points; 2 trials" in plan.stdout
    cli("submit", "spec.yaml", check=0)
    assert [t.state for t in read_store(cli.runs, "demo")[1]] == ["completed"] * 2


# -- trial output ---------------------------------------------------------------------------

def _trial_spec(cli, name: str, script: str, extra: str = "") -> str:
    """One trial running `script` (bash, in its trial dir, $1 = x)."""
    (cli.cwd / f"{name}.sh").write_text('cd "$HPSEARCH_TRIAL_DIR"\n' + script)
    spec = _one_trial_spec(cli, name, f"bash {cli.cwd / name}.sh {{x}}")
    spec.write_text(spec.read_text() + extra)
    return spec.name


def _completed(cli, name: str, proc) -> None:
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, (proc.stdout, proc.stderr)
    exp, (trial,) = read_store(cli.runs, name)
    assert trial.state == "completed" and trial.objective_values == [trial.params["x"]]


REPORT = 'echo "@hpsearch step=1 loss=$1"\n'
OUTPUT_CASES = [  # (id, script, a line the driver prints)
    ("metrics-is-a-folder", "mkdir metrics.jsonl\n" + REPORT,
     "metrics.jsonl: ignored: not a regular file"),
    ("metrics-becomes-a-folder", 'echo \'{"step": 0, "loss": 9}\' >> metrics.jsonl\n'
     "sleep 1.3; rm metrics.jsonl; mkdir metrics.jsonl; sleep 1.3\n" + REPORT,
     "metrics.jsonl: ignored: not a regular file"),
    ("result-and-manifest-are-folders", "mkdir result.json checkpoints.jsonl\n" + REPORT,
     "checkpoints.jsonl: not a regular file"),
    ("metrics-links-to-dev-zero", "ln -s /dev/zero metrics.jsonl\n" + REPORT,
     "metrics.jsonl: ignored: not a regular file"),
    ("stdout-is-a-sparse-terabyte", REPORT + "truncate -s 1T stdout.log\n", None),
    ("result-is-an-array", 'echo "[1, 2]" > result.json\n' + REPORT,
     "result.json: ignored: expected a JSON object"),
    ("result-nested-10000-deep", "printf '%.0s{\"a\":' $(seq 10000) > result.json\n" + REPORT,
     "result.json: ignored:"),
    ("10000-metrics-on-one-line", 'echo "@hpsearch step=1 loss=$1 $(printf \'m%d=1 \' '
     '$(seq 10000))"\n', None),
    ("metric-named-time", 'echo "@hpsearch step=0 time=soon loss=9"\n' + REPORT,
     "('time': expected a number, got 'soon')"),
    ("metrics-truncated-mid-run", 'echo \'{"step": 5, "loss": 9}\' >> metrics.jsonl; sleep 1.3\n'
     ': > metrics.jsonl; sleep 1.3; echo "{\\"step\\": 6, \\"loss\\": $1}" >> metrics.jsonl\n',
     None),
]


@pytest.mark.slow  # 3.6 s in the quick tier (2026-11-30): over its 3 s rule
@pytest.mark.parametrize("case, script, printed", OUTPUT_CASES, ids=[c[0] for c in OUTPUT_CASES])
def test_odd_files_where_trial_output_belongs_never_stop_the_driver(cli, case, script, printed):
    """Before: a folder named metrics.jsonl crashed the driver ('cannot write 9: Is a
    directory', exit 1) and every resume again; a sparse 1 TB stdout.log kept it reading
    zeros for more than 10 minutes, deaf to SIGTERM."""
    spec = _trial_spec(cli, "out", script)
    try:
        proc = cli("submit", spec, timeout=40)
        _completed(cli, "out", proc)
        if printed:
            assert printed in proc.stdout, proc.stdout
    finally:  # never leave a terabyte-sized file behind, even a sparse one
        (cli.runs / "out" / "trials" / "00000" / "stdout.log").unlink(missing_ok=True)


@pytest.mark.slow  # 3.4 s in the quick tier (2026-11-30): over its 3 s rule
def test_checkpoints_linked_out_of_the_trial_dir_are_never_deleted(cli, tmp_path):
    """Before: with keep_last, the driver deleted folders of the link's target (outside the
    runs dir) as if they were old checkpoints."""
    victim = tmp_path / "elsewhere"
    for name in ("run1", "run2", "run3"):
        (victim / name).mkdir(parents=True)
        (victim / name / "data").write_text("precious")
    spec = _trial_spec(cli, "ck", f"rm -rf checkpoints; ln -s {victim} checkpoints\n"
                       'for i in 1 2 3; do echo "@hpsearch step=$i loss=$1"; sleep 0.8; done\n',
                       "checkpoints: {keep_last: 1}\n")
    proc = cli("submit", spec, timeout=60)
    _completed(cli, "ck", proc)
    assert sorted(p.name for p in victim.iterdir()) == ["run1", "run2", "run3"]
    assert "checkpoints/ is a symbolic link" in proc.stdout


# -- the runs dir ---------------------------------------------------------------------------

def _finished_experiment(cli) -> str:
    (cli.cwd / "q.yaml").write_text(_replace('"echo {x}"', "\"echo '@hpsearch step=1 loss={x}'\""))
    cli("submit", "q.yaml", check=0)
    return "demo"


LOCKS = {  # driver.lock replaced by what no driver writes
    "fifo": lambda lock: os.mkfifo(lock),  # before: status, resume and cancel hung in open()
    "dangling-link": lambda lock: lock.symlink_to("/nonexistent/driver.lock"),
    "link-loop": lambda lock: lock.symlink_to(lock),  # before: status failed for all
    "link-to-dev-zero": lambda lock: lock.symlink_to("/dev/zero"),
}


@pytest.mark.slow  # 3.8-5.4 s a case in the quick tier (2026-11-29): over its 5 s rule
@pytest.mark.parametrize("case", list(LOCKS))
def test_a_lock_path_holding_no_lock_file_is_stale(cli, case):
    name = _finished_experiment(cli)
    LOCKS[case](cli.runs / name / "driver.lock")
    for command in (("status",), ("status", name), ("cancel", name), ("resume", name)):
        proc = cli(*command, timeout=20)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, (command, proc.stderr)
    assert "driver: not running" in cli("status", name, check=0).stdout


@pytest.mark.parametrize("where", ["driver.lock", "driver.lock.takeover"])
def test_a_folder_where_a_lock_belongs_is_named_and_status_still_works(cli, where):
    """Before: status of every experiment failed ('driver.lock: Is a directory')."""
    name = _finished_experiment(cli)
    (cli.runs / name / where).mkdir()
    if where != "driver.lock":
        (cli.runs / name / "driver.lock").write_text("")
        os.utime(cli.runs / name / "driver.lock", (0, 0))  # an old, stale lock
    assert cli("status", timeout=20, check=0).stdout.count(name) == 1
    proc = cli("resume", name, timeout=20)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == (f"hpsearch: error: {cli.runs / name / where} is a folder, not a lock "
                           "file hpsearch wrote; remove it and run the command again\n")


def test_a_local_lock_without_start_time_goes_stale_with_its_heartbeat(cli):
    """Before: a lock of this host naming a dead pid and no start time counted as alive for
    ever (resume: 'already being driven'; cancel: 'has just ended; run cancel again')."""
    name = _finished_experiment(cli)
    _write_lock(cli.runs / name, age=3600, pid=_dead_pid()[0], pid_start=None)
    cli("resume", name, timeout=30, check=0)
    _write_lock(cli.runs / name, age=3600, pid=_dead_pid()[0], pid_start=None)
    assert "no driver was running" in cli("cancel", name, timeout=30, check=0).stdout


@pytest.mark.parametrize("pid", [1 << 32, 1 << 70])
def test_a_lock_naming_an_impossible_pid_is_unreadable_not_a_crash(cli, pid):
    """Before: cancel died in pidfd_open (OverflowError) with a traceback."""
    name = _finished_experiment(cli)
    _write_lock(cli.runs / name, age=5, pid=pid, pid_start=None)
    proc = cli("cancel", name, timeout=30)
    assert proc.returncode == 2 and "an unreadable lock" in proc.stderr, proc.stderr
    _write_lock(cli.runs / name, age=3600, pid=pid, pid_start=None)
    cli("cancel", name, timeout=30, check=0)


def test_a_huge_storage_override_is_quoted_short(cli):
    (cli.cwd / "q.yaml").write_text(GOOD)
    proc = cli("submit", "q.yaml", env={"HPSEARCH_STORAGE": "x" * 100_000})
    assert proc.returncode == 2 and len(proc.stderr) < 200, proc.stderr[:300]
    assert not cli.runs.exists()


def _in_private_mount(cli, setup: str, *commands: str) -> list[tuple[int, str]]:
    """Run `setup` (mount ... on the runs dir) and then each hpsearch command in a private
    mount namespace (nothing to clean up): [(exit code, stderr), ...]."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare(1) to mount")
    marker = "--- end of command ---"
    script = setup + "".join(
        f"\n{sys.executable} -m hpsearch {c} >/dev/null 2>err; echo $? >> rcs; cat err >> errs;"
        f" echo '{marker}' >> errs" for c in commands)
    proc = subprocess.run(["unshare", "-m", "bash", "-c", script], cwd=cli.cwd, env=cli.env,
                          capture_output=True, text=True, timeout=120)
    if proc.returncode != 0 or not (cli.cwd / "rcs").exists():
        pytest.skip(f"cannot mount here: {proc.stderr.strip()[:200]}")
    codes = [int(c) for c in (cli.cwd / "rcs").read_text().split()]
    errors = (cli.cwd / "errs").read_text().split(marker + "\n")
    return list(zip(codes, errors))


@pytest.mark.slow  # 3.8 s in the quick tier (2026-11-30): over its 3 s rule
def test_a_read_only_runs_dir_can_be_read(cli):
    """Before: every read-only command died in a traceback (sqlite3 'unable to open database
    file': a WAL store's -shm index cannot be created on a read-only mount)."""
    name = _finished_experiment(cli)
    results = _in_private_mount(
        cli, f"mount --bind {cli.runs} {cli.runs} && mount -o remount,bind,ro {cli.runs}",
        "status", f"status {name}", f"best {name}", f"export {name}", f"resume {name}")
    for code, err in results[:4]:
        assert code == 0 and err == "", err
    code, err = results[4]
    assert code == 1 and "Read-only file system" in err and "Traceback" not in err, err


def test_a_full_runs_dir_is_a_clear_error_and_nothing_lands_elsewhere(cli):
    (cli.cwd / "q.yaml").write_text(GOOD)
    before = set(os.listdir(cli.cwd))
    results = _in_private_mount(
        cli, f"mkdir -p {cli.runs} && mount -t tmpfs -o size=64k,mode=0700 tmpfs {cli.runs} && "
             f"head -c 60000 /dev/zero > {cli.runs}/filler", "submit q.yaml")
    ((code, err),) = results
    assert code == 1 and "Traceback" not in err, err
    assert err.startswith("hpsearch: error: ") and err.count("\n") == 1, err
    assert set(os.listdir(cli.cwd)) - before <= {"rcs", "errs", "err", "hpsearch-runs"}


def test_an_empty_runs_dir_variable_means_the_default_not_the_current_folder(cli):
    """Before: HPSEARCH_RUNS_DIR= (as from `HPSEARCH_RUNS_DIR=$UNSET`) put the experiment's
    store and trials straight into the current folder."""
    (cli.cwd / "q.yaml").write_text(GOOD)
    cli("submit", "q.yaml", env={"HPSEARCH_RUNS_DIR": ""})
    assert not (cli.cwd / "demo").exists()
    assert (cli.cwd / "hpsearch-runs" / "demo" / "store.sqlite").exists()

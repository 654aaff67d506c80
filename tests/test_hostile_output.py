"""Trial output is untrusted: whatever bytes a trial writes to metrics.jsonl, stdout,
result.json or checkpoints.jsonl, the driver keeps the good reports, skips the rest with a
warning naming file and line, never crashes, and a resumed driver neither crashes on the same
bytes nor reads them again. Memory stays bounded by the 1 MiB line cap."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys

import pytest

from hpsearch.ingest.lines import MAX_LINE, MAX_READ
from hpsearch.ingest.trial_files import TrialFiles
from hpsearch.store.reader import Reader
from hpsearch.store.store import Store
from tests.helpers import read_store

BIG = 18446744073709551615  # 2**64 - 1: no SQLite integer holds it

HOSTILE_METRICS = [  # metrics.jsonl lines 2..11; line 1 and 12 are good, 13 is cut short
    b'{"step": %d, "loss": 1}' % BIG,
    b'{"step": 1, "loss": 1e400}',
    b'{"step": 1, "loss": ' + b"9" * 400 + b"}",
    b'{"step": ' + b"9" * 400 + b', "loss": 1}',
    b'{"step": 1, "loss": 1, "acc": ' + b"1" * 5000 + b"}",  # beyond Python's digit limit
    b'{"step": 1, "lo\xffss": 1}',  # not UTF-8
    b'{"step": 1, "\\ud800": 1}',  # a lone surrogate: SQLite cannot encode it
    b"[" * 100_000,  # nested deeper than the JSON parser recurses
    b"x" * (3 * MAX_LINE),  # longer than the line cap
    b"\x00\x01binary\xfe\xff",
]
HOSTILE_STDOUT = [  # stdout.log lines 1..7; line 8 is a progress bar, line 9 a good report
    b"@hpsearch step=%d loss=1" % BIG,
    b"@hpsearch step=1 loss=1e400",
    b"@hpsearch step=1 loss=" + b"9" * 400,
    b"@hpsearch step=1 loss=\xff\xfe",
    b'@hpsearch {"step": 1, "loss": -1e999}',
    b"@hpsearch result loss=1e999",
    b"@hpsearch step=1 " + b"a" * (2 * MAX_LINE) + b"=1",
]
HOSTILE_MANIFEST = [  # checkpoints.jsonl lines 1..2
    b'{"step": %d, "path": "huge.pt"}' % (BIG + 1),
    b"{" * (2 * MAX_LINE),
]

EMIT = """\
import os, sys, time
x, pause = sys.argv[1], float(sys.argv[2])
trial_dir = os.environ["HPSEARCH_TRIAL_DIR"]
def append(name, data):
    with open(os.path.join(trial_dir, name), "ab") as fh:
        fh.write(data)
append("metrics.jsonl", open("metrics.payload", "rb").read()
       + b'{"step": 2, "loss": %s}\\n' % x.encode())
os.makedirs(os.path.join(trial_dir, "checkpoints"), exist_ok=True)
open(os.path.join(trial_dir, "checkpoints", "huge.pt"), "wb").close()
append("checkpoints.jsonl", open("manifest.payload", "rb").read())
sys.stdout.buffer.write(open("stdout.payload", "rb").read())
sys.stdout.flush()
time.sleep(pause)
append("metrics.jsonl", b'{"step": 4, "loss": 0.')  # the trial ends mid-write
"""


def _hostile_spec(cli, name: str, pause: float):
    (cli.cwd / "emit.py").write_text(EMIT)
    (cli.cwd / "metrics.payload").write_bytes(
        b'{"step": 0, "loss": 0.5}\n' + b"".join(line + b"\n" for line in HOSTILE_METRICS))
    (cli.cwd / "stdout.payload").write_bytes(
        b"".join(line + b"\n" for line in HOSTILE_STDOUT)
        + b"[####      ] 42%\r" * 1000 + b"\n" + b"@hpsearch step=3 acc=0.75\n")
    (cli.cwd / "manifest.payload").write_bytes(b"".join(l + b"\n" for l in HOSTILE_MANIFEST))
    return _one_trial_spec(cli, name, f"{{python}} emit.py {{x}} {pause}")


def _one_trial_spec(cli, name: str, command: str):
    return cli.write_spec(f"""
        name: {name}
        command: "{command}"
        search:
          strategy: random
          trials: 1
          space:
            x: {{low: 0.0, high: 1.0}}
        objective: {{metric: loss}}
        """, f"{name}.yaml")


def _outcome(cli, name: str):
    """(trial row, stored metrics {(step, name): value}, warning messages) of trial 0."""
    _, (trial,) = read_store(cli.runs, name)
    reader = Reader(cli.runs / name / "store.sqlite")
    try:
        metrics = {(m["step"], m["name"]): m["value"] for m in reader.metrics(0)}
        warnings = [e["message"] for e in reader.events(0, limit=1000) if e["kind"] == "warning"]
    finally:
        reader.close()
    return trial, metrics, warnings


def _assert_hostile_outcome(trial, metrics, warnings) -> None:
    x = trial.params["x"]
    assert trial.state == "completed", trial.error
    assert trial.objective_values == [x]
    assert metrics == {(0, "loss"): 0.5, (2, "loss"): x, (3, "acc"): 0.75}
    named = sorted(w.split(":")[0] for w in warnings if "skipped malformed report" in w)
    assert named == sorted([f"metrics.jsonl line {n}" for n in [*range(2, 12), 13]]
                           + [f"stdout.log line {n}" for n in range(1, 8)]), warnings
    assert sum("checkpoints.jsonl: skipped malformed line" in w for w in warnings) == 2
    assert sum("checkpoints/huge.pt: no step in its name" in w for w in warnings) == 1
    assert len(warnings) == 11 + 7 + 2 + 1, warnings
    assert any("out of the 64-bit range" in w for w in warnings)
    assert any("number out of range" in w for w in warnings)
    assert any("not UTF-8" in w for w in warnings)
    assert any(f"longer than {MAX_LINE} bytes" in w for w in warnings)


def test_hostile_report_lines_are_skipped_with_a_warning_and_good_ones_kept(cli):
    spec = _hostile_spec(cli, "hostile", pause=0)
    proc = cli("submit", spec, check=0)
    assert "metrics.jsonl line 2: skipped malformed report line" in proc.stdout
    assert "Traceback" not in proc.stderr
    _assert_hostile_outcome(*_outcome(cli, "hostile"))
    status = cli("status", "hostile", check=0)
    assert "completed" in status.stdout


@pytest.mark.slow  # over 5 s in the quick tier on 2026-11-28 (docs/testing.md#tiers)
def test_resume_after_sigkill_reads_on_over_the_same_hostile_bytes(cli):
    # The driver reads every hostile line while the trial sleeps, then is killed after the
    # trial's final read and before its outcome is committed. Resume must finish the trial
    # from the stored read positions: each warning once, no crash, the same metrics.
    spec = _hostile_spec(cli, "hostile-resume", pause=3)
    crashed = cli("submit", spec, env={"HPSEARCH_FAULT": "mid_ingest:1"})
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    _, _, warnings = _outcome(cli, "hostile-resume")
    assert len(warnings) == 11 + 7 + 2 + 1 - 1  # all but the cut-short last line: read
    resumed = cli("resume", "hostile-resume", check=0)
    assert "Traceback" not in resumed.stderr
    _assert_hostile_outcome(*_outcome(cli, "hostile-resume"))
    cli("resume", "hostile-resume")  # and again, over a finished experiment: no crash
    _assert_hostile_outcome(*_outcome(cli, "hostile-resume"))


def test_out_of_range_result_json_is_skipped_and_nan_still_fails_the_trial(cli):
    # result.json's loss has 400 digits: skipped with a warning, the last report counts.
    # A loss reported as NaN on purpose (a diverged run) fails its trial, as documented.
    spec = cli.write_spec("""
        name: results
        command: >-
          printf '{"loss": %s}' "$(printf '9%.0s' $(seq 400))" > "$HPSEARCH_TRIAL_DIR/result.json";
          echo "@hpsearch step=0 loss={x}"; [ {trial_id} = 0 ] || echo "@hpsearch step=1 loss=nan"
        search:
          strategy: grid
          trials: 2
          space:
            x: {choices: [0.25, 0.5]}
        objective: {metric: loss}
        """)
    proc = cli("submit", spec, check=1)  # one trial failed
    assert "Traceback" not in proc.stderr
    _, (good, diverged) = read_store(cli.runs, "results")
    assert good.state == "completed" and good.objective_values == [0.25]
    assert diverged.state == "failed" and "objective metric 'loss' is nan" in diverged.error
    reader = Reader(cli.runs / "results" / "store.sqlite")
    warnings = [e["message"] for e in reader.events(0, limit=100) if e["kind"] == "warning"]
    reader.close()
    assert len(warnings) == 1 and "result.json" in warnings[0], warnings
    assert "number out of range" in warnings[0]


MEASURE = """\
import resource, runpy, sys
sys.argv = ["hpsearch", *sys.argv[1:]]
try:
    runpy.run_module("hpsearch", run_name="__main__", alter_sys=True)
finally:
    print("PEAK_KB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)
"""

BIG_LINES = """\
import os, sys
x, megabytes = sys.argv[1], int(sys.argv[2])
trial_dir = os.environ["HPSEARCH_TRIAL_DIR"]
with open(os.path.join(trial_dir, "metrics.jsonl"), "ab") as fh:
    fh.write(b'{"step": 0, "loss": %s}\\n' % x.encode())
    for _ in range(megabytes):
        fh.write(b"x" * (1 << 20))  # never a newline: the file ends inside this line
out = sys.stdout.buffer
if megabytes:
    out.write(b"@hpsearch step=1 loss=")
    for _ in range(megabytes):
        out.write(b"9" * (1 << 20))
    out.write(b"\\n")
out.write(b"@hpsearch step=2 acc=0.5\\n")
out.flush()
"""


def _driver_peak_kb(cli, name: str, megabytes: int) -> tuple[int, list[str]]:
    spec = _one_trial_spec(cli, name, f"{{python}} big_lines.py {{x}} {megabytes}")
    proc = subprocess.run([sys.executable, "measure.py", "submit", spec], cwd=cli.cwd,
                          env=cli.env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    trial, metrics, warnings = _outcome(cli, name)
    assert trial.state == "completed" and trial.objective_values == [trial.params["x"]]
    assert set(metrics) == {(0, "loss"), (2, "acc")}
    peak = int(proc.stderr.rsplit("PEAK_KB", 1)[1].split()[0])
    return peak, warnings


@pytest.mark.slow  # 4.6 s in the quick tier (2026-11-30): over its 3 s rule
def test_a_100mb_line_without_newline_keeps_the_driver_small(cli):
    (cli.cwd / "measure.py").write_text(MEASURE)
    (cli.cwd / "big_lines.py").write_text(BIG_LINES)
    baseline, quiet = _driver_peak_kb(cli, "small-lines", 0)
    peak, warnings = _driver_peak_kb(cli, "huge-lines", 100)
    assert quiet == []
    assert sorted(w.split(":")[0] for w in warnings) == ["metrics.jsonl line 2",
                                                          "stdout.log line 1"], warnings
    print(f"driver peak RSS: {baseline / 1024:.0f} MiB baseline, {peak / 1024:.0f} MiB with "
          "a 100 MiB line in metrics.jsonl and in stdout")
    assert peak - baseline < 50 * 1024, (baseline, peak)


def _rchar() -> int:
    """Bytes this process has read by read() calls so far (Linux /proc/self/io)."""
    with open("/proc/self/io") as fh:
        return int(next(line for line in fh if line.startswith("rchar:")).split()[1])


def test_read_new_reads_only_the_appended_bytes_also_after_a_resume(tmp_path):
    trial_dir = tmp_path / "trial"
    trial_dir.mkdir()
    metrics, stdout = trial_dir / "metrics.jsonl", trial_dir / "stdout.log"
    metrics.write_bytes(b"".join(b'{"step": %d, "loss": 1.5}\n' % s for s in range(20_000)))
    stdout.write_bytes(b"epoch 3: 41% of the batches done, nothing to report\n" * 200_000)
    files = TrialFiles(trial_dir)
    assert len(files.read_new()) == 20_000

    def append_and_read(reader: TrialFiles) -> tuple[list[dict], int, int]:
        new_metrics = b'{"step": 99999, "loss": 0.5}\n'
        new_stdout = b"@hpsearch step=99999 acc=0.25\n"
        with open(metrics, "ab") as fh:
            fh.write(new_metrics)
        with open(stdout, "ab") as fh:
            fh.write(new_stdout)
        before = _rchar()
        records = reader.read_new()
        return records, _rchar() - before, len(new_metrics) + len(new_stdout)

    records, read, appended = append_and_read(files)
    assert [r["step"] for r in records] == [99999, 99999]
    assert read <= appended + 1024, (read, appended)

    # As a resumed driver builds it: from the state stored with the records.
    store = Store(tmp_path / "store.sqlite")
    store.add_output(0, 1, records, [], {"files": files.unsaved()})
    store.close()
    store = Store(tmp_path / "store.sqlite")
    resumed = TrialFiles(trial_dir, store.reads(0)["files"])
    store.close()
    records, read, appended = append_and_read(resumed)
    assert len(records) == 2
    assert read <= appended + 1024, (read, appended)
    assert sum(f.bytes_read for f in resumed.files.values()) == appended
    assert metrics.stat().st_size + stdout.stat().st_size > 10_000_000  # not read again


def test_a_line_in_progress_is_read_once_and_a_rotated_stdout_from_its_start(tmp_path):
    stdout = tmp_path / "stdout.log"
    files = TrialFiles(tmp_path)
    stdout.write_bytes(b"@hpsearch result loss=0.1\n@hpsearch step=1 lo")
    assert files.read_new() == [] and files.result_from_stdout == {"loss": 0.1}
    with open(stdout, "ab") as fh:
        fh.write(b"ss=2\n")
    assert [r["loss"] for r in files.read_new()] == [2.0]
    assert files.files["stdout.log"].bytes_read == stdout.stat().st_size  # each byte once
    state = json.loads(json.dumps(files.unsaved(), allow_nan=True))
    stdout.rename(tmp_path / "stdout.attempt1.log")  # a new attempt: its own stdout
    stdout.write_bytes(b"@hpsearch step=0 loss=nan\n")
    again = TrialFiles(tmp_path, state)
    assert again.result_from_stdout == {}  # the last attempt's result lines went with it
    (record,) = again.read_new()
    assert record["step"] == 0 and math.isnan(record["loss"])


def test_reports_among_progress_bars_are_found_and_a_running_read_is_bounded(tmp_path):
    stdout = tmp_path / "stdout.log"
    stdout.write_bytes(b"[###       ] 42%\r" * 2_000_000 + b"\n@hpsearch step=1 loss=0.5\n"
                       + b"not a report: @hpsearch step=9 loss=9\n"
                       + b"@hpsearch step=2 loss=0.25\r@hpsearch step=3 loss=0.125\n")
    files = TrialFiles(tmp_path)
    reader = files.files["stdout.log"]
    steps, calls = [], 0
    while reader.cursor.offset < stdout.stat().st_size:
        before = reader.bytes_read
        steps += [r["step"] for r in files.read_new()]  # the trial still runs: not final
        assert reader.bytes_read - before <= MAX_READ
        calls += 1
    assert steps == [1, 2, 3] and calls == 3  # 34 MB in 16 MiB reads
    assert reader.cursor.line == 4 and files.warnings == []


def test_garbage_gives_a_few_warnings_and_a_fifo_is_never_read(tmp_path):
    (tmp_path / "metrics.jsonl").write_bytes(b"garbage\n" * 1000)
    os.mkfifo(tmp_path / "stdout.log")  # a trial that makes its output a FIFO must not block us
    os.mkfifo(tmp_path / "result.json")
    files = TrialFiles(tmp_path)
    assert files.read_new(final=True) == [] and files.result() is None
    assert len(files.warnings) == 20 + 1 + 2, files.warnings
    assert "more than 20 malformed lines" in files.warnings[20]
    assert sum("not a regular file" in w for w in files.warnings) == 2
    again = TrialFiles(tmp_path, files.unsaved())  # a resumed driver: no warning again
    with open(tmp_path / "metrics.jsonl", "ab") as fh:
        fh.write(b"more garbage\n")
    assert again.read_new() == [] and again.warnings == []


def test_a_fifo_as_stderr_log_does_not_hang_the_driver(cli):
    """After a trial failed, the driver adds the tail of its stderr.log to the error: it is
    opened without blocking, so a trial that left a FIFO there (an open that waits for a
    writer forever) gets a plain failure, and the search goes on."""
    spec = cli.write_spec("""
        name: fifo-files
        command: >-
          cd "$HPSEARCH_TRIAL_DIR" && rm -f stderr.log && mkfifo stderr.log && exit {code}
        search: {strategy: grid, space: {code: {choices: [3, 4]}}}
        objective: {metric: loss}
        """)
    proc = cli("submit", spec, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # trials failed; no hang, no crash
    _, trials = read_store(cli.runs, "fifo-files")
    assert [(t.state, t.error) for t in trials] == [("failed", "exit code 3"),
                                                    ("failed", "exit code 4")]


def test_an_exit_code_file_that_is_a_fifo_or_endless_is_no_exit_code(tmp_path):
    """A driver that adopts a trial reads the exit code its shell recorded: a FIFO or a
    link to /dev/zero in its place is no exit code (the attempt is lost), never a read
    that blocks or never ends."""
    from hpsearch.launch.attempt import read_exit_code
    fifo, zero, good = tmp_path / "fifo", tmp_path / "zero", tmp_path / "good"
    for folder in (fifo, zero, good):
        folder.mkdir()
    os.mkfifo(fifo / "exit_code")
    (zero / "exit_code").symlink_to("/dev/zero")
    (good / "exit_code").write_text("7 2\n")
    assert [read_exit_code(d, 2) for d in (fifo, zero, good)] == [None, None, 7]


def test_an_exit_code_of_another_attempt_is_not_this_attempts_end(tmp_path):
    """The exit code file names its attempt: attempt 1's (not yet set aside, or as a stale
    NFS cache of the trial dir still shows it) is never read as attempt 2's end; a file of
    an older hpsearch, without the attempt, is read as before."""
    from hpsearch.launch.attempt import EXIT_TRAP, read_exit_code
    env = {**os.environ, "HPSEARCH_TRIAL_DIR": str(tmp_path), "HPSEARCH_ATTEMPT": "1"}
    subprocess.run(["/bin/sh", "-c", EXIT_TRAP + "exit 3"], env=env, check=False)
    assert (tmp_path / "exit_code").read_text() == "3 1\n"
    assert read_exit_code(tmp_path, 1) == 3 and read_exit_code(tmp_path, 2) is None
    (tmp_path / "exit_code").write_text("5\n")
    assert read_exit_code(tmp_path, 2) == 5

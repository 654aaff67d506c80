"""Fail fast and tolerate failures (issue 15, item 4): `search.max_failures` stops a search
whose trials keep failing, with exit 1 and the common cause; `--allow-failures` lets a
pipeline accept a finished search with some failed trials and still write the best.
"""

from __future__ import annotations

import json

import pytest

from hpsearch.store.reader import Reader
from hpsearch.store.runs import STORE_FILE
from tests.helpers import event_kinds, read_store

BROKEN = """
name: {name}
command: >-
  test -f {ok} && echo "@hpsearch step=0 loss={{x}}" ||
  {{ echo "Traceback (most recent call last):" >&2;
  echo "ModuleNotFoundError: No module named 'torchx'" >&2; exit 1; }}
search:
  strategy: random
  trials: 12
  parallel: 2
  seed: 1
  space:
    x: {{low: 0.0, high: 1.0}}
{extra}
objective: {{metric: loss}}
executor: {{type: local}}
"""

GRID = """
name: {name}
command: >-
  if [ {{x}} -ge {bad} ]; then echo "RuntimeError: diverged" >&2; exit 1; fi;
  echo "@hpsearch step=0 loss={{x}}"
search:
  strategy: grid
  space:
    x: {{choices: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]}}
{extra}
objective: {{metric: loss}}
executor: {{type: local}}
"""


def _attempts(cli, name: str) -> list[dict]:
    reader = Reader(cli.runs / name / STORE_FILE)
    try:
        return reader.all_attempts()
    finally:
        reader.close()


def _counts(cli, name: str) -> dict[str, int]:
    trials = read_store(cli.runs, name)[1]
    return {s: sum(t.state == s for t in trials) for s in {t.state for t in trials}}


def test_a_search_whose_trials_all_fail_stops_after_five_and_names_the_cause(cli, tmp_path):
    ok = tmp_path / "data-ready"
    spec = cli.write_spec(BROKEN.format(name="broken", ok=ok, extra=""))
    proc = cli("submit", spec, "--no-tui", check=1)
    assert "search stopped: 5 trials failed and none completed" in proc.stderr + proc.stdout
    assert "most common cause (5 of 5): exit code 1: ModuleNotFoundError: No module named " \
           "'torchx'" in proc.stderr, proc.stderr
    assert "hpsearch resume broken" in proc.stderr
    exp, trials = read_store(cli.runs, "broken")
    assert exp.status == "failed"
    counts = _counts(cli, "broken")
    # the one in flight at the fifth failure is cancelled, or failed on its own first; one
    # more may have waited for a slot (asked ahead, tests/test_ask_ahead.py): it stays
    # queued, never started
    assert 5 <= counts["failed"] <= 6, counts
    assert sum(t.started is not None for t in trials) <= 6, counts
    assert set(counts) <= {"failed", "cancelled", "queued"}, counts
    assert "max_failures" in event_kinds(cli.runs, "broken")
    assert "experiment broken: failed" in cli("status", "broken", check=0).stdout

    ok.write_text("")  # the cause fixed: a resumed driver counts afresh and goes on
    cli("resume", "broken", "--no-tui", check=1)  # exit 1: the failed trials stay failed
    exp, trials = read_store(cli.runs, "broken")
    assert exp.status == "completed"
    assert _counts(cli, "broken") == {"completed": 12 - counts["failed"],
                                      "failed": counts["failed"]}


UNSTARTABLE = """
name: {name}
command: hpsearch-no-such-program --x {{x}}
search:
  strategy: random
  trials: 24
  parallel: 4
  seed: 1
  space:
    x: {{low: 0.0, high: 1.0}}
objective: {{metric: loss}}
executor: {{type: local}}
retries: {{max: 2}}
"""


def test_a_command_that_cannot_start_stops_the_search_before_retrying_it(cli):
    """Issue 38 item 1: a command that is not found fails each launch with exit 127. Each
    trial used to be retried first (retries: {max: 2}: 3 launches a trial), so the limit of
    5 trials failed for good tripped after 17 launches or more; a launch error now counts at
    its first attempt, its retry left queued, and no attempt is launched after the stop."""
    spec = cli.write_spec(UNSTARTABLE.format(name="typo"))
    proc = cli("submit", spec, "--no-tui", check=1)
    out = proc.stdout + proc.stderr
    assert "search stopped: 5 trials failed (5 could not start; their retries are left " \
           "queued) and none completed" in out, out
    assert "most common cause (5 of 5): exit code 127:" in out, out
    attempts = _attempts(cli, "typo")
    assert len(attempts) <= 5 + 4, attempts  # the fifth, and those in flight then
    stopped = out.index("search stopped")
    assert " started (attempt" not in out[stopped:], out[stopped:]
    cli("resume", "typo", "--no-tui", check=1)  # not fixed: stops again, as many launches
    assert len(_attempts(cli, "typo")) <= 2 * (5 + 4)


def test_a_launch_error_of_one_trial_is_retried_once_another_ran_its_command(cli):
    """A passing launch error (one trial's first attempt, exit 127) holds its retry back
    until a trial has run the command; then it runs, and every trial completes."""
    spec = cli.write_spec(GRID.format(name="passing", bad=99, extra="").replace(
        "if [ {x} -ge 99 ]", "if [ {x} = 1 ] && [ ! -e tried ]; then touch tried; exit 127; "
        "fi; if [ {x} -ge 99 ]"))
    proc = cli("submit", spec, "--no-tui", check=0)
    assert "(held back until a trial runs its command, or nothing else is left)" in \
        proc.stdout, proc.stdout
    assert _counts(cli, "passing") == {"completed": 10}
    tries = [a for a in _attempts(cli, "passing") if a["trial"] == 1]
    assert [a["failure"] for a in tries] == ["launch_error", None], tries


def test_the_same_failure_on_slurm_jobs_is_one_cause():
    """The cause a stopped search names counts the same error once, whichever Slurm job,
    node and batch-script line it came from (the cluster run of issue 38 said '1 of 3')."""
    from hpsearch.ingest.outcome import cause, same_cause

    errors = [f"exit code 127 (Slurm job {job} FAILED on node{n}): /p/nope: not found\n"
              f"/tmp/spool/slurmd-node{n}/job0{job}/slurm_script: line {line}: /p/nope: "
              "not found" for job, n, line in ((3784, 2, 26), (3780, 1, 77))]
    assert {cause(same_cause(e)) for e in errors} == {"exit code 127: /p/nope: not found"}


def test_more_than_a_fraction_failed_stops_the_search(cli):
    spec = cli.write_spec(GRID.format(name="frac", bad=3, extra="  max_failures: "
                                      "{first: 0, fraction: 0.5}\n  parallel: 1"))
    proc = cli("submit", spec, "--no-tui", check=1)
    # 0,1,2 complete; 3.. fail: after 7 finished, 4 failed > 3.5
    assert "4 of 7 finished trials failed, more than search.max_failures.fraction 0.5" \
        in proc.stderr, proc.stderr
    counts = _counts(cli, "frac")  # and the next, asked ahead, waits never started
    assert counts == {"completed": 3, "failed": 4, "queued": 1}, counts


def test_max_failures_false_runs_every_trial(cli):
    spec = cli.write_spec(GRID.format(name="tolerant", bad=0, extra="  max_failures: false"))
    cli("submit", spec, "--no-tui", check=1)
    assert read_store(cli.runs, "tolerant")[0].status == "failed"  # every trial failed
    assert _counts(cli, "tolerant") == {"failed": 10}


def test_allow_failures_exits_0_and_writes_the_best_of_a_finished_search(cli, tmp_path):
    spec = cli.write_spec(GRID.format(name="some", bad=8, extra=""))
    best = tmp_path / "best.json"
    proc = cli("submit", spec, "--no-tui", "--best-out", best, check=1)
    assert not best.exists() and "not writing" in proc.stderr
    cli("resume", "some", "--no-tui", check=1)  # nothing left to run: still 2 failed

    spec2 = cli.write_spec(GRID.format(name="some2", bad=8, extra=""), "some2.yaml")
    proc = cli("submit", spec2, "--no-tui", "--best-out", best, "--allow-failures", check=0)
    assert "2 trial(s) failed; exit 0 as --allow-failures asks" in proc.stderr
    assert json.loads(best.read_text())["params"] == {"x": 0}


def test_allow_failures_does_not_hide_a_search_stopped_for_failures(cli, tmp_path):
    spec = cli.write_spec(BROKEN.format(name="stillbroken", ok=tmp_path / "never", extra=""))
    cli("submit", spec, "--no-tui", "--allow-failures", check=1)


@pytest.mark.parametrize("value,message", [
    ("{fraction: 1.5}", "search.max_failures.fraction: expected a fraction of trials, "
                        "0 <= x < 1; got"),
    ("{first: -1}", "search.max_failures.first: expected an integer >= 0; got -1"),
    ("{frist: 3}", "search.max_failures.frist: unknown key 'frist'; did you mean 'first'?"),
    ("7", "search.max_failures: expected a mapping with keys first, fraction"),
])
def test_a_bad_max_failures_is_exit_2_with_its_line(cli, value, message):
    spec = cli.write_spec(GRID.format(name="bad", bad=8, extra=f"  max_failures: {value}"))
    proc = cli("submit", spec, check=2)
    assert message in proc.stderr and "spec.yaml:9:" in proc.stderr, proc.stderr
    assert not (cli.runs / "bad").exists()

"""Issue 38 item 5: under promotion, a script that ignores its checkpoint trains from step 0
again in every segment. The driver says so, once per segment, in the events, `hpsearch
status` and the report (hpsearch.ingest.resume_check); a script that resumes gets no word."""

from __future__ import annotations

import json
import sys
import textwrap

from hpsearch.ingest.resume_check import KIND, ResumeCheck
from hpsearch.report.data import collect
from tests.conftest import Cli

SCRIPT = textwrap.dedent("""
    import json, sys
    from hpsearch import trial
    p = trial.params()
    latest = trial.latest_checkpoint()
    start = json.loads(latest.read_text())["next"] if latest and sys.argv[1] == "yes" else 0
    end = min(9, trial.budget() or 9)
    for step in range(start, end):
        trial.report(step, loss=p["x"] + 1.0 / (step + 1))
        with trial.checkpoint(step, ".json") as path:
            path.write_text(json.dumps({"next": step + 1}))
""")

SPEC = """
name: {name}
command: {python} {script} {resumes} {{x}}
search:
  strategy: grid
  parallel: 1
  space: {{x: {{choices: [0, 1, 2]}}}}
  pruner: {{type: asha, mode: promotion, min_resource: 3, reduction_factor: 3,
           max_resource: 9}}
objective: {{metric: loss, direction: minimize}}
executor: {{type: local}}
"""


def _search(cli: Cli, name: str, resumes: str) -> None:
    script = cli.cwd / "segments.py"
    script.write_text(SCRIPT)
    spec = cli.write_spec(SPEC.format(name=name, python=sys.executable, script=script,
                                      resumes=resumes), f"{name}.yaml")
    cli("submit", spec, "--no-tui", "-q", timeout=120, check=0)


def test_a_segment_that_retrains_from_step_0_is_said_once_in_events_status_and_report(cli):
    _search(cli, "restarts", "no")
    events = json.loads(cli("events", "restarts", "--kind", KIND, "--json").stdout)
    # the promoted trial's second segment (rung 9) reported steps 0 and 1 below its
    # checkpoint's step 2: one event for the segment, not one per line
    assert [(e["trial"], e["message"].split(":")[0]) for e in events] == [
        (0, "attempt 2 did not resume from its checkpoint")], events
    assert "first report is step 0, below step 2" in events[0]["message"]
    status = cli("status", "restarts").stdout
    assert ("warning: segments that did not resume from their trial's checkpoint" in status
            and "trial 0 attempt 2." in status), status
    notes = collect(cli.runs / "restarts", use_sacct=False).notes
    assert any("trial 0 attempt 2." in n for n in notes), notes


def test_segments_that_resume_get_no_warning(cli):
    _search(cli, "resumes", "yes")
    assert json.loads(cli("events", "resumes", "--kind", KIND, "--json").stdout) == []
    assert "did not resume" not in cli("status", "resumes").stdout


def test_the_check_is_once_per_attempt_and_kept_with_the_read_cursors():
    check = ResumeCheck()
    assert not check.due(1)  # a first attempt has nothing to resume from
    assert check.due(2) and check.check(2, 0, None) is None  # no checkpoint: nothing said
    assert check.check(3, 5, 4) is None and check.check(4, 4, 4) is None  # resumed
    assert "step 0, below step 4" in (check.check(5, 0, 4) or "")
    saved = check.unsaved()
    assert saved == {"checked": 5} and check.unsaved() is None
    again = ResumeCheck(saved)  # a resumed driver
    assert not again.due(5) and again.due(6)

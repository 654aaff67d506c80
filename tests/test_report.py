"""`hpsearch report`: the HTML file and PNG figures of a real local search (with a failed
trial), the resource table's classes, and what a browser shows (headless Chromium takes a
screenshot). Chromium missing: that test skips and says why; under CI=true it fails."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from hpsearch.report import data as report_data
from hpsearch.report import write_report
from hpsearch.slurm.sacct import JobUsage
from tests.tui.conftest import build_store
from tests.tui.test_terminal import SPEC, TRIAL

pytestmark = pytest.mark.slow
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.fixture
def finished_search(cli) -> Path:
    (cli.cwd / "trial.sh").write_text(TRIAL)
    spec = cli.write_spec(SPEC.format(sleep=0, count=8))
    cli("submit", spec, "-q", check=1)  # exit 1: trial x=3 failed
    return cli.runs / "tui"


def test_report_writes_self_contained_html_and_pngs(cli, finished_search: Path):
    out = cli.cwd / "rep"
    proc = cli("report", "tui", "--out", out, check=0)
    assert f"wrote {out / 'report.html'}" in proc.stdout
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert pngs == ["history.png", "learning_curves.png", "parallel_coordinates.png",
                    "slices.png"]  # one objective: no Pareto front, and no note for it
    page = (out / "report.html").read_text()
    assert "id='pareto_front'" not in page
    # one parameter: nothing to rank, and the report says so where the figure would be
    assert ("<h2 id='importances'>Parameter importances</h2><p class='note left-out'>Not "
            "drawn: only one parameter varies (x)") in page
    for name in pngs:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert page.count("src='data:image/png;base64,") == 4
    assert not re.search(r"""(src|href)=['"]?(https?:|//)""", page)  # nothing fetched
    assert "<script" not in page
    assert "Failed trials" in page and "boom at x=3" in page
    # the resource table: one row per trial and the total, split by class
    assert all(f"<th colspan='2'>{c}</th>" in page for c in report_data.CLASSES)
    assert page.count("<tr><td>") >= 8 and "<tr class='total'><td>total</td>" in page
    assert "the executor's start and end times in the store" in page


def test_report_multi_objective_draws_the_pareto_front(cli):
    spec = EXAMPLES / "quadratic" / "multi.yaml"
    cli("submit", spec, "-q", check=0)
    out = cli.cwd / "rep"
    cli("report", "quadratic-multi", "--out", out, check=0)
    assert (out / "pareto_front.png").exists()
    assert "Pareto front" in (out / "report.html").read_text()


class _FakeSlurm:
    def __init__(self, records):
        self.records = records

    def sacct_usage(self, job_ids):
        return self.records


def test_resources_from_sacct_where_it_knows_the_job_else_from_the_store(tmp_path: Path):
    exp = build_store(tmp_path / "exp", 10, executor="slurm", running=0)
    records = [JobUsage("1000", "COMPLETED", 3600.0, 2, 4, 8),
               JobUsage("1009", "FAILED", 1800.0, 1, 1, 1)]
    got = report_data.collect(exp, slurm=_FakeSlurm(records))
    by_trial = {u.trial: u for u in got.usage}
    assert (by_trial[0].source, by_trial[0].node_hours, by_trial[0].gpu_hours) == \
        ("sacct", 2.0, 4.0)
    assert (by_trial[9].kind, by_trial[9].gpu_hours) == ("completed", 0.5)  # class: the store's
    assert by_trial[1].source == "store" and by_trial[1].kind == "completed"
    none = report_data.collect(exp, slurm=_FakeSlurm(None))
    assert any("no accounting" in n for n in none.notes)
    assert {u.source for u in none.usage} == {"store"}


def test_attempt_classes():
    c = report_data.attempt_class
    assert c("completed", None) == "completed"
    assert c("failed", "preempted") == "preempted"
    assert c("lost", "job vanished") == "preempted"
    assert c("failed", "node_fail") == "preempted"
    assert c("failed", "exit code 3") == "failed"
    assert c("cancelled", "cancelled") == "cancelled"
    assert c("pruned", None) == "pruned"


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    reason = "chromium is not installed (scripts/test.sh installs it as root)"
    if os.environ.get("CI"):
        pytest.fail(f"CI is set, so the report screenshot test must run, but: {reason}",
                    pytrace=False)
    pytest.skip(reason)


def test_report_opens_in_headless_chromium(cli, finished_search: Path):
    browser = _chromium()
    out = cli.cwd / "rep"
    write_report(finished_search, out)
    shot = out / "screenshot.png"
    proc = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                           "--disable-dev-shm-usage", f"--screenshot={shot}",
                           "--window-size=1200,2000", (out / "report.html").as_uri()],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HOME": str(cli.cwd)})
    assert shot.exists(), (proc.returncode, proc.stdout, proc.stderr)
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1200, 2000)
    assert len(data) > 50_000  # figures drawn, not a blank page
    keep = os.environ.get("HPSEARCH_KEEP_SCREENSHOT")
    if keep:
        shutil.copy(shot, keep)

"""What users see of a search over several sites (docs/brokerage.md#what-users-see): each
site's trial speed (hpsearch.views.sites), the speed column of `status` and `sites`, the
report's sites.png (hpsearch.report.figures.sites) and its scouts section
(hpsearch.report.brokerage). The store is written through hpsearch's own
Store API as the driver writes it (tests/sites_store.py): no cluster needed here;
tests/slurm/test_sites.py checks status and the figure on real runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpsearch.report import data as report_data
from hpsearch.report import figures
from hpsearch.report.html import write
from hpsearch.store.reader import Reader
from hpsearch.store.runs import STORE_FILE
from hpsearch.store.site_speeds import Speed, step_speeds
from hpsearch.views.sites import experiment_sites, read_site_lines
from tests.sites_store import CEILING, SCOUTS, SITES, build_sites_store, check_sites_figure


def _lines(exp_dir: Path):
    with Reader(exp_dir / STORE_FILE) as reader:
        exp = reader.experiment()
        return read_site_lines(reader, experiment_sites(exp, exp_dir.parent), reader.trials(),
                               reader.all_attempts())


def test_a_sites_speed_is_the_median_step_time_between_reports_of_one_attempt():
    rows = [("a", 1, 1, 0, 10.0), ("a", 1, 1, 2, 12.0), ("a", 1, 1, 3, 15.0),  # 1, 3 s/step
            ("a", 1, 2, 4, 100.0), ("a", 1, 2, 5, 101.0),  # a new attempt: no pair across
            ("b", 2, 1, 0, 50.0), ("b", 2, 1, 1, 49.0),    # time went back: left out
            ("c", 3, 1, 0, 5.0)]                           # one report: no pair
    assert step_speeds(rows) == {"a": Speed(1.0, 3)}


def test_site_lines_carry_each_sites_speed_from_the_store(tmp_path: Path):
    lines = _lines(build_sites_store(tmp_path / "runs" / "sites"))
    assert [ln.site.name for ln in lines] == list(SITES)
    assert [ln.speed for ln in lines] == [Speed(0.5, 9), Speed(2.0, 3), None]
    assert [(ln.load.running, ln.load.pending, ln.load.ended) for ln in lines] == \
        [(1, 0, 3), (0, 1, 3), (0, 0, 0)]


def test_the_broker_weighs_a_slower_site_by_its_speed_and_status_shows_the_same_weights(
        tmp_path: Path):
    """right's trials take 2 s a step, left's 0.5: right's weight is scaled by 0.25, as the
    running driver's broker scales it (brokerage.speed_factor); idle has no speed: 1."""
    import time

    from hpsearch.executors import brokerage
    lines = _lines(build_sites_store(tmp_path / "runs" / "sites"))
    # the same counts, weighed without speeds (quickest None), a moment later
    unweighed = {ln.site.name: brokerage.verdict(ln.site, ln.load, time.time()).weight
                 for ln in lines}
    by_name = {ln.site.name: ln for ln in lines}
    assert by_name["right"].verdict.weight / unweighed["right"] == pytest.approx(0.25, rel=1e-3)
    assert by_name["left"].verdict.weight / unweighed["left"] == pytest.approx(1.0, rel=1e-3)
    assert by_name["idle"].verdict.weight / unweighed["idle"] == pytest.approx(1.0, rel=1e-3)
    assert "2 s a step" in by_name["right"].describe(), by_name["right"].describe()


def test_the_running_broker_reads_speeds_from_the_reports_stored_since_it_last_looked(
        tmp_path: Path):
    """SpeedTracker (the sites and pilots executors' broker): the same speeds as the whole
    store's, read a few rows at a time; one site measured alone weighs nothing."""
    from hpsearch.executors import brokerage
    from hpsearch.store.site_speeds import SpeedTracker, read_speeds
    exp_dir = build_sites_store(tmp_path / "runs" / "sites")
    with Reader(exp_dir / STORE_FILE) as reader:
        tracker = SpeedTracker(reader.db)
        assert tracker.speeds() == read_speeds(reader) == {"left": Speed(0.5, 9),
                                                           "right": Speed(2.0, 3)}
        assert tracker.after > 0 and tracker.speeds() == read_speeds(reader)  # nothing new
        loads = {"left": brokerage.SiteLoad(), "right": brokerage.SiteLoad()}
        tracker.update(loads)
    assert (loads["left"].seconds_per_step, loads["right"].seconds_per_step) == (0.5, 2.0)
    assert brokerage.fastest(loads.values()) == 0.5
    assert brokerage.fastest([loads["left"], brokerage.SiteLoad()]) is None


def test_status_and_sites_print_the_speed_column_and_explain_it(cli):
    build_sites_store(cli.runs / "sites")
    status = cli("status", "sites", check=0).stdout
    header = next(line for line in status.splitlines() if line.startswith("site "))
    assert header.split()[:10] == ["site", "partition", "cluster", "running", "pending", "ended",
                                   "site", "failures", "queue", "wait"], header
    assert "speed" in header, header
    rows = {line.split()[0]: line.split() for line in status.splitlines()
            if line.split() and line.split()[0] in SITES}
    assert rows["left"][:7] == ["left", "left", "1", "0", "3", "1", rows["left"][6]]
    assert "0.5s/step" in rows["left"] and "2s/step" in rows["right"], rows
    assert not any(cell.endswith("s/step") for cell in rows["idle"]), rows
    explained = cli("sites", "sites", check=0).stdout
    assert "left 0.5 s/step over 9 pair(s) of reports; right 2 s/step over 3 pair(s)" \
        in explained, explained


def test_the_report_draws_each_attempt_in_its_sites_band_and_says_what_scouts_resized(
        tmp_path: Path):
    exp_dir = build_sites_store(tmp_path / "runs" / "sites")
    caption = check_sites_figure(exp_dir)
    timeline = figures.sites(report_data.collect(exp_dir, use_sacct=False)).figure.axes[0]
    gids = {p.get_gid() for p in timeline.patches}
    assert "wait 5.1" in gids and "run 5.1" not in gids  # pending: pale to now
    assert "left: 4 attempts (50%)" in caption and "speed 0.5s/step" in caption
    assert "idle: 0 attempts (0%), median queue wait -, speed -" in caption
    data = report_data.collect(exp_dir, use_sacct=False)
    page = write(data, tmp_path / "out").read_text()
    assert (tmp_path / "out" / "sites.png").exists()
    assert "<h2 id='scouts'>Scouts</h2>" in page
    assert SCOUTS in page and f"trial 3: attempt 2: {CEILING}".replace("'", "&#x27;") in page


def test_no_sites_no_sites_figure(tmp_path: Path):
    from tests.tui.conftest import build_store
    data = report_data.collect(build_store(tmp_path / "runs" / "plain", 5), use_sacct=False)
    assert figures.sites(data) is None and not data.brokerage.resizes

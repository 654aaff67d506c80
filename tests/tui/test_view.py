"""The live view's snapshot and layout, without a terminal: what fits in 80x24 and smaller,
and one snapshot + render over a store of 10,000 trials."""

from __future__ import annotations

import io
import sqlite3
from pathlib import Path

from rich.console import Console

from hpsearch.store.rows import IN_FLIGHT
from hpsearch.store.runs import STORE_FILE
from hpsearch.tui.model import ClusterWatch, LeafLine, SnapshotSource, pareto_size
from hpsearch.tui.text import format_duration
from hpsearch.tui.view import render
from tests.tui.conftest import build_store


def _screen(snap, width: int, height: int, footer: str | None = "footer") -> list[str]:
    console = Console(file=io.StringIO(), width=width, height=height, color_system=None,
                      force_terminal=False)
    console.print(render(snap, width, height, footer))
    return console.file.getvalue().rstrip("\n").split("\n")


def test_80x24_shows_progress_best_trials_and_a_failed_trial(tmp_path: Path):
    source = SnapshotSource(build_store(tmp_path / "exp", 120, running=3))
    snap = source.snapshot(rows=24)
    lines = _screen(snap, 80, 24)
    text = "\n".join(lines)
    assert len(lines) <= 24 and all(len(line) <= 80 for line in lines), text
    assert "117/120 finished" in text
    assert "115 completed" in text and "2 failed" in text and "3 running" in text
    assert "best: #" in text and "loss=0" in text
    assert "footer" in lines[-1]
    # in-flight trials first, then the most recently finished
    assert text.index("117 ") < text.index("116 ")
    source.close()


def test_failed_trial_is_shown_as_failed(tmp_path: Path):
    source = SnapshotSource(build_store(tmp_path / "exp", 50, running=0))
    text = "\n".join(_screen(source.snapshot(rows=24), 80, 24))
    assert any(line.lstrip().startswith("49 ") and "failed" in line
               for line in text.splitlines()), text
    source.close()


def test_smaller_terminals_drop_parts_but_never_overflow(tmp_path: Path):
    source = SnapshotSource(build_store(tmp_path / "exp", 60, executor="slurm"))
    leaves = tuple(LeafLine(f"leaf{i}", 1, 1, 0, ()) for i in range(1, 5))
    snap = source.snapshot((leaves, None), rows=30)
    full = "\n".join(_screen(snap, 120, 30))
    assert "leaf1" in full and "#56" in full  # trials in flight are listed on their leaf
    assert "node[1-2] leaf1" in full
    for width, height in [(80, 24), (60, 15), (40, 10), (30, 6), (20, 3)]:
        lines = _screen(snap, width, height)
        assert len(lines) <= height, (width, height, lines)
        assert all(len(line) <= width for line in lines), (width, height, lines)
    small = "\n".join(_screen(snap, 40, 10))
    assert "big" in small and "state" in small  # the header and the trial table stay
    source.close()


def test_pareto_front_size_counts_non_dominated_points():
    assert pareto_size([(1, 5), (2, 2), (5, 1), (3, 3), (6, 6)]) == 3
    assert pareto_size([(1, 1), (1, 1), (2, 2)]) == 2


def test_multi_objective_shows_the_front_size(tmp_path: Path):
    source = SnapshotSource(build_store(tmp_path / "exp", 40, directions=("minimize",
                                                                         "minimize")))
    text = "\n".join(_screen(source.snapshot(), 80, 24))
    assert "Pareto front:" in text and "minimize loss, minimize cost" in text
    source.close()


def test_cluster_watch_turns_errors_into_a_note():
    class Broken:
        def topology(self):
            from hpsearch.slurm.failures import SlurmError
            raise SlurmError(["scontrol", "show", "topology"], 1, "connection refused")
    leaves, note = ClusterWatch(slurm=Broken())._query()
    assert leaves is None and "connection refused" in note


def test_10000_trials_one_snapshot_and_render(tmp_path: Path):
    """Responsiveness: the queries are bounded, so this stays well under a refresh period
    (timings: benchmarks/tui_render.py; no timed assertion here)."""
    source = SnapshotSource(build_store(tmp_path / "exp", 10_000, running=8))
    snap = source.snapshot(rows=24)
    lines = _screen(snap, 80, 24)
    assert len(lines) <= 24

    assert snap.finished == 10_000 - 8
    assert snap.counts["failed"] == 199 and snap.counts["running"] == 8
    assert snap.best is not None
    source.close()


def test_the_trials_shown_are_those_in_flight_then_the_most_recently_finished(tmp_path):
    """_shown_trials sorts without a condition on the state and drops the trials in flight
    after: the rows the one query with that condition gave (finished out of id order)."""
    exp_dir = build_store(tmp_path / "exp", 300, running=5)
    with sqlite3.connect(exp_dir / STORE_FILE) as db:
        db.execute("update trials set finished = 2e9 - id * 7 % 300 where finished not null")
    source = SnapshotSource(exp_dir)
    db = source.reader.db
    marks = ",".join("?" * 3)
    for limit in (1, 5, 6, 40, 400):
        flying = [i for (i,) in db.execute(f"select id from trials where state in ({marks}) "
                                           "order by id limit ?", (*IN_FLIGHT, limit))]
        recent = [i for (i,) in db.execute(
            f"select id from trials where state not in ({marks}) order by finished desc, "
            "id desc limit ?", (*IN_FLIGHT, max(0, limit - len(flying))))]
        assert [t.id for t in source._shown_trials(limit)] == flying + recent, limit
    source.close()


def test_the_header_says_slurm_is_unreachable_until_it_answers_again(tmp_path: Path):
    """The Slurm executor's trouble events: the open one is in the snapshot and the header
    (while a driver runs), and gone once its end is recorded."""
    import dataclasses

    from hpsearch.store.runs import STORE_FILE
    from hpsearch.store.store import Store
    exp_dir = tmp_path / "exp"
    build_store(exp_dir, 10, executor="slurm", running=2)
    store = Store(exp_dir / STORE_FILE)
    store.set_experiment_status("running", "")
    store.add_event("slurm_unreachable", "Slurm unreachable since 2026-11-26 17:05:12: "
                    "sacct: error: Problem talking to the database")
    source = SnapshotSource(exp_dir)
    snap = dataclasses.replace(source.snapshot(rows=24), driver_pid=4242)
    assert snap.slurm_trouble.startswith("Slurm unreachable since 2026-11-26 17:05:12")
    text = "\n".join(_screen(snap, 160, 24))
    assert "Slurm unreachable since 2026-11-26 17:05:12" in text
    store.add_event("slurm_reachable", "Slurm answers again after 61 s")
    assert source.snapshot(rows=24).slurm_trouble is None
    source.close()
    store.close()


def test_pilot_panel_shows_each_live_pilot_its_nodes_trials_and_time_left(tmp_path: Path):
    """The pilot panel: each pilot not ended with its job, state, nodes and leaf, time up
    (or waiting), time left from its heartbeat file, and the trials running in it; a trial
    running in a pilot under one leaf shows that leaf. Smaller terminals drop the panel
    line by line before the trial rows, and nothing overflows."""
    from tests.tui.conftest import build_pilot_store
    source = SnapshotSource(build_pilot_store(tmp_path / "pil"))
    snap = source.snapshot(rows=30)
    assert [p.id for p in snap.pilots] == [1, 2] and snap.pilots_ended == 1
    assert snap.pilots[0].trials == (0, 1, 2)
    lines = _screen(snap, 100, 30)
    text = "\n".join(lines)
    assert "pilots (2 live, 1 ended)" in text, text
    row = next(line for line in lines if line.startswith("#1 "))
    assert "job 5001" in row and "running" in row and "node[1-2] [leaf1]" in row, row
    assert "up 2m0" in row and "3m0" in row and "left" in row and "trials #0 #1 #2" in row, row
    assert any(line.startswith("#2 ") and "pending" in line and "waits" in line
               for line in lines), text
    assert not any(line.startswith("#3 ") for line in lines)  # ended: counted, not listed
    trial0 = next(line for line in lines if line.lstrip().startswith("0 "))
    assert "node1 leaf1" in trial0, trial0
    for width, height in [(80, 24), (60, 15), (40, 12), (30, 6)]:
        shown = _screen(snap, width, height)
        assert len(shown) <= height and all(len(x) <= width for x in shown), shown
    assert "pilots (" in "\n".join(_screen(snap, 80, 24))
    source.close()


def test_sites_panel_shows_what_status_counts_of_each_site(tmp_path: Path):
    """With executor.sites the panel has a line a site: running, pending, median queue wait,
    speed and share, the numbers hpsearch.views.sites gives status (store written through
    the Store API: tests/sites_store.py). A small terminal drops it before the trials."""
    from hpsearch.store.reader import Reader
    from hpsearch.views.sites import experiment_sites, read_site_lines
    from tests.sites_store import build_sites_store
    exp_dir = build_sites_store(tmp_path / "runs" / "sites")
    source = SnapshotSource(exp_dir)
    snap = source.snapshot(rows=24)
    with Reader(exp_dir / "store.sqlite") as reader:
        seen = read_site_lines(reader, experiment_sites(reader.experiment(), exp_dir.parent),
                               reader.trials(), reader.all_attempts())
    assert [(s.site, s.load, s.share, s.speed) for s in snap.sites] == \
        [(s.site, s.load, s.share, s.speed) for s in seen]
    lines = _screen(snap, 80, 24)
    panel = lines[lines.index("sites") + 1:lines.index("sites") + 4]
    wait = {s.site.name: format_duration(s.load.median_wait()) for s in seen}
    assert [line.split() for line in panel] == [
        ["left", "running", "1", "pending", "0", "wait", wait["left"], "speed", "0.5s/step",
         "share", "50%"],
        ["right", "running", "0", "pending", "1", "wait", wait["right"], "speed", "2s/step",
         "share", "50%"],
        ["idle", "running", "0", "pending", "0", "wait", "-", "speed", "-", "share", "0%"]]
    small = _screen(snap, 80, 10)
    assert len(small) <= 10 and "sites" not in small and any(" running " in line
                                                             for line in small), small
    source.close()


def test_ids_of_six_digits_are_shown_whole(tmp_path: Path):
    """A search of 100,000 trials has 5- and 6-digit ids: the id column widens to the
    longest shown (4 columns cut 12345 to '123…'), and the screen still fits 80 columns."""
    import dataclasses
    source = SnapshotSource(build_store(tmp_path / "exp", 20, running=2))
    snap = source.snapshot(rows=24)
    source.close()
    lines = [dataclasses.replace(line, id=123456 + i) for i, line in enumerate(snap.trials)]
    screen = _screen(dataclasses.replace(snap, trials=lines), 80, 24)
    assert any(" 123456 " in f" {row} " for row in screen), "\n".join(screen)
    assert all(len(row) <= 80 for row in screen)

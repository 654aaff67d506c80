"""What a reader sees in the report's figures, checked on matplotlib's objects (not pixels)
for three real local searches: two objectives; log-scale, categorical and int parameters
with learning curves; failures and pruned trials. And a note in the HTML for each figure left
out, saying why."""

from __future__ import annotations

import itertools
import textwrap
from pathlib import Path

import pytest

from hpsearch.report import data as report_data
from hpsearch.report import figures, html
from hpsearch.report.figures.slices import BAND
from hpsearch.store import rows
from tests.conftest import Cli

pytestmark = pytest.mark.slow

MULTI = ("""
import math, sys
lr, width, act = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
error = (math.log10(lr) + 2.5) ** 2 * 0.05 + 8.0 / width + {"relu": 0, "tanh": 0.05}[act]
print(f"@hpsearch result error={error:.5f} latency_ms={0.02 * width + 1:.4f}")
""", """
name: multi
command: python3 trial.py {lr} {width} {activation}
search:
  strategy: nsga2
  trials: 12
  parallel: 4
  seed: 3
  space:
    lr: {low: 1.0e-5, high: 1.0e-1, log: true}
    width: {low: 8, high: 512}
    activation: {choices: [relu, tanh]}
objective:
  - {metric: error, direction: minimize}
  - {metric: latency_ms, direction: minimize}
""")
LOGCAT = ("""
import math, sys
lr, opt, batch, layers = float(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
final = {"sgd": 0.3, "adam": 0.05, "rmsprop": 0.1}[opt] + 0.4 * (math.log10(lr) + 3) ** 2
final += 0.001 * batch + 0.03 * abs(layers - 4)
for step in range(5):
    print(f"@hpsearch step={step} val_loss={final + math.exp(-step):.5f}", flush=True)
print(f"@hpsearch result val_loss={final:.5f}")
""", """
name: logcat
command: python3 trial.py {lr} {optimizer} {batch_size} {layers}
search:
  strategy: random
  trials: 12
  parallel: 4
  seed: 5
  space:
    lr: {low: 1.0e-5, high: 1.0e-1, log: true}
    optimizer: {choices: [sgd, adam, rmsprop]}
    batch_size: {choices: [16, 32, 64, 128]}
    layers: {low: 1, high: 8}
objective: {metric: val_loss, direction: minimize}
""")
FAILS = ("""
import math, sys, time
lr, dropout = float(sys.argv[1]), float(sys.argv[2])
if lr > 0.01:  # step 0 is never pruned (n_warmup_steps: 1)
    print("@hpsearch step=0 loss=1000000.0", flush=True)
    sys.exit("diverged: loss is nan")
final = 0.2 + 0.3 * (math.log10(lr) + 3) ** 2 + 0.5 * (dropout - 0.3) ** 2
for step in range(6):
    print(f"@hpsearch step={step} loss={final + math.exp(-step / 2):.5f}", flush=True)
    time.sleep(0.05)
print(f"@hpsearch result loss={final:.5f}")
""", """
name: fails
command: python3 trial.py {lr} {dropout}
search:
  strategy: random
  trials: 14
  parallel: 2
  seed: 7
  pruner: {type: median, n_startup_trials: 2, n_warmup_steps: 1}
  space:
    lr: {low: 1.0e-5, high: 1.0, log: true}
    dropout: {low: 0.0, high: 0.6}
objective: {metric: loss, direction: minimize}
""")
TINY = ("""
import sys
x = float(sys.argv[1])
sys.exit(1) if x > 0.3 else print(f"@hpsearch result loss={x}")
""", """
name: tiny
command: python3 trial.py {x}
search:
  strategy: grid
  space: {x: {choices: [0.1, 0.5, 0.9]}}
objective: {metric: loss, direction: minimize}
""")


@pytest.fixture(scope="module")
def searches(tmp_path_factory) -> dict[str, report_data.ReportData]:
    """Each search run for real on the local executor, read back as the report reads it."""
    out = {}
    for script, spec in (MULTI, LOGCAT, FAILS, TINY):
        name = spec.split("name: ")[1].split()[0]
        cli = Cli(tmp_path_factory.mktemp(name))
        (cli.cwd / "trial.py").write_text(textwrap.dedent(script))
        cli("submit", cli.write_spec(spec + "executor: {type: local}\n"), "-q", "--no-tui")
        out[name] = report_data.collect(cli.runs / name, use_sacct=False)
    return out


def _drawn(result) -> figures.Drawn:
    assert isinstance(result, figures.Drawn), result
    figures.png(result.figure)  # drawn as the report draws it: tick labels get their text
    return result


def _labels(axis) -> list[str]:
    """The visible tick labels of an x or y axis, within its limits."""
    lo, hi = sorted(axis.get_view_interval())
    ticks = [t for t in axis.get_major_ticks() + axis.get_minor_ticks()
             if t.label1.get_visible() or t.label2.get_visible()]
    return [(t.label1 if t.label1.get_visible() else t.label2).get_text() for t in ticks
            if lo <= t.get_loc() <= hi and (t.label1.get_text() or t.label2.get_text())]


def _column_axes(fig) -> dict[str, object]:
    """Parallel coordinates: {column name: its axis}."""
    return {ax.get_label(): ax for ax in fig.axes[1:]}


def _panels(fig) -> dict[str, object]:
    """Objective by parameter: {parameter's x label: first panel}."""
    found = {}
    for ax in fig.axes:
        if ax.get_visible() and ax.get_xlabel() and ax.get_xlabel() != "trial":
            found.setdefault(ax.get_xlabel(), ax)
    return found


def test_log_parameters_are_on_log_axes(searches):
    data = searches["logcat"]
    columns = _column_axes(_drawn(figures.parallel_coordinates(data)).figure)
    assert columns["lr"].get_yscale() == "log"
    assert columns["layers"].get_yscale() == "linear"
    panels = _panels(_drawn(figures.slices(data)).figure)
    assert panels["lr (log)"].get_xscale() == "log"
    assert panels["layers"].get_xscale() == "linear"


def test_categorical_axes_are_labelled_with_their_values_in_spec_order(searches):
    data = searches["logcat"]
    columns = _column_axes(_drawn(figures.parallel_coordinates(data)).figure)
    assert _labels(columns["optimizer"].yaxis) == ["sgd", "adam", "rmsprop"]
    assert _labels(columns["batch_size"].yaxis) == ["16", "32", "64", "128"]
    panels = _panels(_drawn(figures.slices(data)).figure)
    assert _labels(panels["optimizer"].xaxis) == ["sgd", "adam", "rmsprop"]


def test_every_parallel_coordinates_axis_has_tick_values(searches):
    for name in ("multi", "logcat", "fails"):
        fig = _drawn(figures.parallel_coordinates(searches[name])).figure
        columns = _column_axes(fig)
        assert len(columns) >= 3, name  # parameters that vary, then the objectives
        for column, ax in columns.items():
            assert len(_labels(ax.yaxis)) >= 2, (name, column)
        assert len(_labels(fig.axes[0].xaxis)) == len(columns)  # each column named


def test_trial_numbers_and_steps_have_integer_ticks(searches):
    for fig, axis in ((figures.history(searches["fails"]).figure, lambda f: f.axes[-1].xaxis),
                      (figures.learning_curves(searches["fails"]).figure,
                       lambda f: f.axes[0].xaxis)):
        figures.png(fig)
        labels = _labels(axis(fig))
        assert labels and all(label.lstrip("−-").isdigit() for label in labels), labels


def test_trials_without_a_value_are_not_drawn_among_the_values(searches):
    data = searches["fails"]
    done = sorted(t.id for t in data.trials if t.state == rows.COMPLETED)
    failed = sorted(t.id for t in data.trials if t.state == rows.FAILED)
    assert done and failed  # the search has both (lr > 0.01 fails)
    fig = _drawn(figures.history(data)).figure
    main, strip = fig.axes[0], fig.axes[-1]
    assert sorted(int(x) for x, _ in main.collections[0].get_offsets()) == done
    assert all(len(c.get_offsets()) == 0 or int(c.get_offsets()[0][0]) in done
               for c in main.collections)
    marked = {c.get_label().split()[0]: sorted(int(x) for x, _ in c.get_offsets())
              for c in strip.collections}
    assert marked["failed"] == failed
    # objective by parameter: failed trials sit in the band below every real value
    panel = _panels(_drawn(figures.slices(data)).figure)["lr (log)"]
    values, *bands = panel.collections
    assert len(values.get_offsets()) == len(done)
    for band in bands:
        assert {y for _, y in band.get_offsets()} == {BAND * 0.4}
    failed_band = next(b for b in bands if b.get_label().startswith("failed"))
    assert len(failed_band.get_offsets()) == len(failed)
    assert min(x for x, _ in failed_band.get_offsets()) > 0.01  # the failing region shows
    assert _drawn(figures.parallel_coordinates(data)).caption.count("failed") == 1


def test_a_diverged_failed_curve_does_not_set_the_value_range(searches):
    data = searches["fails"]
    failed = [t.id for t in data.trials if t.state == rows.FAILED]
    assert failed and all(data.curves[t] == [(0, 1e6)] for t in failed)
    drawn = _drawn(figures.learning_curves(data))
    ax = drawn.figure.axes[0]
    assert ax.get_ylim()[1] < 100  # the other curves stay readable
    assert "cut off" in drawn.caption
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[:2] == ["completed", "pruned"] and "failed" in legend


def _overlap(texts) -> list[tuple[str, str]]:
    boxes = [(t.get_text(), t.get_window_extent()) for t in texts if t.get_text()]
    return [(a, b) for (a, x), (b, y) in itertools.combinations(boxes, 2) if x.overlaps(y)]


def test_titles_and_labels_do_not_overlap(searches):
    for name, data in searches.items():
        for key, _, draw in figures.FIGURES:
            result = draw(data)
            if not isinstance(result, figures.Drawn):
                continue
            fig = _drawn(result).figure
            assert fig.get_layout_engine().__class__.__name__ == "ConstrainedLayoutEngine"
            for ax in fig.axes:
                if ax.get_visible():
                    for axis in (ax.xaxis, ax.yaxis):
                        ticks = [t.label1 for t in axis.get_major_ticks()
                                 if t.label1.get_visible()]
                        assert not _overlap(ticks), (name, key, _overlap(ticks))
            titles = [t for t in [fig._suptitle] if t] + [ax.title for ax in fig.axes]
            labels = [ax.xaxis.label for ax in fig.axes] + [ax.yaxis.label for ax in fig.axes]
            assert not _overlap(titles + labels), (name, key, _overlap(titles + labels))


def test_pareto_front_names_both_objectives(searches):
    fig = _drawn(figures.pareto(searches["multi"])).figure
    ax = fig.axes[0]
    assert ax.get_xlabel() == "error (minimize)"
    assert ax.get_ylabel() == "latency_ms (minimize)"
    assert any(t.get_text().startswith("Pareto front") for t in ax.get_legend().get_texts())
    assert figures.pareto(searches["logcat"]) is None  # one objective: no front, no note
    history = _drawn(figures.history(searches["multi"])).figure
    assert [ax.get_ylabel() for ax in history.axes] == ["error (minimize)",
                                                        "latency_ms (minimize)"]
    assert any(t.get_text().startswith("on the Pareto front")
               for t in history.axes[0].get_legend().get_texts())


def test_a_left_out_figure_gets_a_note_saying_why(searches, tmp_path: Path):
    page = html.write(searches["tiny"], tmp_path / "rep").read_text()
    assert ("<h2 id='parallel_coordinates'>Parallel coordinates</h2><p class='note left-out'>"
            "Not drawn: needs at least 2 completed trials; 1 completed.</p>") in page
    assert "Not drawn: needs at least 3 completed trials; 1 completed." in page
    assert "Not drawn: no trial reported intermediate values of loss" in page
    assert "id='pareto_front'" not in page  # one objective: not applicable, no note
    assert sorted(p.name for p in (tmp_path / "rep").glob("*.png")) == ["history.png"]
    one = figures.importance_chart(searches["fails"])
    assert isinstance(one, figures.Drawn)  # two parameters vary there


def test_the_scaling_figure_says_dashed_ideal_only_where_it_draws_one():
    """Issue 38 item 14: trials timed at one size each (no configuration at two sizes) get
    no ideal line, and the title did say '(dashed: ideal)' all the same."""
    from hpsearch.accounting.efficiency import TrialEfficiency, add_scaling
    from hpsearch.report.figures.scaling import scaling
    data = report_data.ReportData("s", "grid", "local", "completed", ("loss",), ("minimize",),
                                  [], {}, [])
    data.timing = {0: TrialEfficiency(0, 1, 5, 0.1, 0.1, 0.1),
                   1: TrialEfficiency(1, 2, 5, 0.08, 0.05, 0.06)}
    alone = _drawn(scaling(data))
    assert alone.figure.axes[0].get_title() == "throughput"
    assert not [line for line in alone.figure.axes[0].get_lines()
                if line.get_linestyle() == "--"]
    assert "No configuration ran at two sizes" in alone.caption
    add_scaling(data.timing, {0: {"lr": 0.1, "ranks": 1}, 1: {"lr": 0.1, "ranks": 2}},
                ["ranks"])  # now one configuration ran at two sizes
    both = _drawn(scaling(data))
    assert both.figure.axes[0].get_title() == "throughput (dashed: ideal)"
    assert [line for line in both.figure.axes[0].get_lines() if line.get_linestyle() == "--"]

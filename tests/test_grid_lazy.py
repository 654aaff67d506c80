"""A grid capped by `trials` is never expanded whole: a 10^8-point grid capped at 100 trials
plans, runs and resumes at once, in little memory, in the same order as the full product."""

from __future__ import annotations

import itertools
import json
import signal
import sys
import time
from collections import Counter

from hpsearch.preflight import load_spec
from hpsearch.search.grid import GridSearch, grid_points, grid_size
from tests.conftest import EXAMPLES
from tests.helpers import read_store

# Run a command under a 4 GiB address-space cap (so an eager expansion fails fast instead of
# eating the shared machine) and write the peak RSS of its process tree, in KiB, to a file.
MEASURED = """
import resource, subprocess, sys
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
code = subprocess.call(sys.argv[2:])
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
open(sys.argv[1], "w").write(f"{code} {peak}")
"""

HUGE = """
    name: {name}
    command: 'echo "{{a}}{{b}}{{c}}{{d}}{{e}}{{f}}{{g}}{{h}}" >> "$RUNLOG"; echo "@hpsearch step=0 loss={{h}}"'
    env: {{RUNLOG: "{runlog}"}}
    search:
      strategy: grid
      trials: 100
      parallel: 8
      space:
{axes}
    objective: {{metric: loss}}
    """
AXES = "".join(f"        {name}: {{low: 0, high: 9}}\n" for name in "abcdefgh")


def _huge_spec(cli, name: str):
    runlog = cli.cwd / f"{name}.runs"
    return cli.write_spec(HUGE.format(name=name, runlog=runlog, axes=AXES), f"{name}.yaml"), runlog


def _measured(cli, *args, env=None, timeout=60):
    """(exit status as subprocess gives it, stdout, stderr, wall seconds, peak RSS in MB) of
    `hpsearch *args`."""
    import subprocess
    rss_file = cli.cwd / "rss"
    began = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", MEASURED, str(rss_file), sys.executable, "-m",
                           "hpsearch", *map(str, args)], cwd=cli.cwd, env={**cli.env, **(env or {})},
                          capture_output=True, text=True, timeout=timeout)
    seconds = time.monotonic() - began
    code, peak = map(int, rss_file.read_text().split())
    return code, proc.stdout, proc.stderr, seconds, peak / 1024


def _expected(index: int) -> str:
    """Point `index` of the 8 x 10 grid, as the trial's digits a..h (h fastest)."""
    return f"{index:08d}"


def test_grid_order_is_the_full_product_order_of_an_example():
    spec = load_spec(EXAMPLES / "quadratic" / "grid.yaml")
    names = [p.name for p in spec.search.space]
    eager = [dict(zip(names, combo))
             for combo in itertools.product(*(p.grid_values() for p in spec.search.space))]
    points = grid_points(spec.search)
    assert [points[k] for k in range(len(eager))] == eager == list(points)
    assert eager[:3] == [{"x": -1.0, "y": -3, "optimizer": "sgd"},
                         {"x": -1.0, "y": -3, "optimizer": "adam"},
                         {"x": -1.0, "y": -2, "optimizer": "sgd"}]
    search = GridSearch(spec.search)
    assert [search.ask().params for _ in range(18)] == eager and search.ask() is None


def test_plan_and_submit_of_a_capped_huge_grid_start_at_once(cli):
    spec, runlog = _huge_spec(cli, "huge")
    assert grid_size(load_spec(spec).search) == 10 ** 8
    code, out, err, seconds, rss = _measured(cli, "plan", spec, "--limit", "0")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == ("grid: 10 x 10 x 10 x 10 x 10 x 10 x 10 x 10 = 100000000 points; "
                        "100 trials, 8 in parallel")
    commands = [line.split("$ ", 1)[1] for line in lines if "$ " in line]
    assert len(commands) == 100 and commands[-1].startswith('echo "00000099"'), commands[-1]
    assert seconds < 60 and rss < 300, (seconds, rss)

    code, _, err, seconds, rss = _measured(cli, "submit", spec)
    assert code == 0, err
    assert seconds < 60 and rss < 300, (seconds, rss)
    exp, rows = read_store(cli.runs, "huge")
    assert exp.status == "completed" and len(rows) == 100
    assert all(t.state == "completed" for t in rows)
    assert ["".join(str(t.params[n]) for n in "abcdefgh") for t in rows] == \
        [_expected(k) for k in range(100)]
    assert sorted(runlog.read_text().split()) == [_expected(k) for k in range(100)]


def test_resume_of_a_killed_huge_grid_continues_at_the_next_points(cli):
    spec, runlog = _huge_spec(cli, "huge-resume")
    code, _, err, _, _ = _measured(cli, "submit", spec, env={"HPSEARCH_FAULT": "after_finish:40"})
    assert code == -signal.SIGKILL, err
    _, before = read_store(cli.runs, "huge-resume")
    assert 40 <= len(before) < 100
    code, _, err, seconds, rss = _measured(cli, "resume", "huge-resume")
    assert code == 0, err
    assert seconds < 60 and rss < 300, (seconds, rss)
    exp, rows = read_store(cli.runs, "huge-resume")
    assert exp.status == "completed" and [t.id for t in rows] == list(range(100))
    params = ["".join(str(t.params[n]) for n in "abcdefgh") for t in rows]
    assert params == [_expected(k) for k in range(100)]  # trial k is grid point k
    runs = Counter(runlog.read_text().split())
    assert set(runs) == set(params) and max(runs.values()) == 1, runs.most_common(3)
    assert json.loads(json.dumps(rows[99].params)) == {n: 0 for n in "abcdef"} | {"g": 9, "h": 9}

"""What the peers benchmarks' tests check their output against (tests/test_bench_peers.py,
tests/slurm/test_bench_peers_cluster.py, tests/slurm/test_bench_peers_kill.py).

A kept step log (`--step-log PATH`) is what every tool's trials really ran: a line
`TIME ROW PID CONFIG step STEP VALUE` per step, `TIME ROW PID CONFIG left STEP WHY` when a
process left a configuration of its own accord, `... told STEP WHY` when the tool's verdict
reached it mid-step, and, in the kill runs, `... judged STEP pruned` when the verdict came
after the process had died with its node (benchmarks/_curves.py). `Ran` recounts it
here, apart from the benchmark's own reading, so that a table that does not say what ran
fails; `check_goal` recomputes a goal line's verdict from the table's numbers, so that an
`ok` or a `MISS` that the numbers do not give fails.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field


@dataclass
class Ran:
    """One row's lines of the step log."""
    steps: Counter = field(default_factory=Counter)   # (config, step) -> times run
    pids: set = field(default_factory=set)
    values: dict = field(default_factory=dict)        # (config, step) -> its value
    last: dict = field(default_factory=dict)          # config -> its last line's fields
    verdicts: set = field(default_factory=set)        # (pid, config): the tool said stop

    def ended(self, config: int, steps: int) -> bool:
        """It ran its last step, or the process that wrote its last line was told to stop."""
        line = self.last.get(config)
        return line is not None and ((config, steps - 1) in self.steps
                                     or (line[2], config) in self.verdicts)

    def lost(self, configs: int, steps: int) -> int:
        return sum(not self.ended(c, steps) for c in range(configs))

    def best(self, steps: int) -> str:
        """The best value at the last step, as the tables print it."""
        return f"{min(v for (_, s), v in self.values.items() if s == steps - 1):.4f}"

    def again(self) -> str:
        """`steps run again/configurations they belong to`, as the tables print it."""
        twice = {key: n - 1 for key, n in self.steps.items() if n > 1}
        return f"{sum(twice.values())}/{len({config for config, _ in twice})}"


def read_steps(path: str) -> dict[str, Ran]:
    rows: dict[str, Ran] = defaultdict(Ran)
    with open(path) as f:
        for line in f:
            fields = line.split()
            assert len(fields) == 7 and fields[4] in ("step", "left", "told", "judged"), line
            ran = rows[fields[1]]
            ran.last[int(fields[3])] = fields
            if fields[4] != "step" and fields[6] in ("pruned", "paused"):
                ran.verdicts.add((fields[2], int(fields[3])))
            if fields[4] == "step":
                ran.steps[int(fields[3]), int(fields[5])] += 1
                ran.pids.add(fields[2])
                ran.values[int(fields[3]), int(fields[5])] = float(fields[6])
    return dict(rows)


def assert_nothing_lost_or_repeated(ran: Ran, configs: int, steps: int) -> None:
    """Every configuration ran steps 0..k, each once, and then ended (its last step, or the
    tool said stop)."""
    for config in range(configs):
        done = sorted(s for c, s in ran.steps if c == config)
        assert done == list(range(len(done))) and done, (config, done)
        assert all(ran.steps[config, s] == 1 for s in done), (config, ran.steps)
        assert ran.ended(config, steps), (config, ran.last.get(config))


def table_rows(stdout: str, columns: re.Pattern, tools: tuple[str, ...]) -> dict[str, dict]:
    """The table's rows by mode text: `columns` matches the named numbers after the mode."""
    rows = {}
    for line in stdout.splitlines():
        if line.startswith(tools) and (match := columns.search(line)):
            tool, _, rest = line.partition(" ")
            mode = rest[:match.start() - len(tool) - 1].strip()
            rows[mode] = {"tool": tool, **match.groupdict()}
    return rows


def seconds(text: str) -> float:
    return math.inf if text == "never" else float(text)


def check_goal(line: str, ours: float, theirs: float, strict: bool) -> None:
    """The line's verdict is what its numbers (as printed) give: ok when ours is below
    theirs (or equal, unless `strict`), MISS when above; a tie at the printed precision may
    go either way (the benchmark compares the unrounded values)."""
    verdict = line.split(":", 1)[0]
    assert verdict in ("ok", "MISS"), line
    if ours != theirs:
        assert verdict == ("ok" if ours < theirs else "MISS"), line
    elif math.isinf(ours):
        assert verdict == ("MISS" if strict else "ok"), line

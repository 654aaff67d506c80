"""A small real local search for the Optuna interop tests (API, export, mirror, dashboard):
a grid of 8 points (x in 1, 2, 3, 9; lr in 0.01, 0.02), each trial reporting loss (the
objective) and acc at steps 0..2 within a fraction of a second. x=9 is pruned (the threshold
pruner: loss above 50), x=3 fails (exit 1 after its reports), the others complete."""

from __future__ import annotations

SPEC = """\
name: {name}
command: "sh -c 'for s in 0 1 2; do echo \\"@hpsearch step=$s loss=$(( {{x}} * {{x}} + 2 - $s )) acc=0.$(( 9 - {{x}} % 9 ))\\"; {sleep}done; [ {{x}} != 3 ]' {{lr}} {{steps}}"
search:
  strategy: grid
  parallel: {parallel}
  space:
    x: {{type: categorical, choices: [1, 2, 3, 9]}}
    lr: {{type: float, low: 0.01, high: 0.02, step: 0.01}}
    steps: 3
  pruner: {{type: threshold, upper: 50}}
objective: {{metric: loss, direction: minimize}}
executor: {{type: local}}
"""


def write_spec(cli, name: str = "interop", sleep: float = 0.0, parallel: int = 4):
    """The spec file; `sleep`: seconds each trial waits after each report."""
    text = SPEC.format(name=name, parallel=parallel,
                       sleep=f"sleep {sleep}; " if sleep else "")
    return cli.write_spec(text, f"{name}.yaml")


def run_search(cli, name: str = "interop"):
    """Submit the search and wait for it: exit 1, as some trials failed."""
    return cli("submit", write_spec(cli, name), check=1)

"""A small real ASHA promotion search on the local executor (`hpsearch finish`, trial times):
a grid over x; loss(step) = x + 1/(step+1); each segment resumes from its checkpoint (the
next step) and runs to its budget (rungs at 1, 3 and 9 steps). After it ends, the best trial
(x=0) and the bracket's end-game trial are completed, the others wait `paused` at rung 0 or 1.
"""

from __future__ import annotations

import sys
import textwrap

from hpsearch.store.reader import Reader
from hpsearch.store.runs import STORE_FILE

SEGMENTED = textwrap.dedent("""
    import json, time
    from hpsearch import trial
    p = trial.params()
    latest = trial.latest_checkpoint()
    start = json.loads(latest.read_text())["next"] if latest else 0
    end = min(int(p["steps"]), trial.budget() or int(p["steps"]))
    print(f"segment from step {start} to {end}")
    for step in range(start, end):
        loss = p["x"] + 1.0 / (step + 1)
        trial.report(step, loss=loss)
        with trial.checkpoint(step, ".json") as path:
            path.write_text(json.dumps({"next": step + 1}))
        time.sleep(float(p["pause"]))
    trial.result(loss=p["x"] + 1.0 / end)
""")

SPEC = """
name: {name}
command: {python} {script} {{x}} {{steps}} {{pause}}
search:
  strategy: grid
  parallel: {parallel}
  space:
    x: {{choices: {xs}}}
    steps: {{value: 9}}
    pause: {{value: {pause}}}
  pruner: {{type: asha, mode: promotion, min_resource: 1, reduction_factor: 3,
           max_resource: 9}}
objective: {{metric: loss, direction: minimize}}
executor: {{type: local}}
"""
XS = [5, 3, 4, 1, 8, 2, 7, 0, 6]


def promotion_spec(cli, name: str, xs=XS, parallel: int = 2, pause: float = 0.02):
    script = cli.cwd / "segmented.py"
    script.write_text(SEGMENTED)
    return cli.write_spec(SPEC.format(name=name, python=sys.executable, script=script,
                                      xs=xs, parallel=parallel, pause=pause), f"{name}.yaml")


def attempts(runs, name: str) -> dict[int, list[dict]]:
    """trial id -> its attempt rows (attempt, rung, budget, state, started, finished, ...)."""
    reader = Reader(runs / name / STORE_FILE)
    try:
        return {t.id: reader.attempts(t.id) for t in reader.trials()}
    finally:
        reader.close()

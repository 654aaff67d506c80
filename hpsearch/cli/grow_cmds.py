"""`hpsearch enqueue`: points for a search to run first (Optuna's enqueue_trial); with
`resume --trials N` (run_cmds), how a search grows. Both leave a request for the driver
(hpsearch.driver.requests): the running one takes it within seconds, else the next `resume`."""

from __future__ import annotations

import math

from hpsearch.cli.common import add_command, add_runs_dir, format_params, runs_dir_of, yaml_text
from hpsearch.driver import requests
from hpsearch.errors import HpsearchError
from hpsearch.store.lockfile import DriverLock


def register(sub) -> None:
    p = add_command(sub, "enqueue", "Run known-good points first: each KEY=VALUE point is "
                    "asked before any sampled trial (parameters left out are sampled). The "
                    "running driver takes it within seconds; else the next `resume` does.",
                    "  hpsearch enqueue quadratic x=1 y=-2 optimizer=adam\n"
                    "  hpsearch enqueue quadratic x=0.5     # y and optimizer sampled\n"
                    "  hpsearch resume quadratic            # if no driver runs", enqueue)
    p.add_argument("name")
    p.add_argument("point", nargs="+", metavar="KEY=VALUE")
    add_runs_dir(p)


def enqueue(args) -> int:
    from hpsearch.driver import session
    from hpsearch.spec.known_points import point_problem

    spec = session.stored_spec(runs_dir_of(args), args.name)
    from hpsearch.search.registry import strategy
    if strategy(spec.search.strategy).facts.enumerates:
        raise HpsearchError(f"experiment {spec.name} is a grid search: it runs every point of its "
                       "space; enqueue is for the samplers")
    space = {p.name: p for p in spec.search.space}
    point = {}
    for item in args.point:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise HpsearchError(f"{item!r}: expected KEY=VALUE, e.g. lr=0.001")
        point[key] = _typed(space.get(key), text)
    key, problem = point_problem(spec.search.space, point)
    if problem:
        raise HpsearchError(f"enqueue {spec.name}: {key + ': ' if key else ''}{problem}")
    requests.write(spec.experiment_dir, "enqueue", {"params": point})
    driver = DriverLock(spec.experiment_dir).holder()
    print(f"enqueued for {spec.name}: {format_params(point)}; " +
          (f"the running driver (pid {driver}) asks it next" if driver else
           f"no driver runs: `hpsearch resume {spec.name}` runs it first"))
    return 0


def _typed(param, text: str):
    """The value `text` means for `param`: one of its choices (as the spec writes it), an
    int or a float; text for an unknown parameter (point_problem names it)."""
    if param is None:
        return text
    if param.kind == "categorical":
        for choice in param.choices:
            if text in (str(choice), yaml_text(choice)):
                return choice
        return text  # not a choice: point_problem says so
    try:
        number = float(text)
    except ValueError:
        return text
    if param.kind == "int" and math.isfinite(number) and number.is_integer():
        return int(number)
    return number

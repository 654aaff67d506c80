"""`hpsearch finish`: train the best paused trials of a promotion search to max_resource.

The command ranks the paused trials (read-only, hpsearch.pruning.finishing) and leaves the
driver a `finish` request naming them (hpsearch.driver.requests): a running driver takes it
within seconds; with none running, this command runs one, as `resume` does. The driver
sends each trial that is still paused on as a promotion, written ahead, from its checkpoint
to max_resource, on the experiment's executor. Trials an earlier `finish` sent on count
among the best and are not sent again.
"""

from __future__ import annotations

import argparse

from hpsearch.cli.common import add_command, runs_dir_of
from hpsearch.cli.run_cmds import _add_run_flags, _run, _tolerated
from hpsearch.errors import BadInput
from hpsearch.store.lockfile import DriverLock


def register(sub) -> None:
    p = add_command(sub, "finish", "Promotion searches: train the best paused trials (those "
                    "waiting at a rung with a checkpoint) to max_resource. Each resumes from "
                    "its checkpoint as a new segment, on the experiment's executor; a "
                    "running driver takes the request within seconds, else this command "
                    "runs the driver (as `resume`, with its flags). Trials sent on by an "
                    "earlier finish count among the best and never run twice.",
                    "  hpsearch finish digits-promotion --top 2     # the 2 best paused trials\n"
                    "  hpsearch finish digits-promotion --trial 7 12\n"
                    "  hpsearch finish digits-promotion --top 3 --detach\n"
                    "  hpsearch best digits-promotion -k 3          # then: their results",
                    finish)
    p.add_argument("name", help="the experiment (or its spec file)")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--top", type=_positive, metavar="K",
                       help="the K best trials by the objective at the rung they paused at "
                            "(its direction respected; ties: the higher rung first)")
    which.add_argument("--trial", type=int, nargs="+", metavar="N",
                       help="these paused trials")
    _add_run_flags(p)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number of trials, 1 or more")
    return value


def finish(args) -> int:
    from hpsearch.driver import requests, session
    from hpsearch.pruning import finishing
    from hpsearch.store import rows
    from hpsearch.store.reader import Reader
    from hpsearch.store.runs import STORE_FILE

    spec = session.stored_spec(runs_dir_of(args), args.name, args.executor)
    pruner = spec.search.pruner
    if not pruner.promotion:
        raise BadInput(f"experiment {spec.name} pauses no trials: finish is for promotion "
                       "searches (search.pruner.mode: promotion)")
    with Reader(spec.experiment_dir / STORE_FILE) as reader:
        trials = reader.trials()
    objective = spec.objectives[0]
    try:
        picked = (finishing.top(trials, objective.direction, args.top) if args.top else
                  finishing.chosen(trials, objective.direction, args.trial))
    except ValueError as exc:
        raise BadInput(f"finish {spec.name}: {exc}") from None
    if not picked:
        raise BadInput(f"experiment {spec.name} has no paused trial to finish")
    new = [c for c in picked if not c.sent]
    for c in picked:
        print(f"trial {c.trial.id}: {objective.metric}={c.value:.6g} at rung {c.rung}: " +
              (f"sent on by an earlier finish (now {c.trial.state})" if c.sent else
               f"to finish, from its checkpoint to max_resource {pruner.max_resource}"))
    unfinished = [c for c in picked if c.sent and c.trial.state not in rows.FINISHED]
    if new:
        requests.write(spec.experiment_dir, "finish", {"trials": [c.trial.id for c in new]})
    driver = DriverLock(spec.experiment_dir).holder()
    if driver:
        print(f"experiment {spec.name}: its running driver (pid {driver}) takes the request "
              f"within seconds; see `hpsearch status {spec.name}`")
        return 0
    if not new and not unfinished:
        print(f"experiment {spec.name}: nothing to run; `hpsearch best {spec.name}`")
        return 0
    print(f"experiment {spec.name}: no driver runs; starting one, as `hpsearch resume` does",
          flush=True)
    return _tolerated(spec, _run(spec, create=False, args=args), args.allow_failures)

"""`hpsearch replay`: train a pbt member's schedule again, from scratch, as a new experiment
(Ray Tune's PopulationBasedTrainingReplay).

The schedule is the one the member's model lived (hpsearch.search.pbt_schedule: through the
members it took checkpoints from). The command writes a spec beside the experiment's own
(its name NAME-replay unless --name says otherwise), the same as the stored one but for
`name` and `search`: the same strategy (pbt or pb2) with `replay:` the schedule, one
member, one at a time, the same perturbation_interval, max_resource, seed and space. Then
it runs it, as `submit` runs a spec (the same flags). The spec file stays: `hpsearch
submit` it again, or resume.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from hpsearch.cli.common import add_command, runs_dir_of
from hpsearch.cli.run_cmds import _add_run_flags, submit
from hpsearch.errors import BadInput


def register(sub) -> None:
    p = add_command(sub, "replay", "PBT: train the best member's schedule again from scratch as "
                    "a new experiment (or --trial N's): the parameters its model lived with, "
                    "step by step, through the members it took checkpoints from. Writes the "
                    "spec beside the experiment's own, then runs it as `submit` does.",
                    "  hpsearch replay pbt-toy                  # the best member, as "
                    "pbt-toy-replay\n"
                    "  hpsearch replay pbt-toy --trial 3 --name toy-3\n"
                    "  hpsearch replay pbt-toy --detach\n"
                    "  hpsearch best pbt-toy-replay             # then: its result",
                    replay)
    p.add_argument("name", help="a pbt experiment (or its spec file)")
    p.add_argument("--trial", type=int, default=None, metavar="N",
                   help="replay this member (default: the best completed one)")
    p.add_argument("--name", dest="new_name", default=None, metavar="NEW",
                   help="the new experiment's name (default: NAME-replay)")
    _add_run_flags(p)


def replay(args) -> int:
    from hpsearch.driver import session
    from hpsearch.search.pbt_schedule import as_json, lived_all
    from hpsearch.store.reader import Reader
    from hpsearch.store.results import best
    from hpsearch.store.runs import STORE_FILE

    spec = session.stored_spec(runs_dir_of(args), args.name)
    options = dict(spec.search.options)  # a strategy that can replay (pbt, pb2), not one
    if "replay" not in options or options["replay"]:
        raise BadInput(f"experiment {spec.name} is not a pbt search of a population: replay "
                       "trains a pbt member's schedule again")
    with Reader(spec.experiment_dir / STORE_FILE) as reader:
        exp, trials = reader.experiment(), reader.trials()
    schedules = lived_all(trials)
    if args.trial is None:
        top = best(trials, list(exp.directions), 1)
        if not top:
            raise BadInput(f"experiment {spec.name} has no completed member yet; name one with "
                           "--trial")
        args.trial = top[0].id
    if args.trial not in schedules:
        raise BadInput(f"experiment {spec.name} has no member {args.trial} with a schedule "
                       f"(members: {', '.join(map(str, sorted(schedules))) or 'none yet'})")
    raw = yaml.safe_load(exp.spec_yaml)
    new = args.new_name or f"{spec.name}-replay"
    raw["name"] = new
    search = raw["search"]
    raw["search"] = {
        "strategy": spec.search.strategy, "parallel": 1, "seed": search.get("seed"),
        "perturbation_interval": spec.search.option("perturbation_interval"),
        "max_resource": spec.search.option("max_resource"), "space": search["space"],
        "replay": [{"from_step": p["from_step"], "params": p["params"]}
                   for p in as_json(schedules[args.trial])]}
    path = Path(exp.base_dir) / f"{new}.yaml"
    text = (f"# `hpsearch replay {spec.name} --trial {args.trial}`: member {args.trial}'s "
            f"schedule, trained again from scratch\n" + yaml.safe_dump(raw, sort_keys=False))
    try:  # never over another file: a new private one, no link followed
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        raise BadInput(f"{path} exists: remove it, or give the replay another --name") from None
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    print(f"wrote {path}: member {args.trial}'s schedule, {len(raw['search']['replay'])} "
          f"piece(s); running it")
    args.spec, args.resume, args.best_out = path, False, None
    return submit(args)

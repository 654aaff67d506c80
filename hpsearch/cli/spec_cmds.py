"""`hpsearch validate` and `hpsearch plan`: read a spec, run nothing, write nothing."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from hpsearch.cli.common import add_command, format_params, yaml_text
from hpsearch.executors.registry import facts
from hpsearch.preflight import check_here, load_spec
from hpsearch.search.registry import strategy
from hpsearch.template import placeholders


def register(sub) -> None:
    p = add_command(sub, "validate", "Check a spec; print what it describes, or each "
                    "problem with its file, line and key, in file order.",
                    "  hpsearch validate examples/quadratic/spec.yaml\n"
                    "  # bad input: prints e.g.\n"
                    "  # spec.yaml:7: search.space.lr.low: a log scale needs low > 0; got low=0\n"
                    "  # and exits with code 2", validate)
    p.add_argument("spec", type=Path)
    p = add_command(sub, "plan", "Dry run: the number of trials (or grid size) and the exact "
                    "command line each trial would run (and, with per-trial resources, its "
                    "size); with executor.pilots, the pilot job's "
                    "batch script, then each trial's command inside a pilot; with "
                    "executor.sites, each site and the site of each trial.",
                    "  hpsearch plan examples/quadratic/grid.yaml          # every grid point\n"
                    "  hpsearch plan examples/quadratic/spec.yaml --limit 3\n"
                    "  hpsearch plan examples/digits_ddp/slurm.yaml   # each trial's sbatch "
                    "script\n"
                    "  hpsearch plan pilots.yaml   # executor.pilots: the pilot's batch script\n"
                    "  hpsearch plan sites.yaml    # executor.sites: the split, each trial's site\n"
                    "  hpsearch plan pilots.yaml --brief   # each trial's own command only:\n"
                    "  #   trial 0: lr=0.1\n"
                    "  #     $ python train.py --lr 0.1",
                    plan)
    p.add_argument("spec", type=Path)
    p.add_argument("--limit", type=int, default=20,
                   help="show at most this many trials (default 20; 0 for all)")
    p.add_argument("--brief", action="store_true",
                   help="each trial's parameters and its command as the spec writes it (the "
                   "values filled in), without the launch shell, container and batch script "
                   "around it; the pilot job in one line")


def validate(args) -> int:
    spec = load_spec(args.spec)
    check_here(spec, args.spec)
    warn_about(args.spec, spec)
    s = spec.search
    print(f"{args.spec}: ok")
    print(f"  experiment {spec.name}: {s.strategy} search, {s.trials} trials, "
          f"{s.parallel} in parallel" + (f", seed {s.seed}" if s.seed is not None else ""))
    for p in s.space:
        print(f"  {p.name}: {_describe(p)}")
    if not {p.name for p in s.space} & {*placeholders(spec.command), "params"}:
        print("  the command names no parameter: the trial reads them with "
              "hpsearch.trial.params() (or $HPSEARCH_PARAMS, params.json)")
    print("  objective: " + ", ".join(f"{o.direction} {o.metric}" + (
        " (measured by hpsearch)" if o.measured else "") for o in spec.objectives))
    if spec.resources.per_trial:
        print("  resources per trial: " + ", ".join(
            f"{key} from {{{param}}}" for key, param in spec.resources.per_trial)
            + f" (the largest: {spec.resources.size()})")
    if s.pruner.enabled:
        print(f"  {_pruner_line(spec)}")
    for line in _search_extras(s):
        print(f"  {line}")
    return 0


def warn_about(file: Path, spec, programs: bool = True) -> None:
    """On stderr, with the spec's file, line and key: rungs that a fixed parameter the
    command passes keeps trials from reaching (preflight/rungs.py); with `programs`, each program
    the trials' launch runs on the host (launcher, container runtime) that this machine's
    PATH lacks, and executor.warm where it cannot work (plain Slurm jobs). Warnings, not
    errors: the compute nodes may have what the login node lacks, and a script may count
    its steps otherwise."""
    from hpsearch.launch.programs import missing_programs
    from hpsearch.preflight import missing_here
    from hpsearch.preflight.rungs import unreachable_rungs
    from hpsearch.spec.yamlpos import load_yaml_with_lines

    rungs = unreachable_rungs(spec)
    found = [rungs] if rungs else []
    on_slurm = facts(spec.executor).on_slurm
    if on_slurm and (missing := missing_here(spec)):
        found.append(("command", missing + " (on this machine; the trials' nodes run it "
                      "there, and where they share this filesystem they lack it too)"))
    if programs:
        found += missing_programs(spec.launcher.type, spec.launcher.args,
                                  spec.container.runtime, spec.executor.warm is not None,
                                  on_slurm)
    if programs and spec.executor.warm is not None and facts(spec.executor).job_per_attempt:
        found.append(("executor.warm", "each trial (and each of its segments) runs as a Slurm "
                      "job of its own, where no warm server outlives the job: its processes "
                      "start cold, as without executor.warm. Warm starts need executor.pilots, "
                      "whose servers live as long as the pilot (docs/early-stopping.md"
                      "#cheap-segment-restarts-executorwarm)"))
    if not found:
        return
    lines = load_yaml_with_lines(spec.text, str(file))[1]
    for key, message in found:
        path = tuple(key.split("."))
        line = lines.get(path + ("type",)) or lines.get(path) or lines.get(path[:1])
        where = f"{file}:{line}" if line else str(file)
        print(f"hpsearch: warning: {where}: {key}: {message}", file=sys.stderr)


def _search_extras(s) -> list[str]:
    """What else the search section asks for: the strategy's own settings, fail-fast, time
    budget, known points."""
    f = s.max_failures
    settings = [f"{k}=[{', '.join(map(str, v))}]" if isinstance(v, tuple) else f"{k}={v}"
                for k, v in s.options if not (isinstance(v, tuple) and not v)]
    lines = [f"{s.strategy} settings: " + ", ".join(settings)] if settings else []
    lines += [("max_failures: " + ", ".join(filter(None, [
        f"stop after {f.first} failures with none completed" if f.first else "",
        f"stop when more than {f.fraction:g} of finished trials failed"
        if f.fraction is not None else ""]))) if f.enabled else "max_failures: off"]
    if s.timeout is not None:
        lines.append(f"timeout: no new trial {s.timeout:g} s after the experiment's creation")
    if s.enqueue:
        lines.append(f"enqueue: {len(s.enqueue)} point(s) asked first: "
                     + "; ".join(yaml_text(p) for p in s.enqueue))
    if s.warm_start:
        lines.append(f"warm_start: the sampler learns from {', '.join(s.warm_start)}")
    if s.reproducible:
        lines.append(f"reproducible: trial k waits for trials 0..k-{s.parallel} "
                     "(docs/spec.md#what-a-seed-reproduces)")
    return lines


def _pruner_line(spec) -> str:
    """The pruner and, in promotion mode, each bracket's rungs in steps."""
    from hpsearch.pruning.pruners import describe
    p = spec.search.pruner
    if not p.promotion:
        return f"pruner: {describe(p)}, stopping trials early"
    from hpsearch.pruning.promotion import Promotion
    ladders = Promotion(p, spec.objectives[0].direction, "").ladders
    rungs = "; ".join(", ".join(map(str, ladder)) for ladder in ladders)
    return (f"pruner: {describe(p)}, promotion: segments run to rungs of {rungs} steps "
            f"(max_resource {p.max_resource})")


def _describe(p) -> str:
    if p.when is not None:  # conditional: `float in [0.0, 0.99], when optimizer in [sgd]`
        text = _describe(dataclasses.replace(p, when=None))
        return f"{text}, when {p.when.parent} in {yaml_text(list(p.when.values))}"
    if p.kind == "fixed":
        return f"fixed {yaml_text(p.value)}"
    if p.kind == "categorical":
        return f"one of {yaml_text(list(p.choices))}"
    text = f"{p.kind} in [{p.low}, {p.high}]"
    if p.log:
        text += " (log scale)"
    if p.step is not None:
        text += f" step {p.step}"
    return text


def plan(args) -> int:
    from hpsearch.launch.attempt import build_launch, trial_command
    from hpsearch.search import make_search

    spec = load_spec(args.spec)
    check_here(spec, args.spec)
    warn_about(args.spec, spec)
    s = spec.search
    facts_of = strategy(s.strategy).facts
    if facts_of.enumerates:
        from hpsearch.search.grid import grid_summary
        print(f"grid: {grid_summary(s)}; {s.trials} trials, {s.parallel} in parallel")
        shown = s.trials
    else:
        deterministic = facts_of.seeded_order and s.seed is not None
        shown = s.trials if deterministic else min(s.trials, s.parallel)
        print(f"{s.strategy}: {s.trials} trials, {s.parallel} in parallel" +
              ("" if deterministic else f"; the first {shown} are launched together, later "
               "ones depend on results" + ("" if s.seed is not None else
                                           " (no seed: an example draw)")))
    if s.pruner.enabled:
        print(_pruner_line(spec))
    limit = shown if args.limit == 0 else min(shown, args.limit)
    # Sample without running: a search in memory, nothing written.
    search = make_search(s, spec.objectives)
    search.rebuild([], {})
    print(f"runs in: {spec.experiment_dir}   workdir: {spec.workdir}   executor: "
          f"{spec.executor.type}")
    pilots = facts(spec.executor).in_pilots
    if pilots:
        print(_pilot_line(spec) if args.brief else _pilot_script(spec), end="")
    split = _sites_split(spec, shown)
    _scouts_line(spec, pilots)
    if args.brief:
        print()
    recipe = spec.trial_recipe(facts(spec.executor).on_slurm)
    for _ in range(limit):
        asked = search.ask()
        if asked is None:
            break
        launch = build_launch(recipe, asked.trial_id, 1, asked.params)
        if split:  # executor.sites: the site the broker would send it to, and its job
            from hpsearch.executors.late_binding import partners
            from hpsearch.executors.sites import sent_resources
            site = split[asked.trial_id % len(split)]
            resources = launch.resources or spec.resources
            late = spec.executor.bind == "late" and resources.nodes == 1
            launch = dataclasses.replace(launch, resources=sent_resources(
                resources, site, partners(site, spec.executor.sites) if late else []))
        print(f"{'' if args.brief else chr(10)}trial {asked.trial_id}: "
              f"{format_params(asked.params)}")
        resources = launch.resources or spec.resources
        if spec.resources.per_trial:  # trials of several sizes: each one's own
            print(f"  size: {resources.size()}")
        if args.brief:  # the user's command alone: launcher, runtime, script left out
            print(f"  $ {trial_command(recipe, asked.trial_id, asked.params)}")
        elif pilots:
            n = resources.nodes
            print(f"  runs inside a pilot (no job of its own), on {n} node{'s' * (n > 1)} of "
                  f"the pilot's allocation:\n  $ {launch.command}")
        elif facts(spec.executor).job_per_attempt:
            from hpsearch.executors.sites import site_job
            from hpsearch.slurm.sbatch import batch_script
            job = spec.slurm_job()
            if split:
                site = split[asked.trial_id % len(split)]
                job = site_job(job, site)
                later = asked.trial_id >= len(split)  # where a slot frees: results decide
                print(f"  site: {site.name}" + (f" (cluster {site.cluster}: sbatch -M "
                                                f"{site.cluster})" if site.cluster else "")
                      + (" (shown as an example: decided when it is launched)" if later
                         else ""))
            print(batch_script(job, launch), end="")
        else:
            print(f"  $ {launch.command}")
    if limit < shown:
        print(f"\n... {shown - limit} more (use --limit 0 to show all)")
    if pilots and not args.brief:
        print("\n(--brief: each trial's own command, without the launch shell)")
    return 0


def _scouts_line(spec, pilots: bool) -> None:
    """resources.time or mem `auto` on Slurm: what the scouts will do."""
    if spec.resources.auto and facts(spec.executor).on_slurm:
        ceilings = ", ".join(f"{k} {getattr(spec.resources, k)}" for k in spec.resources.auto)
        print(f"\nscouts: the first {spec.resources.scouts} trials ask for the ceiling "
              f"({ceilings}); later ones for the 95th percentile of what the completed ones "
              "took x 1.5" + (", time only in pilots" if pilots else "")
              + " (docs/brokerage.md#scouts)")


def _sites_split(spec, shown: int) -> list:
    """executor.sites: print each site and where the first trials (with pilots: the first
    pilots) would go (the broker's choice with nothing yet running: each adds to its site's
    pending); the sites in that order, one a trial ([] without sites, or with pilots)."""
    from hpsearch.executors import brokerage
    sites, pilots = spec.executor.sites, spec.executor.pilots
    if not sites:
        return []
    loads = {site.name: brokerage.SiteLoad() for site in sites}
    order = []
    unit = "pilots" if pilots else "trials"  # with pilots, the broker places the pilots
    for _ in range(max(1, pilots.max if pilots else min(shown, spec.search.parallel))):
        site = brokerage.choose(sites, loads, 0.0)
        if site is None:
            break
        loads[site.name].pending += 1
        order.append(site)
    print(f"\nsites: {len(sites)}, each {unit[:-1]} to the best weight (docs/brokerage.md)"
          + ("; trials run in whichever pilot starts first" if pilots else "")
          + ("; bind: late: a single-node job waits in the partitions of its site's cluster "
             "too, and its site is where Slurm starts it" if spec.executor.bind == "late"
             else ""))
    for site in sites:
        where = ", ".join(f"{k} {getattr(site, k)}" for k in ("partition", "cluster",
                                                               "account", "qos", "max")
                          if getattr(site, k) is not None)
        first = sum(1 for s in order if s.name == site.name)
        own = site.pilots.over(pilots) if pilots and site.pilots else None
        print(f"  {site.name}: {where or 'the default partition'}, weight {site.weight:g}; "
              f"{first} of the first {len(order)} {unit}"
              + (f"; its pilots: {own.nodes} nodes x {own.slots_per_node} slots for "
                 f"{own.time}" if own else ""))
    return [] if pilots else order  # a trial runs in whichever pilot starts first


def _pilots(cfg) -> str:
    return (f"\npilots: trials run in pilot jobs, up to {cfg.max} at a time, each of "
            f"{cfg.nodes} nodes x {cfg.slots_per_node} slots for {cfg.time}")


def _pilot_line(spec) -> str:
    """What `plan --brief` shows of a pilot search's jobs: one line."""
    return (_pilots(spec.executor.pilots) + " (without --brief: the batch script, and the "
            "launch shell around each command)\n")


def _pilot_script(spec) -> str:
    """What `plan` shows of a pilot search's jobs: the batch script of its first pilot."""
    from hpsearch.pilot.fleet import pilot_job_parameters
    from hpsearch.pilot.protocol import pilots_dir
    from hpsearch.slurm.pilot_jobs import batch_script
    from hpsearch.slurm.sbatch import pilot_name

    cfg = spec.executor.pilots
    name = pilot_name(spec.name, 1, spec.instance)
    job, where = spec.slurm_job(), ""
    if spec.executor.sites:  # the broker's first choice with nothing running: the first site
        from hpsearch.executors.sites import site_job
        first = spec.executor.sites[0]
        job, where = site_job(job, first), f" (at site {first.name}" + (
            f", sbatch -M {first.cluster})" if first.cluster else ")")
    script = batch_script(pilots_dir(spec.experiment_dir) / "submitit",
                          pilot_job_parameters(job, name))
    return (_pilots(cfg) + f"; pilot 1's batch script{where}"
            ":\n# placement options (--switches, --nodelist) are chosen from live node "
            "state at submit time and are not shown\n" + script.rstrip("\n") + "\n")

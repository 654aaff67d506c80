"""`hpsearch scale`: re-run one trial's configuration at several sizes, as a child
experiment (PARENT-scale-K in the same runs dir, its own store; the parent's is only read),
and print its scaling curve beside the ring all-reduce model (docs/scaling.md#scaling-a-
configuration). The child spec: hpsearch.driver.scale_spec; the table:
hpsearch.report.scaling_curve. Run again, the same command continues or just shows the child.
"""

from __future__ import annotations

import argparse
import os
import sys

from hpsearch.cli.common import add_command, runs_dir_of
from hpsearch.cli.run_cmds import _add_run_flags, _run, _tolerated
from hpsearch.errors import BadInput, Conflict, HpsearchError

EXAMPLES = ("  hpsearch scale digits --trial 7 --nodes 1,2,4       # Slurm: 1, 2 and 4 nodes\n"
            "  hpsearch scale digits --trial 7 --gpus 1,2,4 --grad-bytes 4.4e7\n"
            "  hpsearch scale scaling --trial 0 --tasks 1,2        # local: 1 and 2 ranks\n"
            "  hpsearch scale digits --trial 7 --gpus 1,2 --bandwidth 25   # Gbit/s\n"
            "  hpsearch status digits-scale-7                      # the child experiment")


def register(sub) -> None:
    from hpsearch.report.scaling_curve import DEFAULT_BANDWIDTH_GBIT
    p = add_command(sub, "scale", "Re-run trial K's configuration (its parameters) at several "
                    "sizes as a child experiment NAME-scale-K (its own store, in the same runs "
                    "dir; NAME's store is only read), on NAME's executor, one size at a time; "
                    "then print per size the time per step, throughput, speedup, scaling and "
                    "parallel efficiency (from the ranks' timing, docs/scaling.md) and the "
                    "measured communication beside the ring all-reduce model 2(n-1)/n * S/B.",
                    EXAMPLES, scale)
    p.add_argument("name", help="the parent experiment (or its spec file)")
    p.add_argument("--trial", type=int, required=True, metavar="K",
                   help="the trial whose parameters are re-run")
    size = p.add_mutually_exclusive_group(required=True)
    for option, field in (("nodes", "resources.nodes"), ("gpus", "resources.gpus_per_node"),
                          ("tasks", "resources.tasks_per_node (ranks on one node)")):
        size.add_argument(f"--{option}", type=_sizes, metavar="N,N,...",
                          help=f"the sizes: values of {field}")
    p.add_argument("--grad-bytes", type=_positive_float, default=None, metavar="S",
                   help="gradient bytes all-reduced per step, for the model (default: the "
                        "metric 'grad_bytes' where the trial reports it)")
    p.add_argument("--bandwidth", type=_positive_float, default=DEFAULT_BANDWIDTH_GBIT,
                   metavar="GBIT",
                   help="link bandwidth B for the model, Gbit/s (default "
                        f"{DEFAULT_BANDWIDTH_GBIT:g}: the placement simulator's NIC)")
    _add_run_flags(p)


def _sizes(text: str) -> list[int]:
    try:
        sizes = sorted({int(s) for s in text.split(",")})
    except ValueError:
        sizes = []
    if not sizes or sizes[0] < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected sizes as whole numbers of 1 "
                                         "or more, comma-separated, e.g. 1,2,4")
    return sizes


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: expected a positive number")
    return value


def _option(args) -> tuple[str, list[int]]:
    return next((o, getattr(args, o)) for o in ("nodes", "gpus", "tasks") if getattr(args, o))


def scale(args) -> int:
    from hpsearch.driver import scale_spec, session
    from hpsearch.preflight import parse_spec
    from hpsearch.store import runs
    from hpsearch.store.reader import Reader
    from hpsearch.store.runs import STORE_FILE

    runs_dir = runs_dir_of(args)
    parent = session.stored_spec(runs_dir, args.name, args.executor)
    option, sizes = _option(args)
    with Reader(parent.experiment_dir / STORE_FILE) as reader:
        trials = {t.id: t for t in reader.trials()}
        reported = reader.last_metrics(args.trial) if args.trial in trials else {}
        timed = any(row.get("steps") for row in reader.rank_timing())
    if args.trial not in trials:
        known = f"trials 0 to {max(trials)}" if trials else "no trials yet"
        raise HpsearchError(f"--trial {args.trial}: no trial {args.trial} in experiment "
                            f"{parent.name} ({known})")
    _check_sizes(parent, option, sizes)
    name = scale_spec.child_name(parent.name, args.trial)
    child_dir = runs.experiment_dir(parent.runs_dir, name)
    if not timed and not (child_dir / STORE_FILE).exists():
        raise HpsearchError(_untimed(parent.name, args.trial, option, sizes))
    spec_file = child_dir / "scale-spec.yaml"
    text = scale_spec.child_text(parent.text, parent.name, args.trial, trials[args.trial].params,
                                 option, sizes, {"workdir": parent.workdir,
                                                 "runs_dir": parent.runs_dir,
                                                 "topology": parent.placement.topology})
    try:  # before anything is written: the sizes the spec cannot take, named by key
        parse_spec(text, str(spec_file), parent.workdir, parent.runs_dir, args.executor)
    except BadInput as exc:
        raise HpsearchError(f"--{option} {','.join(map(str, sizes))}: the spec of {name} "
                            f"cannot take it: {exc.key or 'spec'}: {exc.detail}") from None
    if (child_dir / STORE_FILE).exists() and _stored_text(child_dir) != text:
        raise Conflict(f"experiment '{name}' exists with other sizes or parameters; "
                       f"`hpsearch status {name}`, or remove {child_dir} to scale anew")
    _write_private(child_dir, spec_file, text)
    child, exists = session.new_experiment(spec_file, parent.runs_dir, args.executor, True)
    print(f"experiment {name}: trial {args.trial} of {parent.name} at {option} "
          f"{', '.join(map(str, sizes))}" + (" (continued)" if exists else ""), flush=True)
    code = _tolerated(child, _run(child, create=not exists, args=args), args.allow_failures)
    if args.detach or args.driver_job:
        print(f"when it has run: `hpsearch scale {args.name} --trial {args.trial} --{option} "
              f"{','.join(map(str, sizes))}` again prints the curve")
        return code
    grad = args.grad_bytes or _reported_bytes(reported)
    print(_curve(child, option, grad, args.bandwidth))
    return code


def _check_sizes(parent, option: str, sizes: list[int]) -> None:
    """What the spec's validation cannot know: the local executor runs on this host only."""
    from hpsearch.executors.registry import facts
    if facts(parent.executor).on_slurm:
        return
    if option == "nodes" and sizes != [1]:
        raise HpsearchError(f"--nodes {','.join(map(str, sizes))}: executor.type: the local "
                            "executor runs a trial on this host only (nodes 1); use --tasks "
                            "or --gpus, or --executor slurm")
    slots = parent.executor.gpus
    if option == "gpus" and not isinstance(slots, str) and max(sizes) > len(slots or ()):
        raise HpsearchError(f"--gpus {','.join(map(str, sizes))}: executor.gpus: the local "
                            f"executor has {len(slots or ())} GPU slot(s); a trial of "
                            f"{max(sizes)} GPUs could never start")


def _untimed(parent: str, trial: int, option: str, sizes: list[int]) -> str:
    """Why not to run: the curve is made of the ranks' step timing, and no trial of the
    parent, whose command the child runs, reported any: each size would run for dashes."""
    return (f"--{option} {','.join(map(str, sizes))}: no trial of {parent} reported step "
            "timing, which the curve is made of (time per step, speedup, efficiency), so "
            f"each size would run trial {trial}'s configuration and print dashes. Have the "
            "script report it on every rank (hpsearch.trial.report_timing or "
            "trial.timed_step; PyTorch DDP: hpsearch.integrations.ddp.DdpTiming; Lightning: "
            "HpsearchCallback(timing=True)): docs/scaling.md#reporting-timing-from-a-trial")


def _stored_text(child_dir) -> str:
    from hpsearch.store.reader import Reader
    from hpsearch.store.runs import STORE_FILE
    with Reader(child_dir / STORE_FILE) as reader:
        return reader.experiment().spec_yaml


def _write_private(child_dir, spec_file, text: str) -> None:
    """The child's folder (0700) and its spec file (0600), the file replaced atomically."""
    from hpsearch.store.private import make_private
    make_private(child_dir)
    part = spec_file.with_name(spec_file.name + ".part")
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(part, spec_file)


def _reported_bytes(metrics: dict) -> float | None:
    from hpsearch.report.scaling_curve import GRAD_BYTES_METRIC
    found = metrics.get(GRAD_BYTES_METRIC)
    return found[1] if found and found[1] > 0 else None


def _curve(child, option: str, grad_bytes: float | None, bandwidth: float) -> str:
    from hpsearch.accounting.efficiency import efficiency
    from hpsearch.driver.scale_spec import SIZE_FIELDS
    from hpsearch.report.scaling_curve import Point, table
    from hpsearch.store.reader import Reader
    from hpsearch.store.runs import STORE_FILE
    with Reader(child.experiment_dir / STORE_FILE) as reader:
        trials = reader.trials()
        found = efficiency(reader.rank_timing(), {t.id: t.params for t in trials}, child.text)
        if grad_bytes is None:
            grad_bytes = next((b for t in trials if (b := _reported_bytes(
                reader.last_metrics(t.id))) is not None), None)
    size_param = dict(child.resources.per_trial)[SIZE_FIELDS[option]]
    points = sorted((Point(int(t.params[size_param]), t.id, t.state, found.get(t.id))
                     for t in trials), key=lambda p: (p.size, p.trial))
    if not any(p.eff for p in points):
        print("no trial reported timing (hpsearch.trial.report_timing, docs/scaling.md): "
              "speedup and efficiency need it", file=sys.stderr)
    return table(points, f"{option}", grad_bytes, bandwidth)

"""Validate `executor`: which executor runs the trials (a name from the executors' registry,
handed in through the Vocabulary), its timings, its pilot jobs (`executor.pilots`) and its
warm workers (`executor.warm`).

    executor: slurm                      # or a mapping:
    executor: {type: slurm, array: false, pilots: {nodes: 2, time: "02:00:00"}, warm: [torch]}
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Any

from hpsearch.spec import checks, durations, own_options
from hpsearch.spec.model import Executor, Pilots, Site, SitePilots
from hpsearch.spec.space import is_int
from hpsearch.spec.yamlpos import KeyPath

if TYPE_CHECKING:
    from hpsearch.spec.validate import _Validator

EXECUTOR_KEYS = ("type", "gpus", "timeout", "grace", "array", "array_throttle", "poll_interval",
                 "lost_after", "pilots", "warm", "sites", "move_after", "bind")
MODULE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
PILOT_KEYS = ("nodes", "time", "max", "slots_per_node", "idle_timeout", "grace", "heartbeat",
              "agents")
SITE_PILOT_KEYS = ("time", "nodes", "slots_per_node")  # what a site's pilots may have of their own
SITE_KEYS = ("name", "partition", "cluster", "account", "qos", "max", "weight", "pilots")


def executor(v: _Validator, value: Any, path: KeyPath) -> Executor:
    """A name (`slurm`) or a mapping of EXECUTOR_KEYS and the options of its type."""
    if isinstance(value, str):
        value = {"type": value}
    d = v.mapping(value, path, EXECUTOR_KEYS + v.vocabulary.executor_option_names())
    kind = d.get("type", "local")
    types = v.vocabulary.executor_types()
    if kind not in types:
        raise v.fail(path + ("type",), f"unknown executor {checks.shown(kind)}; "
                                       f"expected one of {', '.join(types)}")
    own = own_options.options(v, d, path, "executor", kind,
                              [(e.name, e.options) for e in v.vocabulary.executors])
    gpus = d.get("gpus")
    if gpus is not None and gpus != "auto":
        v.typed(gpus, path + ("gpus",), lambda x: isinstance(x, list) and x and all(
            is_int(g) or isinstance(g, str) for g in x), "'auto' or a list of device ids")
        gpus = tuple(v.string(str(g), path + ("gpus", i)) for i, g in enumerate(gpus))
    timeout = v.optional(d, "timeout", path, v.duration)
    grace = v.optional(d, "grace", path, v.duration, 10.0)
    array = v.optional(d, "array", path, lambda x, p: v.typed(
        x, p, lambda b: isinstance(b, bool), "true or false"), True)
    throttle = v.optional(d, "array_throttle", path, lambda x, p: v.integer(x, p, 1))
    poll = v.optional(d, "poll_interval", path, v.duration, 5.0)
    lost_after = v.optional(d, "lost_after", path, v.duration, 300.0)
    pilots = v.optional(d, "pilots", path, functools.partial(_pilots, v))
    if pilots is not None and not v.vocabulary.executor(kind).on_slurm:
        # (`submit --executor local` comes later)
        written = f"it is {kind}" if "type" in d else f"without it, it is {kind}"
        raise v.fail(path + ("pilots",), "pilots run on Slurm: set executor.type: slurm "
                                         f"({written})")
    warm = v.optional(d, "warm", path, functools.partial(_warm, v))
    sites = v.optional(d, "sites", path, functools.partial(_sites, v), ())
    if sites and not v.vocabulary.executor(kind).on_slurm:
        raise v.fail(path + ("sites",), "sites are Slurm partitions or clusters: set "
                                        f"executor.type: slurm (it is {kind})")
    move_after = v.optional(d, "move_after", path, lambda x, p: None if x is False
                            else v.duration(x, p), Executor.move_after)
    bind = v.optional(d, "bind", path, lambda x, p: _bind(v, x, p, sites, pilots), "late")
    return Executor(type=kind, gpus=gpus, timeout=timeout, grace=grace, array=array,
                    array_throttle=throttle, poll_interval=poll, lost_after=lost_after,
                    pilots=pilots, warm=warm, sites=sites, move_after=move_after,
                    bind=bind, options=own)


def _bind(v: _Validator, value: Any, path: KeyPath, sites: tuple[Site, ...],
          pilots: Pilots | None) -> str:
    """`early` or `late`; late only over sites, and not with pilots (which bind late)."""
    if value not in ("early", "late"):
        raise v.fail(path, f"expected early or late; got {checks.shown(value)}")
    if value == "late" and not sites:
        raise v.fail(path, "bind: late sends a job to several sites' partitions at once: "
                           "it needs executor.sites")
    if value == "late" and pilots is not None:
        raise v.fail(path, "pilots bind trials late already (a trial goes to the first "
                           "pilot that starts); bind: late is for jobs: leave it out")
    return str(value)


def _sites(v: _Validator, value: Any, path: KeyPath) -> tuple[Site, ...]:
    """A list of mappings of SITE_KEYS, each a partition and/or cluster, names unique."""
    v.typed(value, path, lambda x: isinstance(x, list) and x, "a non-empty list of sites, "
            "each a mapping such as {partition: gpu, max: 8}")
    sites: list[Site] = []
    for i, entry in enumerate(value):
        where = path + (i,)
        d = v.mapping(entry, where, SITE_KEYS)
        names = {k: v.optional(d, k, where, lambda x, p, k=k: v.slurm_name(x, p, k))
                 for k in ("partition", "cluster", "account", "qos")}
        default = ":".join(n for n in (names["cluster"], names["partition"]) if n)
        name = v.optional(d, "name", where, v.name, default or "default")
        weight = v.optional(d, "weight", where, lambda x, p: v.typed(
            x, p, lambda w: isinstance(w, (int, float)) and not isinstance(w, bool) and w > 0
            and w < float("inf"), "a number > 0"), 1.0)
        site = Site(name=name, max=v.optional(d, "max", where, lambda x, p: v.integer(x, p, 1)),
                    weight=float(weight), pilots=v.optional(
                        d, "pilots", where, functools.partial(_site_pilots, v)), **names)
        twin = next((s for s in sites if s.name == site.name), None)
        if twin is not None:
            raise v.fail(where + ("name",) if "name" in d else where,
                         f"two sites are named {site.name!r}; give each its own `name`")
        sites.append(site)
    return tuple(sites)


def _site_pilots(v: _Validator, value: Any, path: KeyPath) -> SitePilots:
    """A site's own pilot settings, each optional (executor.pilots' where not given): `time`
    (a partition's MaxTime differs from another's), `nodes` and `slots_per_node` (its
    nodes have more cores or GPUs, or fewer). The other pilot settings are the search's."""
    v.typed(value, path, lambda x: isinstance(x, dict) and x, "a mapping such as "
            "{time: \"04:00:00\", nodes: 2, slots_per_node: 4} (any of "
            f"{', '.join(SITE_PILOT_KEYS)}; the others are executor.pilots')")
    d = v.mapping(value, path, SITE_PILOT_KEYS)
    return SitePilots(
        time=v.optional(d, "time", path, functools.partial(_slurm_time_limit, v)),
        **{k: v.optional(d, k, path, lambda x, p: v.integer(x, p, 1))
           for k in ("nodes", "slots_per_node")})


def _warm(v: _Validator, value: Any, path: KeyPath) -> tuple[str, ...] | None:
    """`true`, a list of modules to preload, or {preload: [...]}; `false`: off."""
    if isinstance(value, bool):
        return () if value else None
    if isinstance(value, dict):
        value = v.mapping(value, path, ("preload",)).get("preload", [])
        path = path + ("preload",)
    modules = v.strings(value, path)
    for i, name in enumerate(modules):
        if not MODULE_RE.fullmatch(name):
            raise v.fail(path + (i,), f"expected a module name such as torch or "
                                      f"sklearn.datasets; got {checks.shown(name)}")
    return modules


def _pilots(v: _Validator, value: Any, path: KeyPath) -> Pilots | None:
    """`true` or a mapping: pilot jobs, a default for each key not given; `false`: none."""
    if isinstance(value, bool):
        return Pilots() if value else None
    v.typed(value, path, lambda x: isinstance(x, dict), "true, false or a mapping with "
                                                        f"keys {', '.join(PILOT_KEYS)}")
    d = v.mapping(value, path, PILOT_KEYS)

    def count(x: Any, p: KeyPath) -> int:
        return v.integer(x, p, 1)

    pilots = Pilots(
        time=v.optional(d, "time", path, functools.partial(_slurm_time_limit, v), Pilots.time),
        **{k: v.optional(d, k, path, count, getattr(Pilots, k))
           for k in ("nodes", "max", "slots_per_node")},
        **{k: v.optional(d, k, path, v.duration, getattr(Pilots, k))
           for k in ("idle_timeout", "grace", "heartbeat")},
        agents=v.optional(d, "agents", path, lambda x, p: v.typed(
            x, p, lambda b: isinstance(b, bool), "true or false"), Pilots.agents))
    found = checks.pilot_heartbeat(pilots, d.get("heartbeat") is not None)
    if found:
        raise v.fail(path + (found[0],), found[1])
    return pilots


def _slurm_time_limit(v: _Validator, value: Any, path: KeyPath) -> str:
    """A finite Slurm time limit as sbatch --time takes it, as written."""
    text = str(value).strip() if is_int(value) or isinstance(value, str) else ""
    v.typed(value, path, lambda _: durations.time_limit_seconds(text),
            "a Slurm time limit such as 90 (minutes), 01:30:00 or 2-00:00:00")
    return text

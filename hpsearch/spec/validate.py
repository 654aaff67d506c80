"""Turn a YAML spec into a typed Spec, or one BadInput naming file, line, key path and fix."""

from __future__ import annotations

import dataclasses
import difflib
import functools
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hpsearch.errors import BadInput
from hpsearch.spec import (
    checks,
    durations,
    known_points,
    limits,
    own_options,
    trial_resources,
)
from hpsearch.spec.cost import cost_problem
from hpsearch.spec.executor import executor as executor_spec
from hpsearch.spec.model import (
    DIRECTIONS,
    FAILURE_CLASSES,
    PER_TRIAL_FIELDS,
    PLACEMENT_MODES,
    PLACEMENT_POLICIES,
    SHARES,
    Checkpoints,
    Container,
    Executor,
    Launcher,
    MaxFailures,
    Objective,
    Param,
    Pilots,
    Placement,
    Pruner,
    Resources,
    Retries,
    RetryRule,
    Search,
    Spec,
)
from hpsearch.spec.names import NAME_RE
from hpsearch.spec.names import choose as choose_name
from hpsearch.spec.problems import FAILED, Problems
from hpsearch.spec.pruner import pruner as pruner_spec
from hpsearch.spec.space import PARAM_RE, template_problem
from hpsearch.spec.space import is_int as _is_int
from hpsearch.spec.space import is_number as _is_number
from hpsearch.spec.space import space as space_spec
from hpsearch.spec.vocabulary import Vocabulary
from hpsearch.spec.yamlpos import KeyPath, dotted, load_yaml_with_lines, nearest_line
from hpsearch.template import BUILTIN_PLACEHOLDERS, placeholders

ENV_NAME_RE = PARAM_RE
SLURM_TIME_RE = re.compile(r"^(\d+-)?\d+(:\d{1,2}){0,2}$")

TOP_KEYS = ("name", "command", "workdir", "runs_dir", "search", "objective", "resources",
            "retries", "checkpoints", "executor", "launcher", "container", "env",
            "placement", "share")
SEARCH_KEYS = ("strategy", "trials", "parallel", "seed", "space", "pruner", "max_failures",
               "timeout", "enqueue", "warm_start", "reproducible")
OBJECTIVE_KEYS = ("metric", "direction")
RESOURCE_KEYS = ("nodes", "tasks_per_node", "gpus_per_node", "cpus_per_task", "mem", "time",
                 "partition", "account", "qos", "sbatch_extra", "scouts")
RETRY_KEYS = ("max",) + FAILURE_CLASSES
RETRY_RULE_KEYS = ("max", "mem_factor", "time_factor", "exclude_node")
EXIT_CODE_RULE_RE = re.compile(r"^exit_(\d{1,3})$")
CHECKPOINT_KEYS = ("keep_last", "keep_best", "keep_trials", "signal", "signal_before")
SIGNALS = ("USR1", "USR2", "TERM", "INT", "HUP", "URG", "XCPU")
LAUNCHER_KEYS = ("type", "args")
CONTAINER_KEYS = ("runtime", "image", "binds", "env", "args")
PLACEMENT_KEYS = ("policy", "max_wait", "topology", "mode", "replan_after")
MAX_INT = 2 ** 31 - 1


def build(text: str, file: str, base_dir: Path, vocabulary: Vocabulary, default_runs: Path,
          runs_dir: str | Path | None = None, executor: str | None = None) -> Spec:
    """The validated Spec of `text`, or a BadInput (BadInputs: every problem found, in file
    order). `vocabulary`: the seams' names and facts (hpsearch.preflight.vocabulary);
    `default_runs`: where experiments go when neither the spec nor `runs_dir` says;
    `executor` overrides executor.type (submit --executor), and is checked like it.
    What needs this machine or the cluster to check is preflight's (hpsearch.preflight)."""
    raw, lines = load_yaml_with_lines(text, file)
    spec = _Validator(file, lines, base_dir, vocabulary).spec(raw, runs_dir, executor,
                                                              default_runs)
    return dataclasses.replace(spec, text=text)


class _Validator:
    def __init__(self, file: str, lines: dict[KeyPath, int], base_dir: Path,
                 vocabulary: Vocabulary) -> None:
        self.file, self.lines, self.base_dir = file, lines, base_dir
        self.vocabulary = vocabulary
        self.problems = Problems()

    def enumerates(self, strategy: str) -> bool:
        """Whether `strategy` (a known one, or "" where it had a problem) searches a finite
        set of points (grid)."""
        return strategy in self.vocabulary.strategy_names() and \
            self.vocabulary.strategy(strategy).enumerates

    # -- helpers ---------------------------------------------------------------------------
    def fail(self, path: KeyPath, message: str) -> BadInput:
        return BadInput(message, self.file, nearest_line(self.lines, path), dotted(path) or None)

    def mapping(self, value: Any, path: KeyPath, allowed: tuple[str, ...]) -> dict:
        if not isinstance(value, dict):
            raise self.fail(path, f"expected a mapping with keys {', '.join(allowed)}; "
                                  f"got {_kind(value)}")
        known = {}
        for key in value:  # an unknown key is reported and left out; the others are checked
            if key in allowed:
                known[key] = value[key]
                continue
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else \
                f"; expected one of: {', '.join(allowed)}"
            self.problems.unknown_key(path, self.fail(path + (key,), f"unknown key '{key}'{hint}"))
        return known

    def require(self, d: dict, path: KeyPath, keys: tuple[str, ...]) -> None:
        """Report each of `keys` that `d` lacks (unless it has an unknown key)."""
        for key in keys:
            if key not in d:
                self.problems.note(self.fail(path, f"missing required key '{key}'"))
                self.problems.skip(path + (key,))

    def take(self, d: dict, key: str, path: KeyPath, convert: Callable) -> Any:
        """convert(d[key]) for a required key; FAILED if missing (`require` says so) or bad."""
        if key not in d:
            return FAILED
        return self.problems.recover(path + (key,), convert, d[key], path + (key,))

    def typed(self, value: Any, path: KeyPath, check: Callable[[Any], object],
              expected: str) -> Any:
        """`value` if `check(value)` is truthy (a check may return the value itself or a
        match), else BadInput saying `expected`."""
        if not check(value):
            raise self.fail(path, f"expected {expected}; got {_kind(value)} {checks.shown(value)}")
        return value

    def integer(self, value: Any, path: KeyPath, minimum: int | None = None) -> int:
        self.typed(value, path, _is_int, "an integer")
        if minimum is not None and value < minimum:
            raise self.fail(path, f"expected an integer >= {minimum}; got {value}")
        if value > MAX_INT:  # counts, seeds, retries: beyond this the store or a seed breaks
            raise self.fail(path, f"expected an integer <= {MAX_INT}; got {value}")
        return value

    def string(self, value: Any, path: KeyPath, allowed: str = "") -> str:
        """A non-empty string without control characters (except those in `allowed`)."""
        self.typed(value, path, lambda v: isinstance(v, str) and v != "", "a non-empty string")
        self.check(path, checks.control_character(value, allowed))
        return value

    def plain(self, value: Any, path: KeyPath) -> Any:
        """`value` (a parameter's fixed value or choice, of any YAML shape) if no text in it
        holds a control character other than newline and tab: each is shown by status and
        best, and put in a command (shell-quoted, so a newline or tab arrives intact)."""
        if isinstance(value, str):
            self.check(path, checks.control_character(value, allowed="\n\t"))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                self.plain(item, path + (i,))
        elif isinstance(value, dict):
            for key, item in value.items():
                self.plain(key, path)
                self.plain(item, path + (key,))
        return value

    def check(self, path: KeyPath, problem: str | None) -> None:
        if problem:
            raise self.fail(path, problem)

    def optional(self, d: dict, key: str, path: KeyPath, convert: Callable, default: Any = None):
        if key not in d or d[key] is None:
            return default
        return self.problems.recover(path + (key,), convert, d[key], path + (key,),
                                     fallback=default)

    # -- sections --------------------------------------------------------------------------
    def spec(self, raw: Any, runs_dir: str | Path | None, executor: str | None,
             default_runs: Path) -> Spec:
        if raw is None:
            raise BadInput("the spec is empty; expected a mapping with at least name, command, "
                           "search and objective", self.file, 1)
        top = self.mapping(raw, (), TOP_KEYS)
        self.require(top, (), ("name", "command", "search", "objective"))
        broken, recover = self.problems.broken, self.problems.recover
        name = self.take(top, "name", (), self.name)
        command = self.take(top, "command", (), lambda v, p: self.string(v, p, allowed="\n\t"))
        objectives = self.take(top, "objective", (), self.objectives)
        written = top.get("objective")
        search = self.take(top, "search", (), lambda v, p: self.search(
            v, p, len(written) if isinstance(written, list) else 1,
            "" if name is FAILED else name))
        resources = self.optional(top, "resources", (), lambda v, p: self.resources(
            v, p, None if broken(("search",)) else search.space), Resources())
        if not broken(("command",), ("search",), ("resources",)):
            recover(("command",), self.check_template, command, search,
                    {param for _, param in resources.per_trial})
        elif not broken(("command",)):
            # the search has a problem: its space's names, as written, still tell a
            # placeholder typo (issue 38 item 3: `{hiden}` went unreported beside it)
            given = top.get("search")
            space = given.get("space") if isinstance(given, dict) else None
            if isinstance(space, dict) and all(isinstance(k, str) and PARAM_RE.fullmatch(k)
                                               for k in space):  # else a name is the problem
                recover(("command",), self.check_placeholders, command, set(space))
        if not broken(("search",), ("objective",)):
            recover(("search", "strategy"), self.check_strategy_objectives, search, objectives)
        workdir = self.optional(top, "workdir", (), self.path, self.base_dir)
        if runs_dir is not None:
            runs = Path(runs_dir).absolute()
        else:
            runs = self.optional(top, "runs_dir", (), self.path, default_runs)
        env = self.optional(top, "env", (), self.env, ())
        parts = {key: self.optional(top, key, (), check, section()) for key, check, section in (
            ("retries", self.retries, Retries), ("checkpoints", self.checkpoints, Checkpoints),
            ("executor", functools.partial(executor_spec, self), Executor),
            ("launcher", self.launcher, Launcher), ("container", self.container, Container),
            ("placement", self.placement, Placement))}
        share = recover(("share",), self.choice, top.get("share", "private"), ("share",),
                        SHARES, "share")
        self.problems.raise_found()  # the checks below read the spec as a whole
        spec = Spec(name=name, command=command, workdir=workdir, runs_dir=runs,
                      search=search, objectives=objectives, resources=resources, env=env,
                      raw=raw, share=share, **parts)
        found = checks.pilots_fit(spec.resources, spec.executor.pilots, spec.slot())
        if found:
            keys, problem = found
            unwritten = "" if keys in self.lines else \
                f"; {keys[-1]} is not given, and its default is {getattr(Pilots, keys[-1])}"
            raise self.fail(keys, problem + unwritten)
        for i, site in enumerate(spec.executor.sites):  # a site's own pilot settings
            if site.pilots is None:
                continue
            where = ("executor", "sites", i, "pilots")
            if spec.executor.pilots is None:
                raise self.fail(where, "a site's pilot settings are for pilot jobs; set "
                                       "executor.pilots too (true, or a mapping)")
            found = checks.pilots_fit(spec.resources, site.pilots.over(spec.executor.pilots),
                                      spec.slot())
            if found:
                keys, problem = found
                own = where + keys[-1:]
                raise self.fail(own if own in self.lines else keys if keys in self.lines
                                else where, problem)
        if executor is not None:  # submit --executor
            spec = dataclasses.replace(spec, executor=dataclasses.replace(spec.executor,
                                                                          type=executor))
        # objectives that are a trial's cost
        found = cost_problem(spec, self.vocabulary.executor(spec.executor.type).on_slurm)
        if found:
            raise self.fail(*found)
        return spec

    def name(self, value: Any, path: KeyPath) -> str:
        name = self.string(value, path)
        if not NAME_RE.fullmatch(name):
            raise self.fail(path, "expected a name of letters, digits, '.', '_' or '-', "
                                  "starting with a letter or digit (it names a "
                                  f"directory); got {checks.shown(name)}")
        return name

    def path(self, value: Any, path: KeyPath) -> Path:
        p = Path(self.string(value, path)).expanduser()
        return p if p.is_absolute() else (self.base_dir / p).resolve()

    def env(self, value: Any, path: KeyPath) -> tuple:
        self.typed(value, path, lambda v: isinstance(v, dict), "a mapping of NAME: value")
        out = []
        for key, val in value.items():
            if not isinstance(key, str) or not ENV_NAME_RE.fullmatch(key):
                raise self.fail(path + (key,), "expected an environment variable name")
            self.typed(val, path + (key,), lambda v: isinstance(v, (str, int, float)) and
                       not isinstance(v, bool), "a string or number")
            self.check(path + (key,), checks.control_character(str(val), "\t"))
            out.append((key, str(val)))
        return tuple(out)

    def search(self, value: Any, path: KeyPath, objectives: int, name: str = "") -> Search:
        """FAILED where the strategy or the space is (each other key is still checked)."""
        d = self.mapping(value, path, SEARCH_KEYS + self.vocabulary.option_names())
        self.require(d, path, ("strategy", "space"))
        broken, problems = self.problems.broken, self.problems
        strategy = self.take(d, "strategy", path, lambda v, p: choose_name(
            self, self.string(v, p), p, self.vocabulary.strategy_names(), "strategy",
            self.vocabulary.optuna_classes()))
        space = self.take(d, "space", path, lambda v, p: space_spec(
            self, v, p, "" if strategy is FAILED else strategy))
        parallel = self.optional(d, "parallel", path, lambda v, p: self.integer(v, p, 1), 1)
        seed = self.optional(d, "seed", path, lambda v, p: self.integer(v, p, 0), None)
        trials = self.optional(d, "trials", path, lambda v, p: self.integer(v, p, 1), None)
        pruner = self.optional(d, "pruner", path, lambda v, p: pruner_spec(self, v, p,
                                                                             objectives),
                               Pruner())
        failures = self.optional(d, "max_failures", path,
                                 lambda v, p: limits.max_failures(self, v, p),
                                 MaxFailures())
        budget = self.optional(d, "timeout", path, lambda v, p: limits.timeout(self, v, p))
        own = () if strategy is FAILED else own_options.options(
            self, d, path, "strategy", strategy,
            [(s.name, s.options) for s in self.vocabulary.strategies],
            FAILED if broken(path + ("space",)) else space)
        if strategy is FAILED or space is FAILED or broken(path + ("space",)):
            return FAILED  # enqueue, warm_start and the rest read them
        facts = self.vocabulary.strategy(strategy)
        if facts.segmented and pruner.enabled:
            problems.note(self.fail(path + ("pruner",), f"strategy {strategy} runs each trial "
                                    "in segments and decides at each boundary itself; remove "
                                    "search.pruner"))
        count = facts.count
        if count is not None:  # a grid's points that exist; pbt's population
            if not any(broken(path + (k,)) for k, _ in own):
                size = count(space, dict(own))
                trials = size if trials is None else min(trials, size)
        elif trials is None and not broken(path + ("trials",)):
            problems.note(self.fail(path, f"missing required key 'trials' (how many trials the "
                                          f"{strategy} search runs; only grid may omit it)"))
            problems.skip(path + ("trials",))
        if not any(p.kind != "fixed" for p in space):
            problems.note(self.fail(path + ("space",), "expected at least one parameter to "
                                    "search (float, int or categorical); all are fixed"))
            problems.skip(path + ("space",))
        points = self.optional(d, "enqueue", path, lambda v, p: known_points.enqueue(
            self, v, p, space, strategy), ())
        warm = self.optional(d, "warm_start", path, lambda v, p: known_points.warm_start(
            self, v, p, strategy, name), ())
        reproducible = False
        if not broken(path + ("seed",), path + ("pruner",)):
            reproducible = self.optional(d, "reproducible", path, lambda v, p: (
                limits.reproducible(self, v, p, seed, pruner)), False)
        return Search(strategy=strategy, options=own, trials=trials, parallel=parallel,
                      seed=seed, space=space, pruner=pruner, max_failures=failures,
                      timeout=budget, enqueue=points, warm_start=warm,
                      reproducible=reproducible)

    def objectives(self, value: Any, path: KeyPath) -> tuple[Objective, ...]:
        items = value if isinstance(value, list) else [value]
        if isinstance(value, list) and not value:
            raise self.fail(path, "expected at least one objective")
        out: list[Objective] = []
        for i, item in enumerate(items):
            ipath = path + (i,) if isinstance(value, list) else path
            found = self.problems.recover(ipath, self.objective, item, ipath, out)
            if found is not FAILED:
                out.append(found)
        return tuple(out)

    def objective(self, item: Any, ipath: KeyPath, earlier: list[Objective]) -> Objective:
        d = self.mapping(item, ipath, OBJECTIVE_KEYS)
        if "metric" not in d:
            raise self.fail(ipath, "missing required key 'metric'")
        metric = self.string(d["metric"], ipath + ("metric",))
        direction = d.get("direction", "minimize")
        if direction not in DIRECTIONS:
            raise self.fail(ipath + ("direction",), f"expected minimize or maximize; "
                                                    f"got {checks.shown(direction)}")
        if any(o.metric == metric for o in earlier):
            raise self.fail(ipath + ("metric",), f"duplicate objective metric '{metric}'")
        return Objective(metric, direction)

    def check_template(self, command: str, search: Search, sizing: set[str]) -> None:
        """`sizing`: parameters that size a trial (resources), which the command may leave
        out."""
        used = set(placeholders(command))
        names = {p.name for p in search.space}
        self.check_placeholders(command, names)
        if not names.intersection(used) and "params" not in used:
            return  # the trial reads them: hpsearch.trial.params(), $HPSEARCH_PARAMS
        found = template_problem(command, search.space)
        if found:
            raise self.fail(*found)
        if "params" in used:
            return
        for p in search.space:  # some are passed, this one not: a typo, or forgotten
            if p.name not in used and p.name not in sizing:
                raise self.fail(("search", "space", p.name),
                                f"parameter '{p.name}' is never used in command; add {{{p.name}}} "
                                "to it (or {params} to pass all parameters as one JSON argument, "
                                "or no parameter placeholder at all if the trial reads them "
                                "with hpsearch.trial.params())")

    def check_placeholders(self, command: str, names: set[str]) -> None:
        """The first placeholder of the command that names no parameter of `names` (nor a
        built-in one), as a problem at the command's line."""
        for ph in placeholders(command):
            if ph not in names and ph not in BUILTIN_PLACEHOLDERS:
                close = difflib.get_close_matches(ph, sorted(names), n=1)
                hint = f"; did you mean {{{close[0]}}}?" if close else ""
                raise self.fail(("command",), f"placeholder {{{ph}}} names no parameter in "
                                              f"search.space{hint}")

    def check_strategy_objectives(self, search: Search, objectives: tuple) -> None:
        if len(objectives) > 1 and not self.vocabulary.strategy(search.strategy).multi_objective:
            several = [s.name for s in self.vocabulary.strategies
                       if s.multi_objective and s.learns]
            raise self.fail(("search", "strategy"), f"{search.strategy} optimizes one objective; "
                                                    f"use {', '.join(several[:-1])} or "
                                                    f"{several[-1]} for several")

    def resources(self, value: Any, path: KeyPath,
                  space: tuple[Param, ...] | None = ()) -> Resources:
        """`space` None: search.space had a problem, so a "{name}" value is not checked."""
        d = self.mapping(value, path, RESOURCE_KEYS)
        auto = self.auto_sizes(d, path)
        if space is None:
            d = {k: v for k, v in d.items()
                 if not trial_resources.REFERENCE_RE.fullmatch(str(v))}
        sized, per_trial = trial_resources.per_trial(self, d, path, space or (),
                                                     self.resource_field)
        own = {k: sized[k] if k in sized else self.optional(d, k, path, self.resource_field(k),
                                                            getattr(Resources, k))
               for k in PER_TRIAL_FIELDS}
        strings = {k: self.optional(d, k, path, lambda v, p, k=k: self.slurm_name(v, p, k))
                   for k in ("partition", "account", "qos")}
        extra = self.optional(d, "sbatch_extra", path, self.sbatch_extra, ())
        scouts = self.optional(d, "scouts", path, lambda v, p: self.integer(v, p, 1),
                               Resources.scouts)
        return Resources(sbatch_extra=extra, per_trial=per_trial, auto=auto, scouts=scouts,
                         **own, **strings)

    def auto_sizes(self, d: dict, path: KeyPath) -> tuple[str, ...]:
        """`time: auto 04:00:00` and `mem: auto 16G` (scouts): each such field of `d` is
        left with its ceiling, checked as the field is; the fields that were auto."""
        auto = []
        for key in ("time", "mem"):
            written = d.get(key)
            words = written.split() if isinstance(written, str) else []
            if not words or words[0] != "auto":
                continue
            if len(words) != 2:
                example = "auto 04:00:00" if key == "time" else "auto 16G"
                raise self.fail(path + (key,), f"expected `auto` and a ceiling, such as "
                                               f"`{key}: {example}`; got {checks.shown(written)}")
            d[key] = words[1]
            auto.append(key)
        return tuple(auto)

    def resource_field(self, key: str) -> Callable[[Any, KeyPath], Any]:
        """The check (and conversion) of one value of a per-trial field of `resources`:
        written in the spec, or each value of the parameter the field names."""
        if key == "mem":
            return lambda v, p: str(self.typed(v, p, lambda x: _is_int(x) or (
                isinstance(x, str) and re.fullmatch(r"\d+[KMGT]?B?", x, re.I)),
                "a size such as 4G or 4000M"))
        if key == "time":
            return lambda v, p: self.typed(str(v), p, lambda x: SLURM_TIME_RE.fullmatch(x),
                                           "a Slurm time such as 02:00:00, 1-00:00:00 or 90 "
                                           "(minutes)")
        return lambda v, p: self.integer(v, p, 0 if key == "gpus_per_node" else 1)

    def slurm_name(self, value: Any, path: KeyPath, what: str) -> str:
        self.check(path, checks.slurm_name(self.string(value, path), what))
        return value

    def sbatch_extra(self, value: Any, path: KeyPath) -> tuple[str, ...]:
        self.typed(value, path, lambda v: isinstance(v, list) and all(
            isinstance(s, str) for s in v), "a list of sbatch options such as "
                                              "['--constraint=a100']")
        for i, option in enumerate(value):
            self.check(path + (i,), checks.sbatch_option(option))
        return tuple(value)

    def retries(self, value: Any, path: KeyPath) -> Retries:
        if _is_int(value):
            return Retries(max=self.integer(value, path, 0))
        codes = tuple(k for k in value if isinstance(k, str) and EXIT_CODE_RULE_RE.fullmatch(k)) \
            if isinstance(value, dict) else ()
        d = self.mapping(value, path, RETRY_KEYS + codes)
        top = Retries(max=self.optional(d, "max", path, lambda v, p: self.integer(v, p, 0), 0))
        rules = []
        for key in d:
            if key == "max" or d[key] is None:
                continue
            base = top.rule("exit" if key in codes else key)[1]
            rules.append((key, self.retry_rule(d[key], path + (key,), base)))
        return Retries(max=top.max, rules=tuple(rules))

    def retry_rule(self, value: Any, path: KeyPath, base: RetryRule) -> RetryRule:
        """`{max: 2, mem_factor: 1.5}` or just `2`; keys not given keep the class's default."""
        if _is_int(value):
            return RetryRule(max=self.integer(value, path, 0), mem_factor=base.mem_factor,
                               time_factor=base.time_factor, exclude_node=base.exclude_node)
        d = self.mapping(value, path, RETRY_RULE_KEYS)

        def factor(v: Any, p: KeyPath) -> float:
            return float(self.typed(v, p, lambda x: _is_number(x) and 1 <= x <= 100,
                                    "a number from 1 to 100"))

        return RetryRule(
            max=self.optional(d, "max", path, lambda v, p: self.integer(v, p, 0), base.max),
            mem_factor=self.optional(d, "mem_factor", path, factor, base.mem_factor),
            time_factor=self.optional(d, "time_factor", path, factor, base.time_factor),
            exclude_node=self.optional(d, "exclude_node", path, lambda v, p: self.typed(
                v, p, lambda x: isinstance(x, bool), "true or false"), base.exclude_node))

    def checkpoints(self, value: Any, path: KeyPath) -> Checkpoints:
        d = self.mapping(value, path, CHECKPOINT_KEYS)
        keep_all = d.get("keep_last") == "all"  # the default before issue 38: every one
        if keep_all:
            d = {k: v for k, v in d.items() if k != "keep_last"}
        counts = {k: self.optional(d, k, path, lambda v, p, k=k: self.integer(v, p, 1) if
                                   k != "keep_last" or _is_int(v) else self.typed(
                                       v, p, lambda x: False, "an integer >= 1 or all"))
                  for k in ("keep_last", "keep_best", "keep_trials")}
        signal = self.optional(d, "signal", path, lambda v, p: self.choice(
            v.upper().removeprefix("SIG") if isinstance(v, str) else v, p, SIGNALS, "signal"))
        before = self.optional(d, "signal_before", path, self.duration, 120.0)
        if before > 65535:
            raise self.fail(path + ("signal_before",), "expected at most 65535 seconds (Slurm's "
                                                       f"limit for --signal); got {before:g}")
        return Checkpoints(**counts, signal=signal, signal_before=before, keep_all=keep_all)

    def launcher(self, value: Any, path: KeyPath) -> Launcher:
        if isinstance(value, str):
            value = {"type": value}
        d = self.mapping(value, path, LAUNCHER_KEYS)
        kind = self.choice(d.get("type", "none"), path + ("type",), self.vocabulary.launchers,
                           "launcher")
        return Launcher(type=kind, args=self.optional(d, "args", path, self.strings, ()))

    def container(self, value: Any, path: KeyPath) -> Container:
        d = self.mapping(value, path, CONTAINER_KEYS)
        runtime = self.choice(d.get("runtime", "none"), path + ("runtime",),
                              self.vocabulary.runtimes,
                              "container runtime")
        image = self.optional(d, "image", path, self.string)
        if runtime != "none" and d.get("image") is None:
            raise self.fail(path, f"missing required key 'image' for the {runtime} runtime")
        env = self.optional(d, "env", path, self.strings, ())
        for i, name in enumerate(env):
            if not ENV_NAME_RE.fullmatch(name):
                raise self.fail(path + ("env", i), f"expected an environment variable name; "
                                                   f"got {checks.shown(name)}")
        return Container(runtime=runtime, image=image, env=env,
                           binds=self.optional(d, "binds", path, self.strings, ()),
                           args=self.optional(d, "args", path, self.strings, ()))

    def placement(self, value: Any, path: KeyPath) -> Placement:
        if isinstance(value, str):
            value = {"policy": value}
        d = self.mapping(value, path, PLACEMENT_KEYS)
        return Placement(
            policy=self.choice(d.get("policy", "leaf-switch"), path + ("policy",),
                               PLACEMENT_POLICIES, "placement policy"),
            max_wait=self.optional(d, "max_wait", path, self.duration, 300.0),
            topology=self.optional(d, "topology", path, self.path),
            mode=self.choice(d.get("mode", "auto"), path + ("mode",), PLACEMENT_MODES,
                             "placement mode"),
            replan_after=self.optional(d, "replan_after", path, self.duration, 30.0))

    def choice(self, value: Any, path: KeyPath, allowed: tuple[str, ...], what: str) -> str:
        if value not in allowed:
            close = difflib.get_close_matches(str(value), allowed, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise self.fail(path, f"unknown {what} {checks.shown(value)}; expected one of "
                                  f"{', '.join(allowed)}{hint}")
        return value

    def strings(self, value: Any, path: KeyPath) -> tuple[str, ...]:
        self.typed(value, path, lambda v: isinstance(v, list) and all(
            isinstance(x, str) and x for x in v), "a list of strings")
        return tuple(self.string(x, path + (i,)) for i, x in enumerate(value))

    def duration(self, value: Any, path: KeyPath) -> float:
        try:
            return durations.parse_duration(value)
        except (ValueError, TypeError):
            raise self.fail(path, f"expected a positive duration such as 90, '90s', '10m', '2h' "
                                  f"or '01:30:00'; got {checks.shown(value)}") from None


def _kind(v: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean",
            int: "an integer", float: "a number",
            type(None): "nothing"}.get(type(v), type(v).__name__)

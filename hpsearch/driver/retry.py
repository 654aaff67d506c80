"""Failure classes and retry rules, in the spirit of PanDA's retry module.

An attempt that ends without a result gets a class (classify); the spec's `retries` gives
each class a rule (retry up to n times, raise memory or time by a factor, keep off the
nodes it ran on). decide() says whether the trial runs again; next_overrides() turns the
trial's history into the sbatch options and time factor of its next attempt. All pure: the
driver passes in what the store holds, so a resumed driver decides exactly the same.

An attempt of a resumable class (timeout, preemption, a trial that exited to be resumed, a
node failure) that saved a newer checkpoint than every attempt before it made progress: it
does not count against the rule's max, so a long training finishes through as many time
limits and requeues as it needs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from hpsearch.executors.base import Ended, EndReason
from hpsearch.spec.model import FailureClass, Resources, Retries, memory_mb
from hpsearch.trial import EXIT_RESUME

RESUMABLE: tuple[FailureClass, ...] = ("timeout", "preempted", "interrupted", "node_fail")
LAUNCH_EXIT_CODES = (126, 127)  # the shell could not run the command: not executable, not found

_BY_REASON: dict[EndReason, FailureClass] = {
    "timeout": "timeout", "out_of_memory": "out_of_memory", "node_fail": "node_fail",
    "boot_fail": "boot_fail", "preempted": "preempted", "launch_error": "launch_error",
    "lost": "lost",
    "requeued": "preempted"}  # Slurm requeued the job (scontrol requeue): same id


def classify(ended: Ended) -> FailureClass:
    """The failure class of an attempt that ended without a result. An exit 0 without a
    valid objective is `no_objective`, which the driver decides itself."""
    if ended.reason == "exited":
        if ended.exit_code == EXIT_RESUME:
            return "interrupted"
        if ended.exit_code in LAUNCH_EXIT_CODES:
            return "launch_error"
        return "exit"
    return _BY_REASON.get(ended.reason, "other")  # e.g. Slurm's cancel by someone else


@dataclass(frozen=True)
class Attempt:
    """What the retry rules need of an earlier attempt (a row of the store's attempts)."""

    number: int
    failure: FailureClass | None
    exit_code: int | None = None
    nodes: str | None = None

    @classmethod
    def from_row(cls, row: dict) -> Attempt:
        return cls(row["attempt"], row.get("failure"), row.get("exit_code"), row.get("nodes"))


def progressed(attempt: int, steps: dict[int, int]) -> bool:
    """Did `attempt` save a checkpoint past every earlier attempt's? steps: attempt -> the
    highest checkpoint step it registered (deleted checkpoints included)."""
    if attempt not in steps:
        return False
    before = [s for a, s in steps.items() if a < attempt]
    return steps[attempt] > max(before, default=-1)


def counts(attempt: Attempt, steps: dict[int, int]) -> bool:
    """Does this failed attempt count against its rule's max?"""
    return not (attempt.failure in RESUMABLE and progressed(attempt.number, steps))


@dataclass(frozen=True)
class Decision:
    retry: bool
    rule: str      # the rule applied: a class, or exit_<code>
    counted: int   # failures that count against it, this one included
    max: int

    def describe(self) -> str:
        if self.retry:
            return f"retry {self.counted} of {self.max} for {self.rule}"
        return f"no retry left for {self.rule} ({self.max} allowed)"


def decide(retries: Retries, this: Attempt, earlier: Iterable[Attempt],
           steps: dict[int, int]) -> Decision:
    """Whether the trial whose attempt `this` just failed runs again."""
    if this.failure is None:
        raise ValueError(f"attempt {this.number} has no failure class: only a failed "
                         "attempt is retried")
    name, rule = retries.rule(this.failure, this.exit_code)
    same = [a for a in [*earlier, this] if a.failure is not None
            and retries.rule(a.failure, a.exit_code)[0] == name and counts(a, steps)]
    return Decision(len(same) <= rule.max, name, len(same), rule.max)


@dataclass(frozen=True)
class Overrides:
    """What the retry rules change for the next attempt."""

    sbatch_extra: tuple[str, ...] = ()  # Slurm: --exclude, --mem, --time (they win)
    time_factor: float = 1.0            # local: multiplies executor.timeout
    notes: tuple[str, ...] = ()         # why, for the store and the log

    def describe(self) -> str | None:
        return "; ".join(self.notes) or None


def next_overrides(retries: Retries, resources: Resources, history: Iterable[Attempt],
                   steps: dict[int, int]) -> Overrides:
    """The overrides of a trial's next attempt, from all of its failed attempts: each counted
    failure multiplies memory and time by its rule's factors; nodes of attempts whose rule
    says exclude_node are excluded (with the spec's own --exclude)."""
    from hpsearch.slurm.hostlist import compress, expand

    mem, limit, excluded = 1.0, 1.0, set()
    for attempt in history:
        if attempt.failure is None:
            continue
        rule = retries.rule(attempt.failure, attempt.exit_code)[1]
        if counts(attempt, steps):
            mem *= rule.mem_factor
            limit *= rule.time_factor
        if rule.exclude_node and attempt.nodes:
            excluded.update(expand(attempt.nodes))
    res, extra, notes = resources, [], []
    if excluded:
        for option in res.sbatch_extra:
            if option.startswith("--exclude="):
                excluded.update(expand(option.split("=", 1)[1]))
        extra.append(f"--exclude={compress(sorted(excluded))}")
        notes.append(f"excluding {compress(sorted(excluded))}")
    if mem != 1.0:
        if res.mem is None:
            notes.append(f"memory x{mem:g} not applied: resources.mem is not set")
        else:
            megabytes = math.ceil(memory_mb(res.mem) * mem)
            extra.append(f"--mem={megabytes}M")
            notes.append(f"memory x{mem:g}: {megabytes}M")
    if limit != 1.0:
        if res.time is not None:
            seconds = math.ceil(slurm_time_seconds(res.time) * limit)
            extra.append(f"--time={format_slurm_time(seconds)}")
        notes.append(f"time limit x{limit:g}")
    return Overrides(tuple(extra), limit, tuple(notes))


def slurm_time_seconds(text: str) -> int:
    """A Slurm time (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS) in seconds."""
    days, _, rest = str(text).rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    if days:
        hms = (parts + [0, 0])[:3]  # D-HH, D-HH:MM, D-HH:MM:SS
    else:
        hms = {1: [0, parts[0], 0], 2: [0, *parts], 3: parts}[len(parts)]
    return int(days or 0) * 86400 + hms[0] * 3600 + hms[1] * 60 + hms[2]


def format_slurm_time(seconds: int) -> str:
    days, rest = divmod(int(seconds), 86400)
    return f"{days}-{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"

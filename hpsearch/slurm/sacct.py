"""Parsers of sacct's output (Slurm's accounting): job records with every run of a job, and
what each job used (node- and GPU-hours, for `hpsearch report` and cost objectives).

Like every parser of hpsearch.slurm.parse, each reads exactly what hpsearch.slurm.commands
asks for (the *_FORMAT constants below are the option values it passes), is tested against
output captured from the real test cluster (tests/slurm/captured/), and raises ValueError
naming the line of output that does not have the expected shape.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from hpsearch.slurm.parse import (
    FINISHED_STATES,
    JobRecord,
    keep_newest,
    normalize_state,
    parse_elapsed,
    parse_exit_code,
    parse_nodes,
    parse_time,
    parse_value,
    split_job_id,
)

# `sacct --parsable2 --noheader -X --format=SACCT_FORMAT`: Submit tells apart two jobs that
# share an id (slurmctld hands ids out again after a crash; `scontrol requeue` makes a second
# record of the same id).
SACCT_FORMAT = "JobID,JobName,State,ExitCode,NodeList,Elapsed,Submit,Start,End,Reason"
ACCOUNTING_DISABLED = "accounting storage is disabled"  # sacct's stderr, exit 1 (22.05)



def parse_sacct(text: str) -> list[JobRecord]:
    """`sacct --parsable2 --noheader --format=SACCT_FORMAT` (with or without -X) -> one
    record per job or array task.

    Step lines (`123.batch`, `123.0`, `123.extern`) are skipped: a job's exit code is the one
    on its own line. A range line (`123_[0-3%2]`: tasks not started yet, or cancelled before
    they started) becomes one record per task, in that line's state. A job id listed twice
    (`sacct -D` after a requeue, or an id slurmctld handed out again) keeps the newest.
    """
    return keep_newest(_sacct_items(text))


def parse_sacct_runs(text: str) -> dict[str, list[JobRecord]]:
    """`sacct -D --parsable2 --noheader --format=SACCT_FORMAT` -> job id -> its runs, oldest
    first: a job Slurm requeued (scontrol requeue, preemption, a node failure) keeps its id
    and gets one record per run, each with its own Submit (the requeue time), state (REQUEUED,
    PREEMPTED, NODE_FAIL...) and nodes. The newest run is the one the job is in now; an
    older record under another name is another job that had the same id (an id handed out
    again after a controller crash) and is left out. A task's own line beats a range line."""
    runs: dict[str, list[tuple[JobRecord, bool]]] = {}
    for job_id, record, from_range, _ in _sacct_items(text):
        runs.setdefault(job_id, []).append((record, from_range))
    result = {}
    for job_id, found in runs.items():
        if any(not from_range for _, from_range in found):
            found = [item for item in found if not item[1]]
        records = sorted((rec for rec, _ in found),
                         key=lambda rec: (rec.submit or datetime.min, rec.start or datetime.min))
        newest = records[-1]
        result[job_id] = [rec for rec in records[:-1]
                          if rec.name in (newest.name, "allocation")] + [newest]
    return result


def _sacct_items(text: str) -> list[tuple[str, JobRecord, bool, datetime | None]]:
    """(job id, record, expanded from a range line, submit time) of every job or task line."""
    items = []
    for number, line, row in _job_lines(text, SACCT_FORMAT):
        try:
            ids = split_job_id(row["JobID"])
            state = normalize_state(row["State"])
            finished = state in FINISHED_STATES
            exit_code, signal = parse_exit_code(row["ExitCode"]) if finished else (None, None)
            common: dict[str, Any] = dict(
                name=row["JobName"], state=state, raw_state=row["State"],
                exit_code=exit_code, signal=signal, nodes=parse_nodes(row["NodeList"]),
                reason=parse_value(row["Reason"]), submit=parse_time(row["Submit"]),
                start=parse_time(row["Start"]), end=parse_time(row["End"]),
                elapsed=parse_elapsed(row["Elapsed"]))
        except ValueError as exc:
            raise ValueError(f"sacct line {number}: {exc}: {line!r}") from None
        for job_id, array_job_id, task_id, from_range in ids:
            record = JobRecord(job_id=job_id, array_job_id=array_job_id,
                               array_task_id=task_id, **common)
            items.append((job_id, record, from_range, record.submit))
    return items


def is_accounting_disabled(stderr: str) -> bool:
    """sacct's stderr says the cluster keeps no accounting (not: the job is unknown)."""
    return ACCOUNTING_DISABLED in stderr


# -- usage (node- and GPU-hours, for `hpsearch report`) ------------------------------------

# `sacct --parsable2 --noheader -X --format=SACCT_USAGE_FORMAT`: ElapsedRaw is whole seconds;
# GPUs appear only in AllocTRES ("billing=1,cpu=1,gres/gpu=2,mem=1000M,node=1").
SACCT_USAGE_FORMAT = "JobID,State,ElapsedRaw,NNodes,AllocTRES,Submit"


@dataclass(frozen=True)
class JobUsage:
    """What one job or array task used: seconds it ran, nodes, GPUs and CPUs allocated
    (0 while it has no allocation)."""

    job_id: str
    state: str
    elapsed: float | None
    nodes: int
    gpus: int
    cpus: int


def parse_tres(text: str) -> dict[str, str]:
    """"cpu=1,gres/gpu=2,mem=1000M" -> {"cpu": "1", "gres/gpu": "2", "mem": "1000M"}."""
    out = {}
    for item in text.strip().split(","):
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"not a TRES item: {item!r}")
        out[key] = value
    return out


def _tres_count(tres: dict[str, str], key: str) -> int:
    value = tres.get(key, "0")
    if not value.isdigit():
        raise ValueError(f"TRES {key}={value!r} is not a count")
    return int(value)


def parse_sacct_usage(text: str) -> list[JobUsage]:
    """`sacct --parsable2 --noheader -X --format=SACCT_USAGE_FORMAT` -> one record per job or
    array task that has a line of its own. Steps and range lines (tasks not started, which
    used nothing) are skipped; a job id listed twice keeps the newest submit."""
    items = []
    for number, line, row in _job_lines(text, SACCT_USAGE_FORMAT):
        try:
            ids = split_job_id(row["JobID"])
            if ids[0][3]:  # a range of tasks not started
                continue
            tres = parse_tres(row["AllocTRES"])
            elapsed = row["ElapsedRaw"].strip()
            nnodes = row["NNodes"].strip()
            record = JobUsage(job_id=ids[0][0], state=normalize_state(row["State"]),
                              elapsed=float(elapsed) if elapsed.isdigit() else None,
                              nodes=int(nnodes) if nnodes.isdigit() else 0,
                              gpus=_tres_count(tres, "gres/gpu"),
                              cpus=_tres_count(tres, "cpu"))
            submit = parse_time(row["Submit"])
        except ValueError as exc:
            raise ValueError(f"sacct line {number}: {exc}: {line!r}") from None
        items.append((record.job_id, record, False, submit))
    return keep_newest(items)


# -- peaks (scouts: what a finished job took, docs/brokerage.md#scouts) ---------------------

# `sacct --parsable2 --noheader --format=SACCT_PEAK_FORMAT` (steps included): the job's own
# line has its run time; MaxRSS is per step (the batch script, each srun), where the
# cluster's jobacct_gather sampled it (not for a step shorter than JobAcctGatherFrequency).
SACCT_PEAK_FORMAT = "JobID,ElapsedRaw,MaxRSS"
_RSS = re.compile(r"^(\d+(?:\.\d+)?)([KMGT]?)$")


@dataclass(frozen=True)
class Peak:
    """A job's run time (seconds) and the largest MaxRSS of its steps (MB; None: none
    recorded)."""

    elapsed: float | None
    max_rss_mb: float | None


def parse_sacct_peaks(text: str) -> dict[str, Peak]:
    """sacct's lines of jobs and their steps -> {job id: Peak}."""
    elapsed: dict[str, float | None] = {}
    rss: dict[str, float] = {}
    for line in text.splitlines():
        fields = line.split("|")
        if len(fields) < 3 or not fields[0]:
            continue
        job, dot, _ = fields[0].partition(".")
        if not dot:
            seconds = fields[1].strip()
            elapsed[job] = float(seconds) if seconds.isdigit() else None
            continue
        found = _RSS.match(fields[2].strip())
        if found:
            size = float(found.group(1)) * {"": 1 / 1024 ** 2, "K": 1 / 1024, "M": 1,
                                            "G": 1024, "T": 1024 ** 2}[found.group(2)]
            rss[job] = max(rss.get(job, 0.0), size)
    return {job: Peak(seconds, rss.get(job)) for job, seconds in elapsed.items()}


def _job_lines(text: str, fmt: str) -> Iterator[tuple[int, str, dict[str, str]]]:
    """(line number, line, field -> value) of each job or task line of `sacct --parsable2
    --format=fmt` output; steps (an id with a '.') and blank lines are left out. A '|' in a
    job name (the one free-text field, second of SACCT_FORMAT) is kept in the name."""
    names = fmt.split(",")
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split("|")
        extra = len(fields) - len(names)
        if extra > 0 and names[1] == "JobName":
            fields = [fields[0], "|".join(fields[1:2 + extra]), *fields[2 + extra:]]
        if len(fields) != len(names):
            raise ValueError(f"sacct line {number}: expected {len(names)} '|'-separated "
                             f"fields ({fmt}), got {len(fields)}: {line!r}")
        row = dict(zip(names, fields, strict=True))
        if "." not in row["JobID"]:
            yield number, line, row

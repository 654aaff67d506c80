"""Parsers of Slurm's output: pure functions from the text a command printed to typed records.

Each parser reads exactly what hpsearch.slurm.commands asks for (the *_FORMAT constants
below are the option values it passes), and is tested against output captured from the real
test cluster (tests/slurm/captured/, whose README says which command made each file).
Output that does not have the expected shape raises ValueError naming the line. sacct's
output has a module of its own (hpsearch.slurm.sacct); the records and value parsers here
are the ones every command's output shares.

Slurm prints times in the cluster's local time without a zone ("2026-11-26T05:08:54");
they come back as naive datetimes. Commands set SLURM_TIME_FORMAT=standard so that a user's
own setting cannot change that.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from hpsearch.slurm.hostlist import expand

# `squeue -h -o SQUEUE_FORMAT`: job or task id, long state, reason, allocated nodes.
SQUEUE_FORMAT = "%i|%T|%r|%N"
# `squeue -h -s -j JOB -o SQUEUE_STEPS_FORMAT`: a job's steps, step id and step name (last:
# a step is named after its command unless srun was given --job-name).
SQUEUE_STEPS_FORMAT = "%i|%j"
# `sinfo -h -N -o SINFO_NODES_FORMAT`: one line per node and partition; %E is the free-text
# drain/down reason, last so that a '|' in it cannot shift the other fields.
SINFO_NODES_FORMAT = "%N|%T|%P|%E"

# States after which a job will not run again (SPECIAL_EXIT: requeued held, by policy).
FINISHED_STATES = frozenset({
    "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED",
    "BOOT_FAIL", "DEADLINE", "REVOKED", "SPECIAL_EXIT"})

INVALID_JOB_ID = "Invalid job id specified"  # squeue/scontrol/scancel of a job slurmctld forgot

_NO_VALUE = frozenset({"", "None", "none", "Unknown", "N/A", "(null)", "INVALID"})
# "123", "123_4", "123_[0-3%2]" (tasks not yet started), "123+1" (a heterogeneous component).
_JOB_ID = re.compile(r"^(?P<job>\d+)(?:_(?P<task>\d+)|_\[(?P<tasks>[^\]]+)\])?(?P<het>\+\d+)?$")
_ELAPSED = re.compile(r"^(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+(?:\.\d+)?)$")
_STATE_WORD = re.compile(r"[A-Za-z_]+")
_R = TypeVar("_R")


@dataclass(frozen=True)
class JobRecord:
    """One job, or one task of an array, as sacct (or scontrol) reports it.

    `job_id` is as Slurm prints it: "123" or "123_4" (array task 4 of job 123). `state` is
    the bare upper-case word ("CANCELLED"); `raw_state` what Slurm printed ("CANCELLED by 0").
    `exit_code` and `signal` come from the job's own ExitCode ("3:0" = exit 3, no signal) and
    are None until the job has finished. Times are naive local datetimes, None where Slurm
    says Unknown/None; `elapsed` is in seconds.
    """

    job_id: str
    array_job_id: str | None
    array_task_id: int | None
    name: str
    state: str
    raw_state: str
    exit_code: int | None
    signal: int | None
    nodes: tuple[str, ...]
    reason: str | None
    submit: datetime | None
    start: datetime | None
    end: datetime | None
    elapsed: float | None

    @property
    def finished(self) -> bool:
        """The job will not run again (see FINISHED_STATES)."""
        return self.state in FINISHED_STATES


@dataclass(frozen=True)
class QueueRecord:
    """One job or array task in slurmctld's queue (squeue)."""

    job_id: str
    array_job_id: str | None
    array_task_id: int | None
    state: str
    reason: str | None  # why it waits (Resources, Priority, ...); None while it runs
    nodes: tuple[str, ...]


@dataclass(frozen=True)
class NodeState:
    """One node as sinfo reports it, over all its partitions.

    `state` is the base word (IDLE, MIXED, ALLOCATED, DRAINING, DRAINED, DOWN, ...), without
    sinfo's flag characters, which are kept in `flags` (`*` not responding, `~` powered off,
    `#` powering up, `!`/`%` powering down, `$` maintenance, `@` reboot pending, `^` reboot
    issued, `-` planned by the backfill scheduler).
    """

    name: str
    state: str
    raw_state: str
    flags: frozenset[str]
    partitions: tuple[str, ...]
    reason: str | None

    @property
    def available(self) -> bool:
        """Can take a new job now: idle or mixed, and not draining, down, unreachable,
        powered off, in maintenance or rebooting."""
        return self.state in ("IDLE", "MIXED") and not (self.flags & _UNAVAILABLE_FLAGS)


_STATE_FLAGS = "*~#!%$@^-"
# Flags that take a node out of use; "-" (planned) does not: the node is idle meanwhile.
# Compound states ("idle+drain") put the extra words here too, upper-case.
_UNAVAILABLE_FLAGS = frozenset(
    set("*~#!%$@^") | {"DRAIN", "DRAINING", "DRAINED", "DOWN", "FAIL", "FAILING", "MAINT",
                       "RESERVED", "NOT_RESPONDING", "POWERED_DOWN", "POWERING_DOWN",
                       "POWERING_UP", "POWER_DOWN", "REBOOT_REQUESTED", "REBOOT_ISSUED",
                       "INVAL", "INVALID", "UNKNOWN", "FUTURE"})


@dataclass(frozen=True)
class Switch:
    """One switch of `scontrol show topology`: level 0 switches hold nodes, higher ones
    hold switches (and list every node below them)."""

    name: str
    level: int
    nodes: tuple[str, ...]
    switches: tuple[str, ...]


# -- small value parsers -------------------------------------------------------------------

def normalize_state(raw: str) -> str:
    """"CANCELLED by 0" -> "CANCELLED", "running" -> "RUNNING", "idle*" -> "IDLE"."""
    match = _STATE_WORD.match(raw.strip())
    if not match:
        raise ValueError(f"no state word in {raw!r}")
    return match.group(0).upper()


def parse_time(text: str) -> datetime | None:
    """"2026-11-26T05:08:54" -> datetime; Unknown/None/empty -> None."""
    text = text.strip()
    if text in _NO_VALUE:
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"not a Slurm time: {text!r}") from None


def parse_elapsed(text: str) -> float | None:
    """"1-02:03:04", "00:01:26", "01:26", "00:00.123" -> seconds; empty/INVALID -> None."""
    text = text.strip()
    if text in _NO_VALUE:
        return None
    match = _ELAPSED.match(text)
    if not match:
        raise ValueError(f"not a Slurm duration: {text!r}")
    days, hours, minutes, seconds = match.groups()
    return (int(days or 0) * 86400 + int(hours or 0) * 3600 + int(minutes) * 60
            + float(seconds))


def parse_exit_code(text: str) -> tuple[int | None, int | None]:
    """"3:0" -> (3, 0): exit code, then the signal that ended it; empty -> (None, None)."""
    text = text.strip()
    if text in _NO_VALUE:
        return None, None
    code, sep, signal = text.partition(":")
    if not code.isdigit() or (sep and not signal.isdigit()):
        raise ValueError(f"not a Slurm exit code: {text!r}")
    return int(code), int(signal) if sep else None


def expand_array_tasks(spec: str) -> list[int]:
    """The task ids of an array range as squeue/sacct print it: "0-3%2" -> [0, 1, 2, 3],
    "1,4-5" -> [1, 4, 5], "0-15:4" -> [0, 4, 8, 12] (the `%N` throttle is dropped)."""
    body = spec.split("%", 1)[0]
    tasks: list[int] = []
    for item in body.split(","):
        match = re.fullmatch(r"(\d+)(?:-(\d+)(?::(\d+))?)?", item.strip())
        if not match:
            raise ValueError(f"bad array task range {item!r} in {spec!r}")
        lo = int(match.group(1))
        hi = int(match.group(2) or lo)
        step = int(match.group(3) or 1)
        if hi < lo or step < 1:
            raise ValueError(f"bad array task range {item!r} in {spec!r}")
        tasks.extend(range(lo, hi + 1, step))
    return list(dict.fromkeys(tasks))


def parse_nodes(text: str) -> tuple[str, ...]:
    """A node list as Slurm prints it ("node[1-3]") -> each node; none assigned -> ()."""
    text = text.strip()
    if text in _NO_VALUE or text == "None assigned":
        return ()
    return tuple(expand(text))


def parse_value(text: str) -> str | None:
    """A free-text field, stripped; None where Slurm prints no value (None, Unknown, ...)."""
    text = text.strip()
    return None if text in _NO_VALUE else text


def array_task(job_id: str) -> tuple[str, int] | None:
    """("123", 4) for the array task "123_4"; None for any other id."""
    match = _JOB_ID.match(job_id)
    if match is None or match["task"] is None or match["het"]:
        return None
    return match["job"], int(match["task"])


def split_job_id(job_id: str) -> list[tuple[str, str | None, int | None, bool]]:
    """A job-level id -> [(job id, array job id, task id, expanded from a range)]."""
    match = _JOB_ID.match(job_id)
    if not match:
        raise ValueError(f"not a job id: {job_id!r}")
    job, task, tasks, het = match.group("job", "task", "tasks", "het")
    if tasks is not None:
        return [(f"{job}_{t}", job, t, True) for t in expand_array_tasks(tasks)]
    if task is not None:
        return [(job_id, job, int(task), False)]
    return [(job + (het or ""), None, None, False)]


def keep_newest(items: list[tuple[str, _R, bool, datetime | None]]) -> list[_R]:
    """(job id, record, expanded from a range line, submit time) -> one record per job id:
    a task's own line beats one expanded from a range line (sacct lags: `123_[2-5]` may
    still include task 2 that has a line of its own), and among equals the newer submit
    time wins, then the later line. Order: where each job id first appeared."""
    chosen: dict[str, tuple[_R, bool, datetime | None]] = {}
    for job_id, record, from_range, submit in items:
        old = chosen.get(job_id)
        if old is not None:
            _, old_from_range, old_submit = old
            if from_range and not old_from_range:
                continue
            if (from_range == old_from_range and submit is not None
                    and old_submit is not None and submit < old_submit):
                continue
        chosen[job_id] = (record, from_range, submit)
    return [record for record, _, _ in chosen.values()]


def is_invalid_job_id(stderr: str) -> bool:
    """squeue/scontrol/scancel's stderr says slurmctld does not know the job (any more)."""
    return INVALID_JOB_ID in stderr


# -- squeue --------------------------------------------------------------------------------

def parse_squeue(text: str) -> list[QueueRecord]:
    """`squeue -h -o SQUEUE_FORMAT` -> one record per job or array task; a pending array
    line (`85_[0-3]`, `38_[3,5%2]`) becomes one record per task."""
    items: list[tuple[str, QueueRecord, bool, datetime | None]] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split("|")
        if len(fields) != 4:
            raise ValueError(f"squeue line {number}: expected 4 '|'-separated fields "
                             f"({SQUEUE_FORMAT}), got {len(fields)}: {line!r}")
        job_id, state, reason, nodes = fields
        try:
            ids = split_job_id(job_id)
            common: dict[str, Any] = dict(state=normalize_state(state), reason=parse_value(reason),
                                          nodes=parse_nodes(nodes))
        except ValueError as exc:
            raise ValueError(f"squeue line {number}: {exc}: {line!r}") from None
        for one_id, array_job_id, task_id, from_range in ids:
            record = QueueRecord(job_id=one_id, array_job_id=array_job_id,
                                 array_task_id=task_id, **common)
            items.append((one_id, record, from_range, None))
    return keep_newest(items)


def parse_squeue_steps(text: str) -> dict[str, str]:
    """`squeue -h -s -j JOB -o SQUEUE_STEPS_FORMAT` -> {step name: step id ("123.4")}; of
    steps that share a name, the first one started (the lowest step number). The batch
    and extern steps are left out."""
    steps: dict[str, tuple[int, str]] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        step_id, sep, name = line.partition("|")
        job, dot, step = step_id.partition(".")
        if not sep or not dot or not job.isdigit():
            raise ValueError(f"squeue line {number}: expected JOB.STEP|NAME "
                             f"({SQUEUE_STEPS_FORMAT}), got {line!r}")
        if step.isdigit() and (name not in steps or int(step) < steps[name][0]):
            steps[name] = (int(step), step_id)
    return {name: step_id for name, (_, step_id) in steps.items()}


# -- sinfo ---------------------------------------------------------------------------------

def parse_node_state(raw: str) -> tuple[str, frozenset[str]]:
    """"drained*" -> ("DRAINED", {"*"}); "idle+drain" -> ("IDLE", {"DRAIN"})."""
    text = raw.strip()
    match = _STATE_WORD.match(text)
    if not match:
        raise ValueError(f"no node state in {raw!r}")
    rest = text[match.end():]
    flags = {word.upper() for word in re.findall(r"\+([A-Za-z_]+)", rest)}
    leftover = re.sub(r"\+[A-Za-z_]+", "", rest)
    if any(ch not in _STATE_FLAGS for ch in leftover):
        raise ValueError(f"unknown node state flag in {raw!r}")
    return match.group(0).upper(), frozenset(flags | set(leftover))


def parse_sinfo_nodes(text: str) -> list[NodeState]:
    """`sinfo -h -N -o SINFO_NODES_FORMAT` (or without the trailing `|%E`) -> one NodeState
    per node, its partitions merged (sinfo prints a node once per partition; the default
    partition's `*` is dropped)."""
    nodes: dict[str, NodeState] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split("|", 3)
        if len(fields) < 3:
            raise ValueError(f"sinfo line {number}: expected '|'-separated fields "
                             f"({SINFO_NODES_FORMAT}), got {len(fields)}: {line!r}")
        name, raw_state, partition = (f.strip() for f in fields[:3])
        reason = parse_value(fields[3]) if len(fields) == 4 else None
        if not name:
            raise ValueError(f"sinfo line {number}: no node name: {line!r}")
        try:
            state, flags = parse_node_state(raw_state)
        except ValueError as exc:
            raise ValueError(f"sinfo line {number}: {exc}: {line!r}") from None
        partition = partition.rstrip("*")
        old = nodes.get(name)
        if old is not None:
            if partition and partition not in old.partitions:
                nodes[name] = NodeState(old.name, old.state, old.raw_state, old.flags,
                                        old.partitions + (partition,), old.reason or reason)
            continue
        nodes[name] = NodeState(name, state, raw_state, flags,
                                (partition,) if partition else (), reason)
    return list(nodes.values())


# -- scontrol ------------------------------------------------------------------------------

# In the multi-line form these keys have a line of their own, and their value is the whole
# rest of the line, spaces and '=' included (a script's arguments, a path, a free reason).
_WHOLE_LINE_KEYS = ("Command", "WorkDir", "StdErr", "StdIn", "StdOut", "Comment",
                    "AdminComment", "SystemComment", "OS", "Reason")
_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_:/.]*$")


def _key_values(line: str, number: int, into: dict[str, str], last_key: str | None,
                ) -> str | None:
    """Adds the `Key=value` words of one line to `into`. A word without '=' continues the
    previous value (values with spaces: `OS=Linux 6.1 #1 SMP`, `Reason=(ReqNodeNotAvail,
    UnavailableNodes:node3)`); in one-line output a space then `a=b` inside a value cannot
    be told from a new key, which is why commands use the multi-line form."""
    stripped = line.strip()
    key, sep, rest = stripped.partition("=")
    if sep and key in _WHOLE_LINE_KEYS and line[:1].isspace():
        into[key] = rest
        return key
    for word in stripped.split():
        key, sep, value = word.partition("=")
        if sep and _KEY.match(key):
            into[key] = value
            last_key = key
        elif last_key is not None:
            into[last_key] += " " + word
        else:
            raise ValueError(f"scontrol line {number}: expected Key=value, got {word!r}: "
                             f"{line!r}")
    return last_key


def parse_scontrol_records(text: str) -> list[dict[str, str]]:
    """`scontrol show job|node ...`, multi-line or `-o` one-line form -> one dict per record
    (a job, an array task, a node). A record begins on an unindented line; its indented
    lines continue it."""
    records: list[dict[str, str]] = []
    last_key: str | None = None
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if not line[:1].isspace():
            records.append({})
            last_key = None
        elif not records:
            raise ValueError(f"scontrol line {number}: indented line before any record: "
                             f"{line!r}")
        last_key = _key_values(line, number, records[-1], last_key)
    return records


def parse_scontrol_job(text: str) -> dict[str, str]:
    """`scontrol show job ID` (or `-o`) -> its Key=value fields, all values as printed.
    Where several records are printed (an array job's tasks) the first; use
    parse_scontrol_records for all of them."""
    records = parse_scontrol_records(text)
    if not records or "JobId" not in records[0]:
        raise ValueError(f"no job record (JobId=...) in scontrol output: {text[:200]!r}")
    return records[0]


def parse_scontrol_node(text: str) -> dict[str, str]:
    """`scontrol show node NAME` (or `-o`) -> its Key=value fields."""
    records = parse_scontrol_records(text)
    if not records or "NodeName" not in records[0]:
        raise ValueError(f"no node record (NodeName=...) in scontrol output: {text[:200]!r}")
    return records[0]


def job_records_from_scontrol(fields: dict[str, str]) -> list[JobRecord]:
    """One `scontrol show job` record -> JobRecords, as parse_sacct would give them: a task
    of an array becomes `ArrayJobId_ArrayTaskId`, a pending range one record per task."""
    try:
        if "ArrayJobId" in fields and "ArrayTaskId" in fields:
            job_id = f"{fields['ArrayJobId']}_{fields['ArrayTaskId']}"
            if not fields["ArrayTaskId"].isdigit():
                job_id = f"{fields['ArrayJobId']}_[{fields['ArrayTaskId']}]"
        else:
            job_id = fields["JobId"]
        raw_state = fields["JobState"]
        state = normalize_state(raw_state)
        finished = state in FINISHED_STATES
        exit_code, signal = (parse_exit_code(fields.get("ExitCode", "")) if finished
                             else (None, None))
        common: dict[str, Any] = dict(
            name=fields.get("JobName", ""), state=state, raw_state=raw_state,
            exit_code=exit_code, signal=signal, nodes=parse_nodes(fields.get("NodeList", "")),
            reason=parse_value(fields.get("Reason", "")),
            submit=parse_time(fields.get("SubmitTime", "")),
            start=parse_time(fields.get("StartTime", "")),
            end=parse_time(fields.get("EndTime", "")),
            elapsed=parse_elapsed(fields.get("RunTime", "")))
        ids = split_job_id(job_id)
    except (KeyError, ValueError) as exc:
        raise ValueError(f"scontrol job record {fields.get('JobId', '?')}: {exc}") from None
    return [JobRecord(job_id=one_id, array_job_id=array_job_id, array_task_id=task_id,
                      **common) for one_id, array_job_id, task_id, _ in ids]


def parse_topology(text: str) -> list[Switch]:
    """`scontrol show topology` -> its switches, node and switch lists expanded. Empty
    output (no topology plugin) -> []."""
    switches = []
    for number, record in enumerate(parse_scontrol_records(text), 1):
        try:
            switches.append(Switch(name=record["SwitchName"], level=int(record["Level"]),
                                   nodes=parse_nodes(record.get("Nodes", "")),
                                   switches=parse_nodes(record.get("Switches", ""))))
        except (KeyError, ValueError) as exc:
            raise ValueError(f"scontrol show topology record {number}: bad or missing "
                             f"{exc}: {record}") from None
    return switches


# -- sbatch --------------------------------------------------------------------------------

def parse_sbatch_parsable(text: str) -> str:
    """`sbatch --parsable` stdout -> the job id ("71", or "71;cluster" -> "71")."""
    return parse_sbatch_answer(text)[0]


def parse_sbatch_answer(text: str) -> tuple[str, str | None]:
    """`sbatch --parsable` stdout -> (job id, cluster): "71" -> ("71", None); with
    --clusters (-M) sbatch names the cluster that took the job, "71;hpsearch2" ->
    ("71", "hpsearch2"), even where that is the local one."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    match = re.fullmatch(r"(\d+)(?:;(\S+))?", lines[-1]) if lines else None
    if not match:
        raise ValueError(f"sbatch --parsable printed no job id: {text!r}")
    return match.group(1), match.group(2)


# -- sacctmgr ------------------------------------------------------------------------------

def parse_cluster_names(text: str) -> list[str]:
    """`sacctmgr -n -P list clusters format=cluster` -> the cluster names, in its order."""
    names = []
    for number, line in enumerate(text.splitlines(), 1):
        name = line.strip()
        if not name:
            continue
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]*", name):
            raise ValueError(f"sacctmgr line {number}: not a cluster name: {line!r}")
        names.append(name)
    return names


def parse_partitions_up(text: str) -> dict[str, str]:
    """`sinfo -h -o '%P|%a'` -> partition (the default one keeps its `*`) -> availability
    (up, down, drain, inact). ValueError on a line of another shape."""
    found: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        name, bar, state = line.strip().partition("|")
        if not bar or not name:
            raise ValueError(f"sinfo line {number}: expected PARTITION|AVAIL, got {line!r}")
        found[name] = state
    return found

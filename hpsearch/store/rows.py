"""Typed rows read from the store."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Any, Final, Literal

# A trial's state (mypy checks each use: a misspelt state is an error, strict_equality on).
TrialState = Literal["queued", "submitting", "running", "completed", "failed", "cancelled",
                     "pruned", "paused"]
# Waiting for a slot; written ahead of its launch (write-ahead: the store holds it before
# the executor starts it); started by the executor.
QUEUED: Final = "queued"
SUBMITTING: Final = "submitting"
RUNNING: Final = "running"
# Ended with its objective; ended without one after its last attempt; cancelled by the user
# before it ended; stopped early by the pruner.
COMPLETED: Final = "completed"
FAILED: Final = "failed"
CANCELLED: Final = "cancelled"
PRUNED: Final = "pruned"
# Promotion mode: a trial that ended a segment at a rung below the last and waits there for a
# promotion (a new segment). At the end of a search the ones never promoted stay paused.
PAUSED: Final = "paused"
IN_FLIGHT: tuple[TrialState, ...] = (QUEUED, SUBMITTING, RUNNING)
FINISHED: tuple[TrialState, ...] = (COMPLETED, FAILED, PRUNED)
# Finished for now: what `status`, the live view and the driver's end count as done. A paused
# trial may be promoted later, but until then it holds no slot and needs nothing.
DONE: tuple[TrialState, ...] = FINISHED + (PAUSED,)


@dataclass
class TrialRow:
    id: int
    state: TrialState
    params: dict
    objective_values: list | None
    attempt: int
    created: float
    started: float | None
    finished: float | None
    host: str | None
    pid: int | None
    pid_start: int | None
    gpus: str | None
    exit_code: int | None
    error: str | None
    trial_dir: str
    job_id: str | None
    sampler_attrs: dict
    sched_state: str | None = None   # the scheduler's word: PENDING, RUNNING, ...
    pending_reason: str | None = None
    nodes: str | None = None         # hostlist of the current attempt
    leaves: str | None = None        # leaf switches of those nodes, comma-separated
    pruner_attrs: dict = field(default_factory=dict)  # what the pruner keeps of this trial
    stop_request: dict | None = None  # early stopping decided: {step, value, pruner, time}
    site: str | None = None  # executor.sites: where the current attempt was sent

    @classmethod
    def from_db(cls, row: dict[str, Any]) -> TrialRow:
        data: dict[str, Any] = {name: row.get(name) for name in _field_names(cls)}
        data["params"] = json.loads(data["params"])
        data["objective_values"] = json.loads(data["objective_values"]) \
            if data["objective_values"] else None
        data["sampler_attrs"] = _json_object(data["sampler_attrs"])
        data["pruner_attrs"] = _json_object(data["pruner_attrs"])
        data["stop_request"] = json.loads(data["stop_request"]) if data["stop_request"] else None
        return cls(**data)

    @property
    def values(self) -> list[float]:
        """The objective values of a trial that has them (a completed one, as
        results.completed() and the reports pick them); ValueError for one without."""
        if self.objective_values is None:
            raise ValueError(f"trial {self.id} ({self.state}) has no objective values")
        return self.objective_values

    @property
    def rung(self) -> int | None:
        """Promotion mode: the rung of its current (or last) segment; None otherwise."""
        return self.pruner_attrs.get("rung") if "rungs" in self.pruner_attrs else None

    @property
    def rung_value(self) -> float | None:
        """Promotion mode: the first objective's value at that rung (what a paused trial
        waits with, and is ranked by for a promotion); None until it has reached it."""
        rung = self.rung
        return None if rung is None else self.pruner_attrs["rungs"].get(str(rung))

    @property
    def duration(self) -> float | None:
        if self.started is None:
            return None
        import time
        return (self.finished or time.time()) - self.started


@dataclass
class ExperimentRow:
    name: str
    spec_yaml: str
    spec_file: str
    base_dir: str
    strategy: str
    directions: list
    trials_requested: int
    status: str
    created: float
    updated: float
    study_attrs: dict

    @classmethod
    def from_db(cls, row: dict[str, Any]) -> ExperimentRow:
        data: dict[str, Any] = {f.name: row.get(f.name) for f in fields(cls)}
        data["directions"] = json.loads(data["directions"])
        data["study_attrs"] = json.loads(data["study_attrs"] or "{}")
        return cls(**data)


@dataclass
class CheckpointRow:
    trial: int
    step: int
    path: str                  # absolute
    bytes: int | None
    time: float | None         # when it was registered
    attempt: int | None
    metric: float | None       # the first objective metric at its step (or the last before)
    deleted: float | None      # when the checkpoint policy deleted it; None while it exists

    @classmethod
    def from_db(cls, row: dict[str, Any]) -> CheckpointRow:
        data: dict[str, Any] = {f.name: row.get(f.name) for f in fields(cls)}
        return cls(**data)


# Pilot states: written `submitting` before sbatch; `pending` with its job id; `running` once
# its heartbeat came; `ended` with why.
PILOT_SUBMITTING, PILOT_PENDING, PILOT_RUNNING, PILOT_ENDED = (
    "submitting", "pending", "running", "ended")


@dataclass
class PilotRow:
    id: int
    job_name: str
    job_id: str | None
    state: str
    nodes: str | None
    leaves: str | None
    submitted: float
    started: float | None
    ended: float | None
    reason: str | None
    site: str | None = None  # executor.sites: where it was sent
    slot_mem_mb: int | None = None  # memory of a slot the scouts sized; None: the ceiling

    @classmethod
    def from_db(cls, row: dict[str, Any]) -> PilotRow:
        data: dict[str, Any] = {f.name: row.get(f.name) for f in fields(cls)}
        return cls(**data)


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _field_names(cls: type) -> tuple[str, ...]:
    """A row class's field names, looked up once (dataclasses.fields() per row was a
    fifth of reading 10,000 trials). A dict, not functools.cache: mypy checks a dataclass
    passed to a cached function against its instances' `__hash__ = None`."""
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in fields(cls))
    return names


def _json_object(text: str | None) -> dict:
    return {} if not text or text == "{}" else json.loads(text)

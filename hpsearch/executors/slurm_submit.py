"""The sbatch side of the Slurm executor: job names, array manifests, and answers lost.

Every job is named for its experiment instance, trial and attempt (hpsearch.slurm.sbatch),
so a job whose id never reached the store is found again by name. An array's manifest (the
trial and attempt of each task) is written before its sbatch, under the array's name.

An sbatch that failed in a way that may have submitted the job all the same (a timeout, a
lost connection: transient) leaves its name *unsure*: before it is sent again it is looked
up by name, and taken if found. A limit (the user's job count) or a transient failure holds
the launch (`sbatch` returns None) and backs submits off through SlurmHealth; a permanent
refusal raises SlurmError for the executor to fail the attempt.

A manifest is read only if it is a regular file of the owner's under MAX_MANIFEST bytes
(hpsearch.store.trusted): one another user put there is passed over, as if missing, and an
event names it once.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from hpsearch.executors.base import Adoptable, Note
from hpsearch.executors.slurm_health import SlurmHealth
from hpsearch.launch.attempt import Launch
from hpsearch.slurm import sbatch as scripts
from hpsearch.slurm.failures import LIMIT, PERMANENT, TRANSIENT, SlurmError
from hpsearch.spec.model import SlurmJob
from hpsearch.store.trusted import Untrusted, read_trusted

MAX_MANIFEST = 64 << 20  # [trial, attempt] per task, ~15 bytes; MaxArraySize is at most 4M


class Submitter:
    def __init__(self, job: SlurmJob, slurm, health: SlurmHealth) -> None:
        self.job, self.slurm, self.health = job, slurm, health
        self.arrays_dir = job.experiment_dir / "slurm"
        # Slurm's own messages of array tasks, by array id: one folder per cluster, as two
        # clusters give the same ids (executor.sites)
        cluster = getattr(slurm, "cluster", None)
        self.logs_dir = self.arrays_dir if cluster is None else \
            self.arrays_dir / f"cluster-{cluster}"
        self.unsure: set[str] = set()  # names whose sbatch may have submitted them anyway
        self.max_array: int | None = None  # MaxArraySize, asked once
        self.array_cap: int | None = None  # fewer tasks per array after a limit refused one
        self.refused: set[str] = set()  # manifests not read (told once)

    # -- names ------------------------------------------------------------------------------
    def job_name(self, trial_id: int, attempt: int) -> str:
        return scripts.job_name(self.job.name, trial_id, attempt, self.job.instance)

    def array_name(self, first_trial: int, attempt: int) -> str:
        return scripts.array_name(self.job.name, first_trial, attempt, self.job.instance)

    def find_by_name(self, known: Adoptable) -> str | None:
        """The job of an attempt whose id was never stored, by its name (or its array's
        manifest), among this user's jobs since the experiment was created; else None."""
        found = self.slurm.job_id_by_name(self.job_name(known.trial_id, known.attempt),
                                          self.job.created)
        if found is not None:
            return found
        for manifest in sorted(self.arrays_dir.glob("*.json")):  # was it in an array?
            tasks = self._tasks(manifest) or []
            if (known.trial_id, known.attempt) in tasks:
                array_id = self.slurm.job_id_by_name(manifest.stem, self.job.created)
                if array_id is not None:
                    index = tasks.index((known.trial_id, known.attempt))
                    return f"{array_id.split('_')[0]}_{index}"
        return None

    def unsure_names(self, launch: Launch, first_waiting: Launch | None) -> list[str]:
        """The names under which a launch about to be dropped may have been submitted after
        all (its own job, or the array it led or was part of)."""
        names = [self.job_name(launch.trial_id, launch.attempt),
                 self.array_name(launch.trial_id, launch.attempt)]
        if first_waiting is not None:
            names.append(self.array_name(first_waiting.trial_id, first_waiting.attempt))
        return [name for name in names if name in self.unsure]

    # -- submitting -------------------------------------------------------------------------
    def sbatch(self, name: str, script: str) -> str | None:
        """Submit the job named `name`: its id, or None when Slurm cannot take it now
        (down, or a limit on the user's jobs): the caller holds it and tries again later.
        A permanent refusal raises SlurmError."""
        if name in self.unsure:
            found = self._lookup(name)
            if found != "":
                return found  # its id, or None: still unsure
        try:
            job_id = self.slurm.sbatch(script)
        except SlurmError as exc:
            if exc.kind == PERMANENT:
                raise
            if exc.kind == TRANSIENT:
                self.unsure.add(name)
            self.health.submit_failed(exc, exc.kind)
            return None
        self.health.submit_ok()
        return job_id

    def next_chunk(self, waiting: list[Launch]) -> list[Launch]:
        """The launches to submit together next: those of the first one's size (one array
        per size: per-trial resources), in order, at most MaxArraySize (asked once; a
        SlurmError if Slurm cannot say), fewer after a limit refused a larger array."""
        if self.max_array is None:
            self.max_array = self.slurm.max_array_size()
        size = (waiting[0].resources or self.job.resources) if waiting else None
        alike = [la for la in waiting if (la.resources or self.job.resources) == size]
        return alike[:min(self.max_array, self.array_cap or self.max_array)]

    def submit_chunk(self, chunk: list[Launch], waiting: list[Launch]
                     ) -> tuple[list[Launch], list[str], list[str]]:
        """sbatch one plain job (one launch) or one array: (the launches submitted, their
        job ids, tasks to cancel); ids [] when held. An array whose sbatch may have gone
        through is looked up by name first: found, it holds the launches its manifest lists,
        and the tasks of those no longer `waiting` (cancelled meanwhile) are to cancel."""
        if len(chunk) == 1:
            job_id = self.sbatch(self.job_name(chunk[0].trial_id, chunk[0].attempt),
                                 scripts.batch_script(self.job, chunk[0]))
            return chunk, [job_id] if job_id is not None else [], []
        name = self.array_name(chunk[0].trial_id, chunk[0].attempt)
        manifest = self.arrays_dir / f"{name}.json"
        if name in self.unsure:
            found = self._lookup(name)
            if found is None:
                return chunk, [], []
            if found:
                return self._adopt_array(found.split("_")[0], manifest, waiting)
        self.arrays_dir.mkdir(parents=True, exist_ok=True)
        tmp = manifest.with_suffix(".tmp")
        tmp.write_text(json.dumps([[la.trial_id, la.attempt] for la in chunk]))
        os.replace(tmp, manifest)
        throttle = self.job.executor.array_throttle or self.job.parallel
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        array_id = self.sbatch(name, scripts.array_script(self.job, chunk, throttle,
                                                          str(self.logs_dir)))
        if array_id is None:
            if self.health.submit_kind == LIMIT:
                self.array_cap = max(1, len(chunk) // 2)  # the limit counts each task
            return chunk, [], []
        return chunk, [f"{array_id.split('_')[0]}_{i}" for i in range(len(chunk))], []

    def _tasks(self, manifest: Path) -> list[tuple] | None:
        """The (trial, attempt) of each task of an array; None if its manifest is missing or
        is not one this user wrote."""
        try:
            raw = read_trusted(manifest, MAX_MANIFEST)
        except Untrusted as exc:
            if str(manifest) not in self.refused:
                self.refused.add(str(manifest))
                self.health.notes.append(Note(None, "warning",
                                              f"refused array manifest {manifest}: {exc}"))
            return None
        return [tuple(t) for t in json.loads(raw)] if raw is not None else None

    def _adopt_array(self, array_id: str, manifest: Path, waiting: list[Launch]):
        keys = self._tasks(manifest)
        if keys is None:  # which task runs which trial is unknown: cancel it, submit again
            return [], [], [array_id]
        by_key = {(la.trial_id, la.attempt): la for la in waiting}
        tasks = [(key, f"{array_id}_{i}") for i, key in enumerate(keys)]
        kept = [(by_key[key], job_id) for key, job_id in tasks if key in by_key]
        return ([la for la, _ in kept], [job_id for _, job_id in kept],
                [job_id for key, job_id in tasks if key not in by_key])

    def _lookup(self, name: str) -> str | None:
        """For a name in `unsure`: its job id, "" if Slurm holds no such job (it was never
        submitted), None if Slurm cannot tell now (it stays unsure)."""
        try:
            found = self.slurm.job_id_by_name(name, self.job.created)
        except SlurmError as exc:
            if exc.kind == PERMANENT:
                raise
            self.health.submit_failed(exc, exc.kind)
            return None
        self.unsure.discard(name)
        if found is not None:
            self.health.submit_ok()
        return found or ""

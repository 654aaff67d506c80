"""`hpsearch cancel`: stop an experiment, through its driver when one runs, else by stopping
what its in-flight trials and pilots left running and marking them cancelled."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from hpsearch.driver import slurm_job
from hpsearch.driver.session import stored_spec, with_instance
from hpsearch.errors import Conflict, HpsearchError
from hpsearch.executors.registry import facts
from hpsearch.spec.model import Executor as ExecutorSpec
from hpsearch.store import runs
from hpsearch.store.lockfile import DriverLock
from hpsearch.store.reader import Reader
from hpsearch.store.rows import CANCELLED, PILOT_ENDED, RUNNING, SUBMITTING
from hpsearch.store.runs import STORE_FILE
from hpsearch.store.store import Store


def cancel_experiment(runs_dir: Path, name: str, wait: float = 60.0) -> str:
    """Stop an experiment: signal its driver (only one proven to be it, on this host:
    DriverLock.signal_driver), or, with no driver alive, stop its recorded processes and mark
    them cancelled (taking the driver lock to write the store)."""
    exp_dir = runs.existing_experiment_dir(runs_dir, name)
    lock = DriverLock(exp_dir)
    stopped = slurm_job.stop(exp_dir, wait)
    if stopped:
        return stopped
    holder = lock.owner()
    if holder is not None and holder.alive:  # signalled only if proven to be our driver
        pid = lock.signal_driver(holder, signal.SIGTERM)
        deadline = time.monotonic() + wait
        while lock.holder() == pid and time.monotonic() < deadline:
            time.sleep(0.1)
        if lock.holder() == pid:
            raise Conflict(f"driver pid {pid} did not stop within {wait:g}s")
        return f"stopped the driver (pid {pid}); its running trials were cancelled"
    lock.acquire(private=False)  # takes over a stale lock; refuses (Conflict) one it cannot judge
    try:
        store = Store(exp_dir / STORE_FILE)
        rows = store.trials([SUBMITTING, RUNNING])
        count = _stop_orphans(rows, _grace(runs_dir, name)) \
            + _cancel_unstored_jobs(runs_dir, name, store, rows) \
            + _cancel_pilots(runs_dir, name, store)
        for row in rows:
            store.finish_attempt(row.id, row.attempt, CANCELLED, None, "cancelled")
        store.set_experiment_status("cancelled", "cancelled with no driver running")
        store.close()
        return (f"no driver was running; stopped {count} trial process group(s) or job(s) "
                f"and marked {len(rows)} trial(s) cancelled")
    finally:
        lock.release()


def _cancel_unstored_jobs(runs_dir: Path, name: str, store: Reader, rows: list) -> int:
    """Cancel the Slurm jobs of attempts whose ids a killed driver never stored, found by
    their names (this user's, this experiment instance's). Returns how many."""
    unstored = [row for row in rows if not row.job_id]
    spec = stored_spec(runs_dir, name)
    if not unstored or (not facts(spec.executor).on_slurm
                        and not any(t.job_id for t in store.trials())):
        return 0
    from hpsearch.executors.base import Adoptable
    from hpsearch.executors.slurm_health import SlurmHealth
    from hpsearch.executors.slurm_submit import Submitter
    from hpsearch.slurm.commands import Slurm
    from hpsearch.slurm.failures import retrying
    slurm = Slurm()
    submitter = Submitter(with_instance(spec, store).slurm_job(), slurm, SlurmHealth(1.0))
    found = []
    for row in unstored:
        known = Adoptable(row.id, row.attempt, Path(row.trial_dir))
        job_id = retrying(lambda: submitter.find_by_name(known))  # noqa: B023 - called at once
        if job_id:
            found.append(job_id)
    if found:
        retrying(lambda: slurm.scancel(found))
    return len(found)


def _cancel_pilots(runs_dir: Path, name: str, store: Store) -> int:
    """scancel the experiment's pilot jobs that may still be alive (by id, or by name where
    a killed driver never stored it) and record them ended. Returns how many."""
    pilots = store.pilots(live_only=True)
    if not pilots:
        return 0
    from hpsearch.slurm.commands import Slurm
    from hpsearch.slurm.failures import retrying
    slurm = Slurm()
    ids = [pilot.job_id for pilot in pilots if pilot.job_id]
    if ids:
        retrying(lambda: slurm.scancel(ids))
    for pilot in pilots:
        if not pilot.job_id:
            retrying(lambda: slurm.scancel_by_name(pilot.job_name))  # noqa: B023 - called at once
        store.update_pilot(pilot.id, state=PILOT_ENDED, ended=time.time(),
                           reason="cancelled by `hpsearch cancel` with no driver running")
    return len(pilots)


def _grace(runs_dir: Path, name: str) -> float:
    """The experiment's executor.grace (its stored spec), or the default where that spec
    cannot be read."""
    try:
        return stored_spec(runs_dir, name).executor.grace
    except (HpsearchError, OSError):
        return ExecutorSpec().grace


def _stop_orphans(rows: list, grace: float) -> int:
    """Stop what in-flight trials left running: scancel their Slurm jobs, and SIGTERM their
    local process groups, then SIGKILL what is left after `grace` seconds (the trial may
    save a checkpoint meanwhile). Returns how many it stopped."""
    from hpsearch import procs
    jobs = [row.job_id for row in rows if row.job_id]
    if jobs:
        from hpsearch.slurm.commands import Slurm
        Slurm().scancel(jobs)
    groups = []
    for row in rows:
        if row.job_id:
            continue
        pid = row.pid if procs.alive(row.pid, row.pid_start) else \
            procs.find_trial_leader(Path(row.trial_dir), row.attempt)
        if pid is not None:
            procs.signal_group(pid, signal.SIGTERM)
            groups.append(pid)
    deadline = time.monotonic() + grace
    while any(procs.group_alive(g) for g in groups) and time.monotonic() < deadline:
        time.sleep(0.1)
    for g in groups:
        procs.signal_group(g, signal.SIGKILL)
    return len(jobs) + len(groups)

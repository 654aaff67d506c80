"""A driver's resume (Driver.recover): rebuild the search from the store and take charge of
every trial the store has in flight, each attempt adopted from its executor (a running one
watched, an ended one finalized, one that never reached the executor launched again)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from hpsearch.executors.base import Adoptable, Ended, Started
from hpsearch.store import rows

if TYPE_CHECKING:
    from hpsearch.driver.loop import Driver


def recover(driver: Driver) -> None:
    """Rebuild the search from the store and take charge of every trial in flight."""
    trials = driver.store.trials()
    driver.search.rebuild(trials, driver.store.experiment().study_attrs,
                          driver.extent.warm_trials())
    driver.extent.recover(trials)
    if driver.stopper:
        driver.stopper.recover(trials)
    if driver.promoter:
        driver.promoter.recover(trials)
    driver.checkpoints.recover()
    for row in trials:
        if row.state == rows.QUEUED or row.state == rows.CANCELLED:
            driver.queue.append(row.id)
            if row.state == rows.QUEUED and driver.attempts.withdrawn(row):
                driver.unlaunched.add(row.id)
        elif row.state in (rows.SUBMITTING, rows.RUNNING):
            adopt(driver, row)
    if driver.store.experiment().status != "running":
        driver.store.set_experiment_status("running", "resumed")
    if driver.stopper:  # stops decided before the driver died, or while adopting
        driver.stopper.tell({tid: live.trial_dir for tid, live in driver.live.items()})


def adopt(driver: Driver, row: rows.TrialRow) -> None:
    """Watch a trial the store has in flight again: the executor adopts its attempt (still
    running, ended meanwhile, or never reached it: launched again as the same attempt)."""
    live = driver.trials.open(row.id, row.attempt, Path(row.trial_dir), watch=True)
    live.adopted = True
    driver.live[row.id] = live
    runs = sum(1 for a in driver.store.attempts(row.id)
               if row.job_id and a["job_id"] == row.job_id)  # Slurm requeues: same id
    outcome = driver.executor.adopt(Adoptable(row.id, row.attempt, Path(row.trial_dir),
                                              row.pid, row.pid_start, row.gpus, row.job_id,
                                              job_runs=max(1, runs), site=row.site))
    if isinstance(outcome, Started):
        if row.state == rows.SUBMITTING:
            driver.store.mark_running(row.id, row.attempt, outcome.host, outcome.pid,
                                      outcome.pid_start, outcome.gpus, outcome.job_id,
                                      site=outcome.site)
        where = (f"pid {outcome.pid}" if outcome.pid is not None else
                 f"Slurm job {outcome.job_id}" if outcome.job_id else outcome.host or "")
        driver.store.add_event("adopted", f"attempt {row.attempt} still running"
                               + (f" ({where})" if where else ""), row.id)
        driver.trials.ingest(live)
    elif isinstance(outcome, Ended):
        if row.state == rows.SUBMITTING and outcome.job_id:  # found by name: keep its id
            driver.store.mark_running(row.id, row.attempt, outcome.nodes or "", None, None,
                                      None, outcome.job_id)
        driver.finalize(outcome)
    else:  # it never reached the executor: launch that same attempt now
        del driver.live[row.id]
        driver.unlaunched.add(row.id)
        driver.queue.append(row.id)

"""Optuna plus submitit on a Slurm cluster, written as a user would: the recipe
benchmarks/peers_cluster.py measures hpsearch against.

Optuna's own way to run one study on many machines is to run the same optimisation loop in
several processes against one storage (docs: "Easy Parallelization"); on Slurm, submitit
makes each process a job. This is that, with nothing of hpsearch:

    storage = JournalStorage(JournalFileBackend("study.log"))   # a file on shared storage
    study = optuna.create_study(storage=storage, pruner=SuccessiveHalvingPruner(...))
    for config in configs: study.enqueue_trial({"config": config})
    executor = submitit.AutoExecutor(folder="jobs")
    executor.update_parameters(timeout_min=30, slurm_cpus_per_task=1)
    jobs = executor.map_array(worker, [path] * P)    # P workers, one job each
    for job in jobs: job.result()

Each worker loads the study and calls `study.optimize(objective)`: it takes the next enqueued
trial, runs its steps in-process, reports each and asks `trial.should_prune()`, and leaves once
no enqueued trial is left. A trial taken after the queue emptied (two workers raced for the
last one) is given up at once, so no configuration runs twice.

What this recipe does not do, that hpsearch does: a killed worker job leaves its trial RUNNING
for ever (no heartbeat is set here, as in Optuna's examples) and the trials it would have run
go to the other workers; a killed submitting process leaves the jobs running, and nothing
gathers them but the storage (`peers_cluster.py --kill node` measured 4 trials lost to one
node's crash; `--kill orchestrator` nothing).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _curves  # noqa: E402

ETA = 3


def storage(path: str):
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return JournalStorage(JournalFileBackend(path))


def pruner():
    import optuna

    return optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=ETA)


def create(path: str, name: str, configs: int) -> None:
    """The study, with every configuration enqueued in order 0..configs-1."""
    import optuna

    study = optuna.create_study(study_name=name, storage=storage(path), direction="minimize",
                                pruner=pruner())
    for index in range(configs):
        study.enqueue_trial({"config": index})


def run_trial(trial, w: _curves.Workload, index: int, log: _curves.StepLog) -> float:
    """Optuna's side of one trial: config `index`'s steps in this process, each reported,
    asking should_prune() after each; raises TrialPruned when told to stop."""
    import optuna

    pruned = []

    def stop() -> str | None:
        pruned.append(trial.should_prune())
        return "pruned" if pruned[-1] else None

    value = _curves.run_steps(w, index, 0, w.steps, log, lambda step, v: trial.report(v, step),
                              stop)
    if pruned and pruned[-1]:
        raise optuna.TrialPruned()
    return value


def worker(path: str, name: str, workload: list[str], log: _curves.StepLog) -> int:
    """One Slurm job: run the study's enqueued trials until none is left; returns how many
    this worker ran."""
    import optuna

    w = _curves.Workload.from_args(workload)
    study = optuna.load_study(study_name=name, storage=storage(path), pruner=pruner())
    ran = [0]

    def objective(trial: optuna.Trial) -> float:
        index = trial.suggest_int("config", 0, w.configs - 1)
        if trial.number >= w.configs:  # not an enqueued one: the queue was empty
            trial.study.stop()
            raise optuna.TrialPruned()
        ran[0] += 1
        return run_trial(trial, w, index, log)

    def stop_when_queue_is_empty(study: optuna.Study, _trial) -> None:
        if not study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)):
            study.stop()

    study.optimize(objective, callbacks=[stop_when_queue_is_empty])
    return ran[0]


def run(folder: Path, workload: list[str], log: _curves.StepLog, workers: int) -> int:
    """The whole recipe from the submitting side; returns the Slurm jobs it started."""
    import submitit

    path, name = str(folder / "study.log"), "peers"
    create(path, name, int(workload[0]))
    os.environ["PYTHONPATH"] = os.pathsep.join(   # the workers import this module
        [str(Path(__file__).resolve().parent)] + [p for p in os.environ.get(
            "PYTHONPATH", "").split(os.pathsep) if p])
    executor = submitit.AutoExecutor(folder=folder / "jobs", cluster="slurm")
    executor.update_parameters(timeout_min=30, slurm_cpus_per_task=1, slurm_mem="500M",
                               slurm_array_parallelism=workers)
    jobs = executor.map_array(worker, [path] * workers, [name] * workers,
                              [workload] * workers, [log] * workers)
    for job in jobs:
        job.result()
    return len(jobs)

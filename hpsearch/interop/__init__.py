"""hpsearch's store seen as other tools see experiments: Optuna, TensorBoard, MLflow.

store_view (one consistent, typed, read-only view of a store), optuna_trials (its trials as
Optuna FrozenTrials), trial_times (a trial's times over all its attempts); the mirrors,
written again with only what changed: optuna_mirror (an Optuna study, for `hpsearch optuna`
and `dashboard`), tensorboard_mirror, mlflow_mirror, and follow (the `--follow` loop they
share).

Everything here reads the store through hpsearch.store's Reader (read-only): the driver stays
the store's only writer. A mirror writes only into a storage of its own.
"""

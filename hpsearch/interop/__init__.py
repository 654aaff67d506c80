"""hpsearch's store seen as other tools see experiments (Optuna's FrozenTrials and studies).

Everything here reads the store through hpsearch.store's Reader (read-only): the driver stays
the store's only writer. A mirror (hpsearch.interop.optuna_mirror) writes only into a storage
of its own.
"""

"""hpsearch: crash-safe hyperparameter search on Slurm clusters and laptops."""

__version__ = "0.1.0"


def load(name, runs_dir=None):
    """An experiment's spec, trials, metrics and checkpoints, read-only (hpsearch.api.load)."""
    from hpsearch.api import load as _load  # lazy: `import hpsearch` stays light for trials
    return _load(name, runs_dir)

"""hpsearch: crash-safe hyperparameter search on Slurm clusters and laptops."""

__version__ = "0.1.0"

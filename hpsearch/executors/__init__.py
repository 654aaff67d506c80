"""Executors run trial attempts: local processes now; Slurm jobs and pilots later."""

from hpsearch.executors.base import Adoptable, Ended, Executor, Launch, Started

__all__ = ["Adoptable", "Ended", "Executor", "Launch", "Started"]

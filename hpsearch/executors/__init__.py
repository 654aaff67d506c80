"""Executors run trial attempts: base (the Executor seam), local (processes on this machine),
slurm (a job or array task per trial; slurm_submit, slurm_health). The pilot executor, which
builds on these, lives with the rest of the pilot feature in hpsearch.pilot."""

from hpsearch.executors.base import Adoptable, Ended, Executor, Launch, Started

__all__ = ["Adoptable", "Ended", "Executor", "Launch", "Started"]

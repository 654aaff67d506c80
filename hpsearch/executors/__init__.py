"""Executors run trial attempts behind one seam: base (the Executor, and the events its poll
returns), local (processes on this machine), slurm (a job or array task per attempt;
slurm_submit: sbatch, job names, answers lost; slurm_health: riding out a Slurm that does
not answer). registry (EXECUTORS) names each with its facts and its class, for the spec,
`validate`, `plan` and the driver. The pilot executor, which builds on these, lives with the
rest of the pilot feature in hpsearch.pilot; the registry names it by "module:Class", so
nothing here imports it.
"""

from hpsearch.executors.base import Adoptable, Ended, Executor, Started
from hpsearch.launch.attempt import Launch

__all__ = ["Adoptable", "Ended", "Executor", "Launch", "Started"]

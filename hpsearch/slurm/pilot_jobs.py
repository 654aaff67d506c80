"""Pilot jobs, submitted with submitit.

submitit pickles the pilot's entry point (hpsearch.pilot.program.main) with its pilot dir,
writes the batch script and keeps the job's logs in its folder; on the node it unpickles and
calls it. A few things differ from submitit's defaults, on purpose:

- `use_srun=False`: the pilot is ONE process on the allocation's first node. Through srun it
  would be one task per node, and that step would hold CPUs the trials' own steps need.
- no `--signal`: submitit asks Slurm for USR2 before the time limit, which Slurm sends to every
  job step (without `B:`), so the trials' own srun steps die of it (seen: a torchrun trial
  exited 140, killed by SIGUSR2), while `B:` would signal only the batch shell, not the pilot
  under it. The pilot keeps its own clock (hpsearch.pilot.program) and winds down in time.
- the sbatch itself goes through hpsearch's Slurm package (hpsearch.executors.slurm_submit):
  its failures are classified (transient, limit, permanent), and a submit whose answer was lost
  is looked up by job name before it is sent again. submitit runs `sbatch` itself and only
  raises on failure; `_submit_command` below is submitit's own, with that one call replaced.
- the node runs `python -m hpsearch.pilot.submitted`, not `submitit.core._submit`: a pickle
  is code, so it is unpickled only if this user wrote it, in a folder only this user can
  write; the folder is made owner-only here, whatever the umask (hpsearch.pilot.submitted).

No requeue: a pilot that Slurm would requeue (node failure) is replaced by a new pilot, which
may land elsewhere; one pilot id is one allocation (docs/pilots.md says why).
"""

from __future__ import annotations

import os
import shlex
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import submitit
from submitit.core import utils

from hpsearch.procs import module_argv

# submitit's own lines that a pilot leaves out: --signal (above), and --wckey=submitit (a
# workload key a site accounts by; where wckeys are enforced, an unknown one fails the sbatch).
_DROPPED = ("#SBATCH --signal=", "#SBATCH --wckey=")


class Held(Exception):
    """Slurm cannot take the pilot now (down, or a limit): submit it again later."""


class _Submitit(submitit.SlurmExecutor):
    def __init__(self, folder: Path, sbatch: Callable[[str], str | None]) -> None:
        super().__init__(folder, max_num_timeout=0, python=shlex.quote(sys.executable))
        self._sbatch = sbatch

    @classmethod
    def affinity(cls) -> int:
        # submitit refuses to start without `srun` on PATH; here sbatch goes through hpsearch's
        # Slurm package, and `hpsearch plan` prints the script on machines without Slurm
        return 1

    @property
    def _submitit_command_str(self) -> str:
        return shlex.join(module_argv(sys.executable, "hpsearch.pilot.submitted",
                                      str(self.folder), unbuffered=True))

    def _make_submission_file_text(self, command: str, uid: str) -> str:
        text = super()._make_submission_file_text(command, uid)
        return "\n".join(line for line in text.split("\n")
                         if not line.startswith(_DROPPED))

    def _submit_command(self, command: str) -> submitit.Job:
        tmp_uuid = uuid.uuid4().hex
        folder = utils.JobPaths.get_first_id_independent_folder(self.folder)
        folder.mkdir(parents=True, exist_ok=True)
        os.chmod(folder, 0o700)  # the pickle in it runs as the owner: no one else may write
        script = folder / f".submission_file_{tmp_uuid}.sh"
        script.write_text(self._make_submission_file_text(command, tmp_uuid))
        job_id = self._sbatch(script.read_text())
        if job_id is None:
            script.unlink(missing_ok=True)
            raise Held()
        job = self.job_class(folder=self.folder, job_id=job_id, tasks=[0])
        job.paths.move_temporary_file(script, "submission_file", keep_as_symlink=True)
        return job


def pilot_parameters(name: str, nodes: int, time_limit: str, cpus_per_node: int,
                     gpus_per_node: int, mem_per_node: str | None,
                     extra: dict[str, str]) -> dict:
    """submitit's parameters for one pilot: one process per allocation, no requeue. `extra`:
    more sbatch options by name (partition, account, qos, switches, nodelist, exclude)."""
    params: dict = {"job_name": name, "nodes": nodes, "ntasks_per_node": 1,
                    "cpus_per_task": cpus_per_node, "use_srun": False, "stderr_to_stdout": True,
                    "additional_parameters": {"time": time_limit, "no-requeue": True,
                                              **extra}}
    if gpus_per_node:
        params["gpus_per_node"] = gpus_per_node
    if mem_per_node:  # as Slurm writes it; submitit's own `mem` takes gigabytes
        params["additional_parameters"]["mem"] = mem_per_node
    return params


def submit_pilot(folder: Path, parameters: dict, sbatch: Callable[[str], str | None],
                 entry: Callable[[str], str], pilot_dir: Path) -> str:
    """Submit one pilot; its job id. Raises Held when Slurm cannot take it now, SlurmError
    when Slurm refuses it for good."""
    executor = _Submitit(folder, sbatch)
    executor.update_parameters(**parameters)
    return executor.submit(entry, str(pilot_dir)).job_id


def pilot_output(folder: Path, job_id: str) -> Path:
    """Where Slurm writes the output of pilot job `job_id` submitted from `folder` (stderr
    goes there too)."""
    return utils.JobPaths(folder, job_id, 0).stdout


def batch_script(folder: Path, parameters: dict) -> str:
    """The script submit_pilot would sbatch (for `hpsearch plan` and golden files)."""
    executor = _Submitit(folder, lambda text: None)
    executor.update_parameters(**parameters)
    return executor._make_submission_file_text(executor._submitit_command_str, "plan")

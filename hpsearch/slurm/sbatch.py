"""The batch script of one trial attempt: a pure function of the launch and the spec.

`hpsearch plan` prints exactly this text, and golden files in tests/golden/sbatch/ pin it.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

from hpsearch.launch.attempt import EXIT_TRAP, Launch
from hpsearch.spec.model import SlurmJob
from hpsearch.trial import EXIT_RESUME

_SAFE = re.compile(r"^[^\s\"']*$")


def instance_tag(created: float) -> str:
    """Six base-36 characters from an experiment's creation time (microseconds): they tell
    this experiment's jobs from those of an earlier one of the same name."""
    n, digits = int(created * 1_000_000), []
    for _ in range(6):
        n, d = divmod(n, 36)
        digits.append("0123456789abcdefghijklmnopqrstuvwxyz"[d])
    return "".join(reversed(digits))


def _prefix(experiment: str, instance: str) -> str:
    return f"hps.{experiment}.{instance}" if instance else f"hps.{experiment}"


def job_name(experiment: str, trial_id: int, attempt: int, instance: str = "") -> str:
    """Unique per experiment instance and attempt, so a restarted driver can find a job whose
    id it never stored, and never takes a job of a re-created experiment of the same name."""
    return f"{_prefix(experiment, instance)}.{trial_id}.{attempt}"


def pilot_name(experiment: str, pilot_id: int, instance: str = "") -> str:
    """The job name of the experiment instance's pilot `pilot_id` (hpsearch.pilot.executor)."""
    return f"{_prefix(experiment, instance)}.pilot.{pilot_id}"


def sbatch_options(job: SlurmJob, launch: Launch) -> list[str]:
    """Every resource field mapped to its sbatch option, then the user's extra options, then
    the attempt's own (the retry rules': --exclude, --mem, --time), which win. The resources
    are the trial's own (per-trial resources), else the spec's."""
    res = launch.resources or job.resources
    opts = [
        f"--job-name={job_name(job.name, launch.trial_id, launch.attempt, job.instance)}",
        f"--output={launch.trial_dir / 'stdout.log'}",
        f"--error={launch.trial_dir / 'stderr.log'}",
        "--open-mode=append",
        f"--chdir={launch.workdir}",
        f"--nodes={res.nodes}",
        f"--ntasks-per-node={res.tasks_per_node}",
        f"--cpus-per-task={res.cpus_per_task}",
        # Slurm may run the job again under the same id (scontrol requeue, preemption, a
        # node failure): the executor records each run as an attempt. `--no-requeue` in
        # resources.sbatch_extra turns it off; a retry is then a new job.
        "--requeue",
    ]
    if res.gpus_per_node:
        opts.append(f"--gres=gpu:{res.gpus_per_node}")
    for key, value in (("mem", res.mem), ("time", res.time), ("partition", res.partition),
                       ("account", res.account), ("qos", res.qos)):
        if value is not None:
            opts.append(f"--{key}={value}")
    if job.checkpoints.signal:
        # B: signals the batch shell only; the script passes it on to the trial (run_lines).
        opts.append(f"--signal=B:{job.checkpoints.signal}@{round(job.checkpoints.signal_before)}")
    opts.extend(res.sbatch_extra)
    opts.extend(launch.sbatch_extra)
    return opts


def run_lines(job: SlurmJob, command: str) -> list[str]:
    """The lines that run the trial's command in the batch shell.

    With checkpoints.signal, Slurm signals only the batch shell (--signal=B:...), and bash
    runs a trap only once its foreground child has ended: so the command runs in the
    background in its own process group (set -m), the trap passes the signal on to that
    group, and the shell waits again until the command has really ended. The subshell
    ignores the signal by a no-op trap (reset to the default by exec in the trial itself).
    A command that fails after the signal was passed on ends the job with EXIT_RESUME (75,
    interrupted): torchrun, for one, exits 1 when its workers exit 75 after checkpointing.
    """
    sig = job.checkpoints.signal
    if not sig:
        return [command]
    return ["set -m",
            f"trap 'hpsearch_signalled=1; hpsearch_forwarded=1; "
            f"kill -s {sig} -- \"-$hpsearch_child\" 2>/dev/null' {sig}",
            "(",
            f"trap : {sig}",
            command,  # not indented: it may hold a here-document
            ") &",
            "hpsearch_child=$!",
            "while :; do",
            '  hpsearch_signalled=; wait "$hpsearch_child"; hpsearch_status=$?',
            '  [ -n "$hpsearch_signalled" ] || break',
            "done",
            f'[ -z "$hpsearch_forwarded" ] || [ "$hpsearch_status" -eq 0 ] '
            f'|| hpsearch_status={EXIT_RESUME}',
            'exit "$hpsearch_status"']


def directive(option: str) -> str:
    # sbatch reads #SBATCH lines itself (no shell): double quotes keep a path with spaces whole.
    if any(ord(c) < 32 or ord(c) == 127 for c in option):  # the spec check refuses these first
        raise ValueError(f"sbatch option {option!r}: a control character would end the line")
    return f"#SBATCH {option}" if _SAFE.match(option) else \
        '#SBATCH ' + option.split("=", 1)[0] + '="' + option.split("=", 1)[1] + '"'


def batch_script(job: SlurmJob, launch: Launch, extra: Sequence[str] = ()) -> str:
    """`extra`: options decided at submit time (placement, a retry's overrides); sbatch
    takes the last of repeated options, so these win over the spec's."""
    lines = ["#!/bin/bash"]
    lines += [directive(opt) for opt in [*sbatch_options(job, launch), *extra]]
    lines.append(f"# hpsearch: experiment {job.name}, trial {launch.trial_id}, "
                 f"attempt {launch.attempt}")
    lines += [f"export {key}={shlex.quote(value)}" for key, value in launch.env.items()]
    lines.append(EXIT_TRAP.rstrip("\n"))
    lines += run_lines(job, launch.command)
    return "\n".join(lines) + "\n"


def array_name(experiment: str, first_trial: int, attempt: int, instance: str = "") -> str:
    """The job name of an array whose task 0 is `first_trial`'s attempt `attempt`."""
    return f"{_prefix(experiment, instance)}.array.{first_trial}.{attempt}"


def array_script(job: SlurmJob, launches: list[Launch], throttle: int, log_dir: str) -> str:
    """One job array for single-node trials of one size (the same resources): task i runs
    launches[i].

    Each task sends its own output to its trial dir; Slurm's own messages for the task (a
    time limit, a cancel) go to log_dir/<array id>_<task>.out.
    """
    first = launches[0]
    if any(la.sbatch_extra != first.sbatch_extra for la in launches):
        raise ValueError("launches with their own sbatch options (a retry's --exclude, --mem, "
                         "--time) cannot share a job array; submit them as plain jobs")
    if any((la.resources or job.resources) != (first.resources or job.resources)
           for la in launches):
        raise ValueError("trials of different sizes cannot share a job array: one array "
                         "per size (SlurmExecutor groups them)")
    opts = [o for o in sbatch_options(job, first)
            if not o.startswith(("--job-name=", "--output=", "--error="))]
    opts = [f"--job-name={array_name(job.name, first.trial_id, first.attempt, job.instance)}",
            f"--array=0-{len(launches) - 1}%{throttle}",
            f"--output={log_dir}/%A_%a.out", f"--error={log_dir}/%A_%a.out"] + opts
    lines = ["#!/bin/bash"] + [directive(opt) for opt in opts]
    lines.append(f"# hpsearch: experiment {job.name}, trials "
                 + ", ".join(f"{la.trial_id} (attempt {la.attempt})" for la in launches))
    lines.append('case "$SLURM_ARRAY_TASK_ID" in')
    for index, launch in enumerate(launches):
        lines.append(f"{index})")
        lines.append(f"  exec >>{shlex.quote(str(launch.trial_dir / 'stdout.log'))} "
                     f"2>>{shlex.quote(str(launch.trial_dir / 'stderr.log'))}")
        lines += [f"  export {key}={shlex.quote(value)}" for key, value in launch.env.items()]
        lines.append("  " + EXIT_TRAP.rstrip("\n"))
        lines += run_lines(job, launch.command)  # not indented: it may hold a here-document
        lines.append("  ;;")
    lines.append("esac")
    return "\n".join(lines) + "\n"

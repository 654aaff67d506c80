"""Build a trial attempt's Launch from its TrialRecipe (Spec.trial_recipe): its quoted command
and its environment.

Shared by the driver (to run it) and `hpsearch plan` (to show it), so what plan prints is
exactly what runs.
"""

from __future__ import annotations

import errno
import json
import os
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpsearch.spec.model import Resources, TrialRecipe
from hpsearch.store import runs
from hpsearch.store.trusted import read_attempt_value
from hpsearch.template import render

_WARM = "\0python\0"  # stands for {python} until the warm client's command line replaces it
# The warm client's quick way in, run as an isolated script (it imports nothing of hpsearch's)
QUICK_CLIENT = Path(__file__).resolve().parent.parent / "warm" / "quick.py"

# Runs before the trial's command in the same shell; records its exit status, and the
# attempt it ends, for a driver that may have been restarted meanwhile (and so cannot wait
# for it): read_exit_code. Whatever is at its path is removed first and the file made anew
# (set -C: O_EXCL), so a link there is never written through.
EXIT_TRAP = ("trap 'hpsearch_rc=$?; rm -f \"$HPSEARCH_TRIAL_DIR/exit_code\"; (set -C; "
             "printf \"%s %s\\n\" \"$hpsearch_rc\" \"$HPSEARCH_ATTEMPT\" "
             "> \"$HPSEARCH_TRIAL_DIR/exit_code\")' EXIT\n")


def read_exit_code(trial_dir: Path, attempt: int,
                   on_refused: Callable[[str], None] | None = None) -> int | None:
    """The exit code attempt `attempt`'s shell recorded (EXIT_TRAP). None if there is none;
    if the file names another attempt (an earlier one's, not yet set aside, or as a host's
    stale cache of the trial dir shows it: never read as this attempt's end); or if it is
    not a small regular file of this user's (a trial may have put a FIFO or a link to
    /dev/zero there), which on_refused(message naming it) is told."""
    return read_attempt_value(trial_dir / "exit_code", attempt, on_refused)


@dataclass(frozen=True)
class Launch:
    """One attempt of one trial, ready to run."""

    trial_id: int
    attempt: int
    command: str          # a POSIX shell command line, parameter values already quoted
    env: dict[str, str]   # HPSEARCH_* and spec env, added to the executor's environment
    trial_dir: Path
    workdir: Path
    params: dict = field(default_factory=dict, compare=False)
    # What the retry rules changed for this attempt (hpsearch.driver.retry): sbatch
    # options that win over the spec's (--exclude, --mem, --time), and the factor on the
    # local timeout.
    sbatch_extra: tuple[str, ...] = field(default=(), compare=False)
    time_factor: float = field(default=1.0, compare=False)
    # The trial's own resources (Resources.for_params); None: the spec's, for every trial.
    resources: Resources | None = field(default=None, compare=False)
    # In a pilot: the process that spawns it narrows it to its slot's cores
    # (hpsearch.launch.affinity; HPSEARCH_CPU_FIELDS in env names them).
    narrow_cpus: bool = field(default=False, compare=False)


# A stop (SIGTERM to the attempt's process group) must not end the shell before the trial:
# the executor takes the shell's end for the trial's and kills what is left, so the trial
# would lose executor.grace (its checkpoint half-written). With this trap the shell waits for
# the command it runs (POSIX runs a trap only once the foreground command has ended), then
# exits with that command's status, running nothing more. exec resets the trap in the trial.
STOP_TRAP = "trap exit TERM\n"


def shell_body(signal_name: str | None, command: str) -> str:
    """What `/bin/sh -c` runs for an attempt outside a batch script (the local executor, a
    pilot): the stop trap (STOP_TRAP), the exit-code trap, then the command. With a
    checkpoint signal the shell itself ignores it (a no-op trap; exec resets it in the
    trial), so only the trial acts on it."""
    checkpoint = f"trap : {signal_name}\n" if signal_name and signal_name != "TERM" else ""
    return checkpoint + STOP_TRAP + EXIT_TRAP + command


def build_launch(recipe: TrialRecipe, trial_id: int, attempt: int,
                 params: dict[str, Any]) -> Launch:
    tdir = runs.trial_dir(recipe.experiment_dir, trial_id)
    ckpt = tdir / "checkpoints"
    env = {
        **dict(recipe.env),
        "HPSEARCH_EXPERIMENT": recipe.name,
        "HPSEARCH_TRIAL_ID": str(trial_id),
        "HPSEARCH_ATTEMPT": str(attempt),
        "HPSEARCH_TRIAL_DIR": str(tdir),
        "HPSEARCH_CHECKPOINT_DIR": str(ckpt),
        "HPSEARCH_PARAMS": json.dumps(params, sort_keys=True),
    }
    if recipe.checkpoint_signal:
        from hpsearch.launch import make_launcher

        sig = "SIG" + recipe.checkpoint_signal.upper().removeprefix("SIG")
        for name, value in make_launcher(recipe.launcher).checkpoint_signal_env(sig).items():
            env.setdefault(name, value)
    command = trial_command(recipe, trial_id, params)
    resources = recipe.resources.for_params(params)
    return Launch(trial_id, attempt, wrap_for_ranks(recipe, trial_id, command, tdir, resources),
                  env, tdir, Path(recipe.workdir), dict(params), resources=resources)


def trial_command(recipe: TrialRecipe, trial_id: int, params: dict[str, Any]) -> str:
    """The spec's command with the trial's parameters (quoted) and built-ins substituted,
    before its launcher and container wrap it (`plan --brief` shows it)."""
    tdir = runs.trial_dir(recipe.experiment_dir, trial_id)
    builtins = {"trial_id": str(trial_id), "trial_dir": str(tdir),
                "checkpoint_dir": str(tdir / "checkpoints"), "experiment": recipe.name,
                "python": _WARM if recipe.warm is not None else sys.executable}
    command = render(recipe.command, params, builtins)
    if recipe.warm is not None:  # {python} runs the script through a warm server
        command = command.replace(shlex.quote(_WARM), shlex.join([
            sys.executable, "-I", "-S", str(QUICK_CLIENT), ",".join(recipe.warm), "--"]))
    return command


def wrap_for_ranks(recipe: TrialRecipe, trial_id: int, command: str, trial_dir: Path,
                   resources: Resources) -> str:
    """The trial's command as its launcher starts it over its ranks (`resources`: the
    trial's own, Resources.for_params), in its container."""
    from hpsearch.launch import layout_for, make_launcher, make_runtime, port_for
    from hpsearch.launch.base import gpu_sampler_line

    # a trial that asks for GPUs has them sampled on each of its nodes (docs/gpu.md)
    sampler = sys.executable if resources.gpus_per_node > 0 else None
    layout = layout_for(resources, master_port=port_for(recipe.name, trial_id),
                        under_slurm=recipe.under_slurm, workdir=str(recipe.workdir),
                        trial_dir=str(trial_dir), gpu_sampler=sampler,
                        warm_ranks=sys.executable if recipe.warm is not None else None)
    runtime = make_runtime(recipe.container, [name for name, _ in recipe.env])
    text = make_launcher(recipe.launcher).wrap(command, layout, runtime)
    return text if sampler is None else gpu_sampler_line(sampler) + "\n" + text


def open_unlinked(path: Path, flags: int, mode: int = 0o666) -> int:
    """os.open a file hpsearch writes in a trial dir, never through a link: a link at its
    path (planted by whoever could write the folder) is removed and the file made anew."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW, mode)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
    os.unlink(path)
    return os.open(path, flags | os.O_NOFOLLOW | os.O_CREAT, mode)


def prepare_trial_dir(launch: Launch) -> None:
    """Create the trial dir with params.json and checkpoints/ (idempotent). Four file-system
    calls for a new trial (they cost tenths of a millisecond each on ext4, more on Lustre or
    NFS). params.json is written whole before the trial starts, and again for every attempt,
    so one torn by a crash is rewritten before anything reads it."""
    try:
        os.mkdir(launch.trial_dir)
    except FileNotFoundError:
        launch.trial_dir.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        pass
    try:
        os.mkdir(launch.trial_dir / "checkpoints")
    except FileExistsError:
        pass
    data = (json.dumps(launch.params, indent=1, sort_keys=True) + "\n").encode()
    fd = open_unlinked(launch.trial_dir / "params.json", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        while data:
            data = data[os.write(fd, data):]
    finally:
        os.close(fd)

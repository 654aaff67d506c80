"""How an end is told to a person: the cause of a failed trial, the state of an experiment.

Pure functions over what the store holds; the CLI (`status`, `submit`'s live lines), the
live view and the report show the same words.
"""

from __future__ import annotations

import re

from hpsearch.store import rows

INTERRUPTED = "interrupted"

# The line of a stderr tail that names the cause: a Python exception ("ValueError: ..."),
# or a line that says error/killed/fatal/failed in any runtime's words.
_EXCEPTION = re.compile(r"^\s*([A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit|Warning)"
                        r"|[\w.]*(Error|Exception))\b.*")
_WORDS = re.compile(r"(?i)\b(error|killed|fatal|failed|abort|oom|out of memory|panic)\b")
# A first line that names the cause itself ("exit code 127: torchrun: not found on node2").
_NAMED = re.compile(r"^exit code \d+: ")


def cause(error: str | None, width: int = 160) -> str:
    """One line that says why a trial failed, from its stored error (its first line, e.g.
    "exit code 1", then the last lines of its stderr): the first line, and after it the
    stderr line naming the cause (the last Python exception line, else the last line with
    words like error/killed/fatal, else the last non-empty line). '' for no error."""
    if not error:
        return ""
    first, *tail = error.splitlines()
    tail = [line.strip() for line in tail if line.strip() and not _NAMED.match(first)]
    line = next((x for x in reversed(tail) if _EXCEPTION.match(x)), None) \
        or next((x for x in reversed(tail) if _WORDS.search(x)), None) \
        or (tail[-1] if tail else None)
    told = f"{first}: {line}" if line and line not in first else first
    return told if len(told) <= width else told[:width - 3] + "..."


_JOB = re.compile(r" \(Slurm job \S+ [A-Z_]+ on [^)]*\)")
_SCRIPT = re.compile(r"\S*/(?:slurm_script|job\d+/\S+): line \d+: ")


def same_cause(text: str) -> str:
    """A cause (of `cause`) with what differs from one attempt of the same failure to the
    next left out: the Slurm job, its state and node, and the batch script's path and line
    that bash names (`.../job03784/slurm_script: line 26: `), so that the same error on many
    trials counts as one cause."""
    return _SCRIPT.sub("", _JOB.sub("", text))


def progress(counts: dict[str, int], requested: int) -> str:
    """'6/16 finished (6 paused), 2 cancelled': the trials finished for good or for now
    (hpsearch.store.rows.DONE) over those requested, what they are, then every other state
    in the store. The numbers add up to the trials the store holds (the rows `status`
    lists); trials not asked yet are in neither."""
    order = rows.DONE + rows.IN_FLIGHT + (rows.CANCELLED,)
    named = [s for s in order if counts.get(s)] + sorted(s for s in counts
                                                         if s not in order and counts[s])
    done = [f"{counts[s]} {s}" for s in named if s in rows.DONE]
    rest = [f"{counts[s]} {s}" for s in named if s not in rows.DONE]
    text = f"{sum(counts.get(s, 0) for s in rows.DONE)}/{requested} finished"
    return ", ".join([text + (f" ({', '.join(done)})" if done else ""), *rest])


def experiment_status(status: str, driver_pid: int | None) -> str:
    """The experiment's status as a person should read it: 'running' in the store with no
    live driver is 'interrupted' (its driver was killed, its host rebooted), never
    'running'."""
    return INTERRUPTED if status == "running" and not driver_pid else status


def resume_hint(name: str, exp_dir=None) -> str:
    """How to continue an interrupted experiment. With a driver job on record (submit
    --driver-job), that job may only be pending or requeued: check it before resuming. A
    record that is not a small regular file of this user's names no job, and the hint says
    it was ignored."""
    from pathlib import Path

    from hpsearch.store.trusted import Untrusted, read_trusted
    job_id, ignored = "", ""
    if exp_dir is not None:
        job = Path(exp_dir) / "driver.job"
        try:
            job_id = (read_trusted(job, 256) or b"").decode("ascii", "replace").strip()
        except Untrusted as exc:
            ignored = f" ({job} ignored: {exc})"
        except OSError:
            pass
    if job_id:
        return (f"its driver job {job_id} may still be pending or requeued (squeue -j "
                f"{job_id}); if it is gone, continue it with: hpsearch resume {name}")
    return f"continue it with: hpsearch resume {name}{ignored}"

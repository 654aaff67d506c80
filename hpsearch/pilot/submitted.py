"""The pilot job's command on its node: run submitit's pickle only if this user wrote it.

submitit's own `python -m submitit.core._submit FOLDER` unpickles
`FOLDER/<job id>_submitted.pkl`, whatever is there. A pickle is code: one another user could
have put or changed there would run as the owner, in the owner's allocation. The batch
script (hpsearch.slurm.pilot_jobs) runs this module instead, which waits for the pickle as
submitit does, then hands the folder to submitit's process_job only if

- the pickle is a regular file, not a link, owned by this user, and
- its folder is a folder (not a link) owned by this user that group and others cannot
  write: no one else can then replace the pickle between this check and submitit's load.

Otherwise it exits 2 with the reason on stderr, and nothing is unpickled.
"""

from __future__ import annotations

import os
import stat
import sys
import time
from pathlib import Path

from hpsearch.store.trusted import problem

WAIT = 60  # seconds, as submitit waits: the pickle is moved into place after the sbatch
REFUSED = 2


def refusal(folder: Path, pickle: Path, uid: int) -> str | None:
    """Why the pickle must not be loaded, or None when it may be."""
    try:
        where = os.lstat(folder)
    except OSError as exc:
        return f"cannot look at its folder {folder}: {exc.strerror}"
    if not stat.S_ISDIR(where.st_mode):
        return f"its folder {folder} is not a folder (a symbolic link?)"
    if where.st_uid != uid:
        return f"its folder {folder} is owned by uid {where.st_uid}, not by this user ({uid})"
    if where.st_mode & 0o022:
        return (f"its folder {folder} is writable by others (mode "
                f"{stat.S_IMODE(where.st_mode):o}; chmod go-w {folder})")
    try:
        info = os.lstat(pickle)
    except OSError as exc:
        return f"cannot look at it: {exc.strerror}"
    return problem(info, None, uid)


def _wait_for(path: Path, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not os.path.lexists(path) and time.monotonic() < deadline:
        time.sleep(1)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m hpsearch.pilot.submitted FOLDER", file=sys.stderr)
        return REFUSED
    from submitit.core.job_environment import JobEnvironment
    from submitit.core.submission import process_job
    os.environ["SUBMITIT_FOLDER"] = argv[0]  # where submitit's JobEnvironment looks
    paths = JobEnvironment().paths
    _wait_for(paths.submitted_pickle, WAIT)
    why = refusal(paths.folder, paths.submitted_pickle, os.geteuid())
    if why:
        print(f"hpsearch pilot: refused to load {paths.submitted_pickle}: {why}; nothing was "
              "unpickled or run", file=sys.stderr, flush=True)
        return REFUSED
    process_job(argv[0])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Where an experiment lives on disk (and, re-exported, the lock that lets one driver own it).

<runs_dir>/<name>/store.sqlite      the store (driver writes, everyone else reads)
<runs_dir>/<name>/driver.lock       the driver's lock: host, pid, heartbeat
                                    (hpsearch.store.lockfile)
<runs_dir>/<name>/driver.log        the driver's log when it runs detached
<runs_dir>/<name>/trials/00007/     one trial's files (see hpsearch.trial)
"""

from __future__ import annotations

import os
from pathlib import Path

from hpsearch.errors import BadInput, NotFound
from hpsearch.spec.names import NAME_RE

STORE_FILE = "store.sqlite"
DEFAULT_RUNS_DIR = "hpsearch-runs"


def default_runs_dir() -> Path:
    """HPSEARCH_RUNS_DIR, or ./hpsearch-runs where it is unset or empty (an empty value, as
    from `HPSEARCH_RUNS_DIR=$UNSET`, would otherwise put experiments in the current folder)."""
    return Path(os.environ.get("HPSEARCH_RUNS_DIR") or DEFAULT_RUNS_DIR).absolute()


def experiment_dir(runs_dir: Path, name: str) -> Path:
    """The experiment's folder; refuses names that could escape runs_dir."""
    if not NAME_RE.fullmatch(name) or name in (".", ".."):  # fullmatch: no "name\n"
        raise BadInput(f"bad experiment name {name!r}: expected letters, digits, '.', '_' or "
                       "'-', starting with a letter or digit")
    return Path(runs_dir) / name


def existing_experiment_dir(runs_dir: Path, name: str) -> Path:
    path = experiment_dir(runs_dir, name)
    if not (path / STORE_FILE).exists():
        import difflib
        names = [p.name for p in list_experiments(runs_dir)]
        close = difflib.get_close_matches(name, names, n=3)
        hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        raise NotFound(f"no experiment '{name}' under {runs_dir}{hint} (use --runs-dir or "
                       "HPSEARCH_RUNS_DIR if it lives elsewhere)")
    return path


def trial_dir(exp_dir: Path, trial_id: int) -> Path:
    return exp_dir / "trials" / trial_name(trial_id)


def trial_name(trial_id: int) -> str:
    """A trial's folder name, and its run's in the mirrors: zero-padded, so that names sort
    as numbers do (00002 before 00010)."""
    return f"{int(trial_id):05d}"


def list_experiments(runs_dir: Path) -> list[Path]:
    """The experiments under runs_dir whose store this user may read: in a shared runs dir,
    another user's private ones (spec `share`) are left out."""
    if not runs_dir.is_dir():
        return []
    return sorted(p for p in runs_dir.iterdir() if os.access(p / STORE_FILE, os.R_OK))

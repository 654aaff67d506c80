"""Run one search through hpsearch itself, as `hpsearch submit` runs it in the foreground.

Shared by the benchmarks that measure search quality (search_quality.py, early_stopping.py):
each writes a spec, runs it with the real driver, SQLite store and local executor, and reads
the store afterwards. Trial processes started with `python -S` (no site: a faster start) get
`site_packages()` on their PYTHONPATH to find numpy, ioh and the like.
"""

from __future__ import annotations

import multiprocessing
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from hpsearch.driver import session


def site_packages() -> str:
    """The site-packages folder this interpreter imports its third-party packages from."""
    return str(Path(yaml.__file__).resolve().parent.parent)


def drive(spec: dict, runs_dir: Path) -> tuple[Path, float]:
    """Write `spec` (as YAML would load it) to runs_dir/<name>.yaml and run it to the end:
    session.new_experiment validates it, session.drive creates the store and runs the driver
    with the local executor. Returns the experiment dir (its store is STORE_FILE there) and
    the search's wall time in seconds, from the driver's start to its return."""
    spec_path = runs_dir / f"{spec['name']}.yaml"
    spec_path.write_text(yaml.safe_dump(spec, sort_keys=False))
    loaded, _ = session.new_experiment(spec_path, runs_dir, None, False)
    began = time.perf_counter()
    session.drive(loaded, True, lambda line: None)
    return loaded.experiment_dir, time.perf_counter() - began


def run_all(run_one: Callable[[Any], Any], jobs: list, workers: int,
            initializer: Callable[..., None], initargs: tuple, runs_dir: Path,
            keep: bool) -> tuple[list, float]:
    """run_one(job) for every job, `workers` at a time, each worker a forked process that
    ran initializer(*initargs) first. Then runs_dir is removed, unless `keep` (it says where
    it is). Returns the results, in the order they finished, and the wall time in seconds."""
    began = time.perf_counter()
    try:
        with multiprocessing.get_context("fork").Pool(workers, initializer, initargs) as pool:
            results = list(pool.imap_unordered(run_one, jobs))
    finally:
        if keep:
            print(f"runs dir kept: {runs_dir}")
        else:
            shutil.rmtree(runs_dir, ignore_errors=True)
    return results, time.perf_counter() - began

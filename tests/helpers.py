"""Small helpers for reading an experiment's store in tests."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hpsearch.store.reader import Reader
from hpsearch.store.runs import STORE_FILE


def read_store(runs: Path, name: str):
    """(experiment row, trial rows) of an experiment, read-only."""
    reader = Reader(runs / name / STORE_FILE)
    try:
        return reader.experiment(), reader.trials()
    finally:
        reader.close()


def store_curves(runs: Path, name: str):
    """(trials, {trial: {metric: {step: value}}}) read from the store: what a mirror of the
    experiment must hold."""
    reader = Reader(runs / name / STORE_FILE)
    try:
        trials = reader.trials()
        curves: dict = {}
        for t in trials:
            for m in reader.metrics(t.id):
                curves.setdefault(t.id, {}).setdefault(m["name"], {})[m["step"]] = m["value"]
        return trials, curves
    finally:
        reader.close()


def event_kinds(runs: Path, name: str) -> list[str]:
    """The kinds of an experiment's events, oldest first."""
    reader = Reader(runs / name / STORE_FILE)
    try:
        return [e["kind"] for e in reader.events(limit=100_000)]
    finally:
        reader.close()


def job_prefix(runs: Path, name: str) -> str:
    """`hps.<name>.<instance tag>`: how this instance of the experiment names its Slurm jobs."""
    from hpsearch.slurm.sbatch import instance_tag
    return f"hps.{name}.{instance_tag(read_store(runs, name)[0].created)}"


def quad(x: float, y: float) -> float:
    return (x - 1) ** 2 + (y + 2) ** 2


# A fast trial: awk computes the quadratic and reports it as an @hpsearch stdout line.
AWK_QUAD = ("awk -v x={x} -v y={y} 'BEGIN { printf \"@hpsearch step=0 loss=%.17g\\n\", "
            "(x - 1)^2 + (y + 2)^2 }'")


def kill_driver_repeatedly(cli, spec: Path, name: str, env: dict, kills: int,
                           delays: tuple[float, float], seed: int = 20261126,
                           after_store: bool = False) -> list[str]:
    """Submit `spec`, SIGKILL its driver after a random delay in `delays`, resume and kill it
    again, `kills` times in all (a driver that finishes first is left done). Returns what
    happened each time ("1.23s: killed" or "0.80s: exited 0 first"). after_store: the first
    delay counts from the experiment's store being there, not from the submit (a loaded
    machine's preflight of two clusters took over 2.5 s: every kill came before it)."""
    import random
    import signal
    import time

    rng = random.Random(seed)
    happened = []
    store = cli.runs / name / "store.sqlite"
    for i in range(kills):
        # Killed before the experiment was recorded, it is not there: submit again.
        started = store.exists()
        args = ("resume", name) if i and started else ("submit", spec)
        driver = cli.popen(*args, env=env)
        deadline = time.monotonic() + 120
        while after_store and not store.exists() and driver.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        delay = rng.uniform(*delays)
        try:
            driver.wait(timeout=delay)  # it may finish before its kill: then it is done
            happened.append(f"{delay:.2f}s: exited {driver.returncode} first")
        except Exception:  # noqa: BLE001 - subprocess.TimeoutExpired: kill it now
            driver.send_signal(signal.SIGKILL)
            driver.wait(timeout=30)
            happened.append(f"{delay:.2f}s: killed")
        assert driver.returncode in (0, -signal.SIGKILL), driver.communicate()
    print("\n" + "; ".join(happened))
    if not (cli.runs / name / "store.sqlite").exists():  # every kill came before it began
        proc = cli("submit", spec, env=env, timeout=600)
        assert proc.returncode == 0, (proc.stdout, proc.stderr)
        happened.append("submitted again: no kill came after the store was created")
    return happened


def wait_for_trials(cli, name: str, predicate, timeout: float = 30, every: float = 0.05):
    """The experiment's trial rows once predicate(rows) holds; fails after `timeout` s."""
    import time
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            rows = read_store(cli.runs, name)[1]
            if predicate(rows):
                return rows
        except Exception:  # the store is not created yet
            pass
        time.sleep(every)
    raise AssertionError(f"timed out waiting on {name}")


def ensure_system_entry(make: list[str], lookup: Callable[[str], Any], name: str) -> Any:
    """lookup(name) (pwd.getpwnam, grp.getgrnam), after creating the user or group with
    `make + [name]` (useradd, groupadd) if missing. Safe when another test process creates
    it at the same moment (scripts/test.sh runs the cluster's tests beside the others):
    useradd fails while another holds /etc/passwd's lock, or when it was just made."""
    for _ in range(100):
        try:
            return lookup(name)
        except KeyError:
            pass
        if subprocess.run([*make, name], capture_output=True).returncode == 0:
            return lookup(name)
        time.sleep(0.1)
    return lookup(name)  # KeyError naming it


def junk_commits(store: Path, seconds: float, query: str = "",
                 pause: float = 0.0) -> subprocess.Popen:
    """A process that commits 40 'junk' events of 2 KB at a time to `store` for `seconds`,
    `pause` seconds apart, its pages spilling to the file mid-transaction (cache_size=1),
    then prints how many commits it made. query: SQLite URI parameters of its connection
    (vfs=unix-none: it takes no locks, as on a filesystem where they do not reach others)."""
    code = ("import sqlite3, time\n"
            f"c = sqlite3.connect('file:{store}?{query}', uri=True, isolation_level=None,"
            " timeout=30)\n"
            "c.execute('PRAGMA cache_size=1')\n"
            f"end, n = time.monotonic() + {seconds}, 0\n"
            "while time.monotonic() < end:\n"
            "    c.execute('BEGIN IMMEDIATE')\n"
            "    for i in range(40):\n"
            "        c.execute('insert into events (time, kind, message) values (0, ?, ?)',"
            " ('junk', 'x' * 2000))\n"
            "    c.execute('COMMIT')\n"
            "    n += 1\n"
            f"    time.sleep({pause})\n"
            "print(n)\n")
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)

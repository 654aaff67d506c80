"""The composition root: start and resume experiments, the glue between the CLI and the driver.

`new_experiment` reads and checks a spec (hpsearch.preflight.load_spec and check_here), and
that its name is free and its executor can run; `drive` takes the driver lock, creates or
opens the store, and builds the search, the executor (executors/registry.py) and the Driver
with its policies (policies.py), each handed only its own part of the spec. `stored_spec` and
`fixed_spec` give `resume` its spec; `detach` runs the driver in the background and
`submit_driver_job` as a Slurm job (slurm_job.py). Stopping an experiment is
hpsearch.driver.cancel's.

Everything that can be wrong with the input is checked before anything is created on disk.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from hpsearch.driver import slurm_job
from hpsearch.driver.slurm_job import DRIVER_JOB_FILE
from hpsearch.errors import Conflict, HpsearchError, StorageError
from hpsearch.executors.base import Executor
from hpsearch.executors.registry import facts
from hpsearch.preflight import check_here, load_spec, parse_spec
from hpsearch.preflight.cluster import slurm_would_take
from hpsearch.spec.model import Search as SearchSpec
from hpsearch.spec.model import Spec
from hpsearch.store import rows, runs
from hpsearch.store.lockfile import DriverLock
from hpsearch.store.private import make_private
from hpsearch.store.reader import Reader
from hpsearch.store.runs import STORE_FILE
from hpsearch.store.store import Store

if TYPE_CHECKING:
    from hpsearch.driver.loop import Driver
    from hpsearch.search.base import Search


def driver_for(spec: Spec, store: Store, executor: Executor, search: Search,
               on_event: Callable[[str], None] = lambda line: None,
               leave_on: Callable[[int], str | None] | None = None) -> Driver:
    """The driver of a search, its policies each built from their part of the spec."""
    from hpsearch.driver.loop import Driver
    from hpsearch.driver.policies import policies

    return Driver(store, executor, search, policies(spec, store, executor, search, on_event),
                  on_event, leave_on)


def make_executor(spec: Spec, store: Store | None = None) -> Executor:
    """The spec's executor (executors/registry.py). Without a store (the check before
    anything is created), an executor that keeps its jobs there builds what it can."""
    from hpsearch.executors.registry import chosen
    return chosen(spec.executor).cls().from_spec(spec, store, asks_ahead(spec.search))


def asks_ahead(search: SearchSpec) -> bool:
    """Whether the driver may ask the next trial while every slot is busy, so that it starts
    the moment one frees. Only where that cannot change what is run: the sampler does not
    learn from results (grid, random, qmc: a seeded search asks the same points in the same
    order), no promotion decides at each free slot, trials are asked in no fixed order
    (search.reproducible), and no search.timeout could pass while the trial waits."""
    from hpsearch.search.registry import strategy
    facts = strategy(search.strategy).facts
    return (not facts.learns and not facts.segmented and not search.pruner.promotion
            and not search.reproducible and search.timeout is None)


def with_executor(spec: Spec, executor_type: str | None) -> Spec:
    if executor_type is None:
        return spec
    return dataclasses.replace(spec, executor=dataclasses.replace(spec.executor,
                                                                  type=executor_type))


def with_instance(spec: Spec, store: Reader) -> Spec:
    """The spec of this instance of the experiment: its Slurm job names carry a tag of its
    creation time, and no job submitted before that time is taken for one of its own."""
    from hpsearch.slurm.sbatch import instance_tag
    created = store.experiment().created
    return dataclasses.replace(spec, instance=instance_tag(created), created=created)


def new_experiment(spec_path: Path, runs_dir: Path | None, executor_type: str | None,
                   resume_existing: bool) -> tuple[Spec, bool]:
    """Validate the spec and check the name is free. Returns (spec, exists). Writes nothing.
    An experiment that never started a trial (never_started) does not count as existing:
    submitting again starts it over, with the spec given now."""
    spec = load_spec(spec_path, runs_dir, executor_type)  # read once: spec.text is stored
    check_here(spec, spec_path)
    spec = dataclasses.replace(spec, source=spec_path.resolve())
    exp_dir = runs.experiment_dir(spec.runs_dir, spec.name)
    exists = (exp_dir / STORE_FILE).exists() and not never_started(exp_dir)
    if exists and not resume_existing:
        raise Conflict(f"experiment '{spec.name}' already exists in {exp_dir}; continue it with "
                       f"`hpsearch resume {spec.name}` (or `submit --resume`; with a fixed "
                       f"command, workdir, env or resources: `hpsearch resume {spec.name} "
                       f"--spec {spec_path}`), or give the spec another name")
    if exists:
        with Reader(exp_dir / STORE_FILE) as stored:
            old = stored.experiment().spec_yaml
        if old != spec.text:
            raise Conflict(f"experiment '{spec.name}' exists with a different spec; give the "
                           "changed spec another name, resume the old one with "
                           f"`hpsearch resume {spec.name}`, or, for a fixed command, workdir, "
                           f"env or resources, `hpsearch resume {spec.name} --spec "
                           f"{spec_path}`")
    for other in spec.search.warm_start:  # exit 2 (with did-you-mean) for a missing one
        runs.existing_experiment_dir(spec.runs_dir, other)
    make_executor(spec).close()  # fail now on an executor that cannot run
    if facts(spec.executor).on_slurm:
        slurm_would_take(spec)
    return spec, exists


def never_started(exp_dir: Path) -> bool:
    """Whether the experiment failed at launch: its first submit stopped before any trial
    ran (the driver stopped on a problem found only then, or every sbatch was refused), so
    starting it over loses nothing. That is: no driver job was submitted for it, no trial is
    submitting or running, and no attempt of any trial ever started. A store that cannot be
    read counts as started."""
    if (exp_dir / DRIVER_JOB_FILE).exists():
        return False
    try:
        reader = Reader(exp_dir / STORE_FILE)
    except (sqlite3.Error, HpsearchError, OSError):
        return False
    with reader:
        try:
            trials = reader.trials()
            return not any(t.state in (rows.SUBMITTING, rows.RUNNING) or any(
                a["started"] is not None or a["job_id"] for a in reader.attempts(t.id))
                for t in trials)
        except (sqlite3.Error, HpsearchError, OSError):
            return False


def _start_over_if_never_started(exp_dir: Path) -> None:
    """With the driver lock held: remove what a submit that failed at launch left (its store,
    its trial dirs with params of the old spec), so the store is created anew."""
    store = exp_dir / STORE_FILE
    if store.exists() and never_started(exp_dir):
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(f"{store}{suffix}").unlink(missing_ok=True)
        shutil.rmtree(exp_dir / "trials", ignore_errors=True)


def stored_spec(runs_dir: Path, name: str, executor_type: str | None = None) -> Spec:
    """The spec an existing experiment was submitted with."""
    exp_dir = runs.existing_experiment_dir(runs_dir, name)
    with Reader(exp_dir / STORE_FILE) as reader:
        exp = reader.experiment()
    spec = parse_spec(exp.spec_yaml, exp.spec_file, Path(exp.base_dir), runs_dir)
    return with_executor(dataclasses.replace(spec, source=Path(exp.spec_file)), executor_type)


def fixed_spec(stored: Spec, path: Path, runs_dir: Path, executor_type: str | None) -> Spec:
    """resume --spec: the fixed spec at `path`, checked as submit checks one and against
    what may change (hpsearch.driver.respec), stored in the experiment."""
    from hpsearch.driver.respec import replace_spec
    new = load_spec(path, runs_dir, executor_type)
    check_here(new, path)
    return replace_spec(stored, new, path.resolve())


def placement_topology(runs_dir: Path, name: str) -> str | None:
    """The topology file an existing experiment's spec names (placement.topology), or None,
    also where its spec cannot be read."""
    try:
        found = stored_spec(runs_dir, name).placement.topology
    except (HpsearchError, OSError):
        return None
    return str(found) if found else None


def create_store(spec: Spec, trials: int) -> Store:
    """The experiment's store, created with its experiment row (atomically)."""
    assert spec.source is not None, "a new experiment comes from a spec file"
    return Store.create(spec.experiment_dir / STORE_FILE, name=spec.name,
                        spec_yaml=spec.text or Path(spec.source).read_text(),
                        spec_file=str(spec.source),
                        base_dir=str(Path(spec.source).parent), strategy=spec.search.strategy,
                        directions=[o.direction for o in spec.objectives],
                        trials_requested=trials)


def submit_driver_job(spec: Spec, create: bool, driver_time: str | None) -> str:
    """Record the experiment here, then submit its driver as a small Slurm job that runs
    `hpsearch resume` (requeued if its node fails; resume makes a restart safe). Returns the
    driver job's id."""
    from hpsearch.search import make_search

    exp_dir = spec.experiment_dir
    lock = DriverLock(exp_dir)
    with storage_errors(spec), share_mode(spec):  # its job's `resume` sets it again
        lock.acquire(group_readable=spec.share == "group")  # refuses while a driver runs
        try:
            if create:
                _start_over_if_never_started(exp_dir)
            if create and not (exp_dir / STORE_FILE).exists():
                create_store(spec, make_search(spec.search, spec.objectives).total).close()
            with Reader(exp_dir / STORE_FILE) as reader:
                spec = with_instance(spec, reader)
        finally:
            lock.release()
    slurm_job.clear_cancel(exp_dir)
    return slurm_job.submit(spec, driver_time)


def drive(spec: Spec, create: bool, on_event: Callable[[str], None],
          on_ready: Callable[[], None] = lambda: None) -> int:
    """Own the experiment (lock), create or open its store, run the driver to the end."""
    from hpsearch.search import make_search

    exp_dir = spec.experiment_dir
    lock = DriverLock(exp_dir)
    in_job = slurm_job.in_driver_job()
    if in_job:
        slurm_job.arm()
    with storage_errors(spec), share_mode(spec):
        lock.acquire(group_readable=spec.share == "group")
        try:
            search = make_search(spec.search, spec.objectives)
            if create:
                _start_over_if_never_started(exp_dir)
            if create and not (exp_dir / STORE_FILE).exists():
                store = create_store(spec, search.total)
            else:
                store = Store(exp_dir / STORE_FILE)
            on_ready()
            spec = with_instance(spec, store)
            _note_cold_starts(spec, store, on_event)
            driver = driver_for(spec, store, make_executor(spec, store), search, on_event,
                                leave_on=slurm_job.leave_on(exp_dir) if in_job else None)
            if not in_job:
                slurm_job.clear_cancel(exp_dir)  # an explicit resume overrides a cancel
            elif slurm_job.cancel_requested(exp_dir):
                driver.request_stop("hpsearch cancel")  # asked before this run started
            for signum in slurm_job.take_early() if in_job else ():
                driver.on_signal(signum)
            code = driver.run()
        finally:
            lock.release()
    if driver.left:  # its time limit is near, or it was preempted: another run goes on
        on_event(slurm_job.continue_elsewhere(spec, driver.left))
    return code


def _note_cold_starts(spec: Spec, store: Store, on_event: Callable[[str], None]) -> None:
    """executor.warm on this node without a private folder for its servers (another user
    made it first, in a shared /tmp): the trials run cold, and the events say why."""
    if spec.executor.warm is None or facts(spec.executor).on_slurm:
        return  # on Slurm nodes each trial's stderr says it (hpsearch.warm.client)
    from hpsearch.warm import private_dir_problem, runtime_dir
    problem = private_dir_problem(runtime_dir())
    if problem:
        message = f"warm starts are off on this node, trials run cold: {problem}"
        store.add_event("warning", message)
        on_event(message)


@contextlib.contextmanager
def share_mode(spec: Spec):
    """`share: group`: what the driver, and the trials it starts, create is group-readable
    and never group-writable (umask 027, whatever the caller's: a project space's 002, or
    077), the store and its journals included (SQLite gives those the store's mode); sbatch
    passes the umask on to Slurm jobs (SLURM_UMASK). What must stay the owner's is in 0700
    folders (hpsearch.store.private). Otherwise the umask is left as it is: the 0700
    experiment folder keeps others out."""
    if spec.share != "group":
        yield
        return
    umask = os.umask(0o027)
    try:
        yield
    finally:
        os.umask(umask)


@contextlib.contextmanager
def storage_errors(spec: Spec):
    """A full disk or a permission error on the runs dir: one clear message, no traceback.
    Each store change is one transaction, so the store stays as the last commit left it;
    a store that was being created is not there at all (it is built under a temporary
    name), and the message then says to submit again, not to resume."""
    try:
        yield
    except (OSError, sqlite3.OperationalError) as exc:
        exists = (spec.experiment_dir / STORE_FILE).exists()
        then = (f"`hpsearch resume {spec.name}`" if exists
                else f"submit again (`hpsearch submit {spec.source or 'SPEC'}`)")
        if isinstance(exc, OSError):
            where = f"{exc.filename}: " if exc.filename else ""
            problem = f"cannot write {where}{exc.strerror or exc}"
        else:  # "database or disk is full", "readonly database"
            problem = f"the store of {spec.name} cannot be written: {exc}"
        state = ("the store is intact (the change was rolled back)" if exists
                 else "no experiment was created")
        raise StorageError(f"{problem}; {state}. Free space or fix permissions, then "
                           f"{then}") from None


def detach(run: Callable[[Callable[[], None]], int], log_path: Path) -> int:
    """Run `run(on_ready)` in a daemon (double fork, new session, output to log_path).

    Returns the daemon's pid once it reported ready; raises with its message if it failed
    before that. The daemon survives the terminal closing.
    """
    make_private(log_path.parent)  # the driver checks it again (share: group opens it to 0750)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(read_fd)
        os.setsid()
        if os.fork() != 0:
            os._exit(0)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        sys.stdout = os.fdopen(1, "w", buffering=1)
        sys.stderr = os.fdopen(2, "w", buffering=1)

        def ready() -> None:
            os.write(write_fd, f"ok {os.getpid()}\n".encode())
            os.close(write_fd)

        code = 1
        try:
            code = run(ready)
        except HpsearchError as exc:
            try:
                os.write(write_fd, f"error {exc.exit_code} {exc}\n".encode())
            except OSError:
                print(f"hpsearch: {exc}", file=sys.stderr)
            code = exc.exit_code
        except BaseException:
            import traceback
            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(write_fd)
    os.waitpid(pid, 0)
    with os.fdopen(read_fd) as pipe:
        message = pipe.read().strip()
    if message.startswith("ok "):
        return int(message.split()[1])
    if message.startswith("error "):
        _, exit_code, text = message.split(" ", 2)
        err = HpsearchError(text)
        err.exit_code = int(exit_code)
        raise err
    raise HpsearchError(f"the background driver failed to start; see {log_path}")

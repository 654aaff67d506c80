"""Another user on the same machine (a group member of a shared project folder) cannot steer
an experiment they do not own: a real second Unix user (useradd, as the Slurm tests' second
user) writes into the experiment's folder while the owner's search runs.

Needs root (to create and become the second user); not as root these tests skip and say
why, and under CI=true (CI runs as root) they fail instead."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers import ensure_system_entry, read_store

OTHER = "hpsearch-other"


@pytest.fixture(scope="module")
def other_uid() -> int:
    """The uid of a second local user, created if missing."""
    if os.geteuid() != 0:
        reason = "needs root to create and become a second Unix user"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return ensure_system_entry(["useradd", "--system", "--no-create-home", "--shell",
                                "/usr/sbin/nologin"], pwd.getpwnam, OTHER).pw_uid


def _run_as(uid: int, folder: Path, script: str, *args: str) -> None:
    """As user `uid`, run the sh `script` in `folder` (given as a descriptor opened here, so
    the second user needs no access to the folders above it)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        subprocess.run(["/bin/sh", "-c", f'cd "/proc/self/fd/$0" && {script}', str(fd), *args],
                       pass_fds=[fd], user=uid, check=True, capture_output=True)
    finally:
        os.close(fd)


def _write_as(uid: int, folder: Path, name: str, data: dict) -> None:
    """As user `uid`, create folder/name with `data`, through a descriptor of the folder
    opened here (so the second user needs no access to the folders above it)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        # /bin/sh, not this venv's Python: the second user may not read the venv's folders
        script = 'cd "/proc/self/fd/$1" && set -C && printf "%s" "$3" > "$2" && id -u'
        proc = subprocess.run(["/bin/sh", "-c", script, "sh", str(fd), name, json.dumps(data)],
                              pass_fds=[fd], user=uid, capture_output=True, text=True,
                              check=True)
        assert int(proc.stdout) == uid  # it really ran as the other user
    finally:
        os.close(fd)


@pytest.mark.slow  # over 5 s in the quick tier on 2026-11-28 (docs/testing.md#tiers)
def test_another_users_request_cannot_grow_a_running_search(cli, other_uid):
    spec = cli.write_spec("""
        name: owned
        command: 'sleep 1; echo "@hpsearch step=0 loss={x}"'
        search: {strategy: random, trials: 4, parallel: 1, seed: 1,
                 space: {x: {type: float, low: 0, high: 1}}}
        objective: {metric: loss}
        """)
    driver = cli.popen("submit", spec)
    exp = cli.runs / "owned"
    deadline = time.monotonic() + 60
    while not (exp / "trials").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    folder = exp / "requests"
    folder.mkdir(exist_ok=True)
    os.chmod(folder, 0o777)  # as a setgid project folder with umask 002 leaves it
    name = f"trials-{time.time_ns():020d}-1.json"
    _write_as(other_uid, folder, name, {"id": "not-the-owner", "total": 30})
    assert (folder / name).stat().st_uid == other_uid
    out, err = driver.communicate(timeout=120)
    assert driver.returncode == 0, out + err
    experiment, trials = read_store(cli.runs, "owned")
    assert len(trials) == 4 and experiment.trials_requested == 4
    events = cli("events", "owned", check=0).stdout
    assert f"refused request file {folder / name}: owned by uid {other_uid}" in events


@pytest.fixture
def shared_tmp():
    """A folder every user may create in, as /tmp (mode 1777); short, since a Unix socket's
    path has at most 107 bytes."""
    import shutil
    import tempfile
    shared = Path(tempfile.mkdtemp(prefix="hps-", dir="/tmp"))
    os.chmod(shared, 0o1777)
    yield shared
    shutil.rmtree(shared, ignore_errors=True)


def _warm_env(shared: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_RUNTIME_DIR", "SLURM_JOB_ID",
                                                            "SLURM_STEP_ID")}
    env["TMPDIR"] = str(shared)
    return env


def _warm_run(shared: Path, script: Path, client: str = "full") -> subprocess.CompletedProcess:
    """A trial through the warm client (`full`: python -m hpsearch.warm run; `quick`: what
    `{python}` runs, hpsearch/warm/quick.py), with the temp folder `shared` and no XDG dir."""
    import sys

    from hpsearch.launch.attempt import QUICK_CLIENT
    argv = ([sys.executable, "-m", "hpsearch.warm", "run", "--preload", "json",
             "--idle-timeout", "5", "--"] if client == "full"
            else [sys.executable, "-I", "-S", str(QUICK_CLIENT), "json", "--"])
    return subprocess.run([*argv, str(script), "ok"], env=_warm_env(shared),
                          capture_output=True, text=True, timeout=60)


def _warm_socket(shared: Path, client: str = "full") -> Path:
    """The socket _warm_run's client connects to: the full client's is keyed by its sys.path
    too, so asked of a process started as that one is (tests/warm_socket.py), not computed
    here; the quick client's is the alias its server makes (hpsearch.warm.quick)."""
    import sys
    if client == "quick":
        from hpsearch.warm import quick
        env = _warm_env(shared)
        return Path(quick.folder(env)) / quick.alias_name(env, sys.executable, ["json"])
    return Path(subprocess.run([sys.executable, "-m", "tests.warm_socket", "json"],
                               env=_warm_env(shared), capture_output=True, text=True,
                               timeout=60, check=True).stdout.strip())


@pytest.mark.parametrize("client", ["full", "quick"])
def test_a_warm_folder_made_by_another_user_is_not_used(other_uid, tmp_path, shared_tmp,
                                                          cli, client):
    """Another user made the victim's warm folder first, in the shared temp folder: the
    victim's socket, lock, log and environment must not go there; the trial runs cold and
    says why."""
    shared = shared_tmp
    theirs = shared / f"hpsearch-warm-{os.geteuid()}"
    fd = os.open(shared, os.O_RDONLY | os.O_DIRECTORY)
    try:
        subprocess.run(["/bin/sh", "-c", 'cd "/proc/self/fd/$1" && mkdir -m 777 "$2"', "sh",
                        str(fd), theirs.name], pass_fds=[fd], user=other_uid, check=True)
    finally:
        os.close(fd)
    assert theirs.stat().st_uid == other_uid
    script = tmp_path / "trial.py"
    script.write_text("import sys\nprint('ran', sys.argv[1])\n")
    for _ in range(2):  # the second run would be the warm one
        proc = _warm_run(shared, script, client)
        assert proc.returncode == 0 and proc.stdout == "ran ok\n", proc.stderr
        assert (f"warm starts are off on this node: {theirs} is owned by uid {other_uid}"
                in proc.stderr)
    spec = cli.write_spec("""
        name: warm-off
        command: '{python} -c "print(\\"@hpsearch step=0 loss={x}\\")"'
        search: {strategy: grid, space: {x: {choices: [1, 2]}}}
        objective: {metric: loss}
        executor: {type: local, warm: [json]}
        """)
    env = {"TMPDIR": str(shared_tmp), "XDG_RUNTIME_DIR": ""}
    cli("submit", spec, env=env, check=0)
    events = cli("events", "warm-off", check=0).stdout
    assert f"warm starts are off on this node, trials run cold: {theirs} is owned" in events
    assert list(theirs.iterdir()) == []  # no socket, lock or log of the victim's in it


@pytest.mark.parametrize("client", ["full", "quick"])
def test_a_socket_another_user_listens_on_gets_nothing(other_uid, tmp_path, shared_tmp,
                                                       monkeypatch, client):
    """A server run by another user at the victim's socket path (as if planted) would get
    the victim's environment and stdio and could forge its metrics: the client checks the
    server's uid (SO_PEERCRED), sends nothing, and runs the trial cold."""
    import socket

    shared = shared_tmp
    path = _warm_socket(shared, client)
    path.parent.mkdir(mode=0o700)  # the victim's own, private folder
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    got_read, got_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the other user's server: listen() records its uid for SO_PEERCRED
        try:
            os.close(got_read)
            os.setgid(other_uid)
            os.setuid(other_uid)
            listener.listen(1)
            conn, _ = listener.accept()
            conn.settimeout(10)
            data = b""
            try:
                while chunk := conn.recv(65536):
                    data += chunk
            except OSError:
                pass
            os.write(got_write, str(len(data)).encode())
        finally:
            os._exit(0)
    os.close(got_write)
    listener.close()
    script = tmp_path / "trial.py"
    script.write_text("import sys\nprint('ran', sys.argv[1])\n")
    time.sleep(0.5)  # the child listens
    proc = _warm_run(shared, script, client)
    import select
    ready, _, _ = select.select([got_read], [], [], 30)  # the server tells what it received
    assert ready, ("the other user's server was never reached: not the client's socket?",
                   path, proc.stdout, proc.stderr)
    received = os.read(got_read, 64)
    os.close(got_read)
    os.waitpid(pid, 0)
    assert proc.returncode == 0 and proc.stdout == "ran ok\n", proc.stderr
    assert f"the server at {path} does not run as this user" in proc.stderr
    assert received == b"0"  # not a byte of the request (argv, environment)


@pytest.mark.slow  # 3.4 s in the quick tier (2026-11-30): over its 3 s rule
def test_an_assignment_another_user_drops_in_a_pilots_inbox_is_never_run(other_uid, tmp_path):
    """A pilot runs what its inbox holds as the owner: a group member who can write the
    folder must not get a command run that way. The owner's assignment runs; the other
    user's is left unclaimed, and the pilot's log names it."""
    from hpsearch.pilot import protocol
    from tests.test_pilot_protocol import REPORT, _driver_beat, _launch, _pilot, _wait_for
    beat = _driver_beat(tmp_path)
    paths, proc = _pilot(tmp_path, stderr=subprocess.PIPE, slots_per_node=2)
    os.chmod(paths.dir("inbox"), 0o777)  # as a group-writable project folder leaves it
    marker = tmp_path / "ran-as-the-owner"
    theirs = protocol.name_of(1, 1)
    _write_as(other_uid, paths.dir("inbox"), theirs,
              protocol.launch_to_dict(_launch(tmp_path, 1, command=f"touch {marker}")))
    protocol.write_json(paths.file("inbox", protocol.name_of(0, 1)),
                        protocol.launch_to_dict(_launch(tmp_path, 0, command=REPORT)))
    _wait_for(lambda: protocol.names(paths.dir("ended")) == [protocol.name_of(0, 1)], beat)
    for _ in range(20):  # the pilot looks at its inbox every few tenths of a second
        _wait_for(lambda: True, beat)
        time.sleep(0.1)
    assert not marker.exists()
    assert protocol.names(paths.dir("inbox")) == [theirs]  # never claimed
    assert protocol.names(paths.dir("claimed")) == [protocol.name_of(0, 1)]
    paths.stop.touch()
    assert proc.wait(timeout=30) == 0
    assert f"refused {paths.file('inbox', theirs)}: owned by uid {other_uid}" in \
        proc.stderr.read()


SMALL = """
    name: {name}
    command: 'echo "@hpsearch step=0 loss={{x}}"'
    search: {{strategy: grid, space: {{x: {{choices: [1]}}}}}}
    objective: {{metric: loss}}
    """


def test_experiment_folders_are_private_whatever_the_umask(cli, other_uid):
    """Under a project space's umask 002 the runs dir and the experiment folder are made
    0700: another user can neither list nor read anything of the experiment."""
    old = os.umask(0o002)  # group-writable by default
    try:
        cli("submit", cli.write_spec(SMALL.format(name="private")), check=0)
    finally:
        os.umask(old)
    for folder in (cli.runs, cli.runs / "private"):
        assert folder.stat().st_mode & 0o777 == 0o700, folder
    store = cli.runs / "private" / "store.sqlite"
    os.chmod(cli.cwd, 0o755)  # the project folder above the runs dir: open to all
    fd = os.open(cli.cwd, os.O_RDONLY | os.O_DIRECTORY)
    try:  # as the other user, from a folder it is given (not the ones above it)
        proc = subprocess.run(["/bin/sh", "-c", 'cd "/proc/self/fd/$1" && ls hpsearch-runs; '
                               'cat hpsearch-runs/private/store.sqlite', "sh", str(fd)],
                              pass_fds=[fd], user=other_uid, capture_output=True, text=True)
    finally:
        os.close(fd)
    assert proc.stdout == "" and proc.stderr.count("Permission denied") == 2, proc.stderr
    assert store.stat().st_size > 0


def test_a_folder_others_can_write_or_own_is_refused_with_how_to_fix_it(cli, other_uid):
    spec = cli.write_spec(SMALL.format(name="refused"))
    cli.runs.mkdir()
    os.chmod(cli.runs, 0o775)  # group-writable: a group member could make 'refused' first
    proc = cli("submit", spec, check=2)
    assert f"runs dir {cli.runs} is writable by others (mode 775)" in proc.stderr
    assert f"chmod go-w {cli.runs}" in proc.stderr
    assert list(cli.runs.iterdir()) == []  # nothing made, nothing half-written
    os.chmod(cli.runs, 0o700)
    (cli.runs / "refused").mkdir()
    os.chown(cli.runs / "refused", other_uid, -1)  # as if another user had made it first
    proc = cli("submit", spec, check=2)
    assert (f"experiment folder {cli.runs / 'refused'} belongs to uid {other_uid}"
            in proc.stderr), proc.stderr
    assert list((cli.runs / "refused").iterdir()) == []
    (cli.runs / "refused").rmdir()
    (cli.runs / "refused").symlink_to(cli.cwd)
    proc = cli("submit", spec, check=2)
    assert "is a symbolic link" in proc.stderr
    assert not (cli.cwd / "driver.lock").exists() and not (cli.cwd / "store.sqlite").exists()


# -- files whose presence is the signal, and trial output (issue 22, item 3) ----------------

@pytest.mark.slow  # over 5 s in the quick tier on 2026-11-28 (docs/testing.md#tiers)
def test_a_stop_and_a_cancel_another_user_plants_in_a_pilot_dir_are_not_obeyed(other_uid,
                                                                                 tmp_path):
    """A group member who can write a pilot's folder must not stop the pilot nor cancel its
    trials: their `stop` and `cancel/T.A.json` are passed over, and so is a FIFO as `stop`
    (looked at with lstat, never opened); the pilot's log names each once. The owner's
    `stop` still works."""
    from hpsearch.pilot import protocol
    from tests.test_pilot_protocol import REPORT, _driver_beat, _launch, _pilot, _wait_for
    beat = _driver_beat(tmp_path)
    paths, proc = _pilot(tmp_path, stderr=subprocess.PIPE)
    for folder in (paths.root, paths.dir("cancel")):
        os.chmod(folder, 0o777)  # as a group-writable project folder leaves them
    name = protocol.name_of(0, 1)
    protocol.write_json(paths.file("inbox", name),
                        protocol.launch_to_dict(_launch(tmp_path, 0, command="sleep 3; " + REPORT)))
    _wait_for(lambda: protocol.names(paths.dir("started")) == [name], beat)
    _write_as(other_uid, paths.dir("cancel"), name, {})
    _write_as(other_uid, paths.root, "stop", {})
    _wait_for(lambda: protocol.names(paths.dir("ended")) == [name], beat)
    assert protocol.read_json(paths.file("ended", name))["reason"] == "exited"  # not cancelled
    os.unlink(paths.stop)
    _run_as(other_uid, paths.root, "mkfifo stop")
    for _ in range(10):  # the pilot looks at `stop` every few hundredths of a second
        _wait_for(lambda: True, beat)
        time.sleep(0.1)
    assert proc.poll() is None and protocol.read_json(paths.heartbeat)["state"] == "running"
    os.unlink(paths.stop)
    paths.stop.touch()  # the owner's
    assert proc.wait(timeout=30) == 0
    assert protocol.read_json(paths.exit)["reason"] == "the driver asked it to stop"
    log = proc.stderr.read()
    for refused in (f"{paths.file('cancel', name)}: owned by uid {other_uid}",
                    f"{paths.stop}: owned by uid {other_uid}",
                    f"{paths.stop}: not a regular file"):
        assert log.count(f"refused {refused}") == 1, log


def test_trial_output_another_user_wrote_is_not_read(other_uid, tmp_path):
    """metrics.jsonl, checkpoints.jsonl and result.json another user put in a trial dir
    give no metric, checkpoint or result; one warning names each. The owner's stdout.log
    beside them is read."""
    from hpsearch.ingest.checkpoints import CheckpointScan
    from hpsearch.ingest.trial_files import TrialFiles
    from hpsearch.trial import CHECKPOINT_MANIFEST
    trial_dir = tmp_path / "trial"
    trial_dir.mkdir(mode=0o777)
    os.chmod(trial_dir, 0o777)
    _write_as(other_uid, trial_dir, "metrics.jsonl", {"step": 0, "loss": 0.125})
    _write_as(other_uid, trial_dir, "result.json", {"loss": 0.125})
    _write_as(other_uid, trial_dir, CHECKPOINT_MANIFEST, {"step": 9, "path": "step-9"})
    (trial_dir / "stdout.log").write_text("@hpsearch step=1 loss=0.5\n")
    files = TrialFiles(trial_dir)
    assert [r["loss"] for r in files.read_new(final=True)] == [0.5]
    assert files.result() is None
    owned = f"owned by uid {other_uid}, not by the experiment's owner (uid {os.geteuid()})"
    assert files.warnings == [f"metrics.jsonl: ignored: {owned}; not read",
                              f"result.json: ignored: {owned}"]
    scan = CheckpointScan(trial_dir)
    (trial_dir / "checkpoints").mkdir()
    (trial_dir / "checkpoints" / "step-9").write_text("weights")
    assert [c["step"] for c in scan.new()] == [9]  # by its name, not by their manifest
    assert scan.steps == {} and scan.warnings == [f"{CHECKPOINT_MANIFEST}: {owned}; not read"]


def test_a_stop_file_another_user_wrote_does_not_stop_a_trial(other_uid, tmp_path):
    trial_dir = tmp_path / "trial"
    trial_dir.mkdir()
    os.chmod(trial_dir, 0o777)
    _write_as(other_uid, trial_dir, "STOP", {})
    code = "from hpsearch import trial; print(trial.should_stop(), trial.should_stop())"
    env = {**os.environ, "HPSEARCH_TRIAL_DIR": str(trial_dir)}

    def should_stop() -> subprocess.CompletedProcess:
        import sys
        return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                              text=True, timeout=60, check=True)
    proc = should_stop()
    assert proc.stdout == "False False\n"
    assert proc.stderr == (f"hpsearch.trial: ignored {trial_dir / 'STOP'}: owned by uid "
                           f"{other_uid}, not by this user (uid {os.geteuid()})\n")  # once
    (trial_dir / "STOP").unlink()
    (trial_dir / "STOP").touch()  # the driver's
    assert should_stop().stdout == "True True\n"


def test_a_cancel_request_another_user_wrote_cancels_nothing(other_uid, tmp_path, capfd):
    """A driver job reads `cancel.request` when Slurm sends it SIGTERM: another user's file
    must not turn a preemption into a cancel. `hpsearch cancel` replaces whatever is at the
    request's path (a link included) instead of writing through it."""
    from hpsearch.driver import slurm_job
    exp = tmp_path / "exp"
    exp.mkdir()
    os.chmod(exp, 0o777)
    _write_as(other_uid, exp, slurm_job.CANCEL_REQUEST, {})
    assert not slurm_job.cancel_requested(exp)
    assert not slurm_job.cancel_requested(exp)
    assert capfd.readouterr().err.count(f"refused {exp / slurm_job.CANCEL_REQUEST}: owned "
                                         f"by uid {other_uid}") == 1
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (exp / slurm_job.CANCEL_REQUEST).unlink()
    (exp / slurm_job.CANCEL_REQUEST).symlink_to(victim)
    assert not slurm_job.cancel_requested(exp)
    slurm_job.request_cancel(exp)
    assert victim.read_text() == "precious" and slurm_job.cancel_requested(exp)


def test_another_users_pilot_pickle_is_never_loaded(other_uid, tmp_path):
    """submitit would unpickle, and so run, whatever is at the pilot's pickle path."""
    from tests.test_pilot_submitted import assert_refused, run_on_node, submitted
    folder, pickle, marker = submitted(tmp_path)
    os.chown(pickle, other_uid, -1)
    assert_refused(run_on_node(folder), pickle, marker, f"owned by uid {other_uid}")

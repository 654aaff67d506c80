"""`share: group` (issue 22, item 2): an experiment's results are readable by the group of
its folder, never writable by it, whatever the umask; its control folders stay the owner's.

The group-member test needs root (to create a group and run commands as the second user
of tests/test_other_users.py); not as root it skips and says why, and under CI=true (CI
runs as root) it fails instead. The second user joins the test's own group only for the
commands it runs (`extra_groups`), not in /etc/group: the owner here is root, and putting
another user in root's group would open every root:root 0750 folder on the machine."""

from __future__ import annotations

import grp
import hashlib
import os
import pwd
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import pytest

from hpsearch.errors import BadInput
from hpsearch.preflight import parse_spec
from hpsearch.store.store import Store
from tests.helpers import ensure_system_entry

OTHER, GROUP = "hpsearch-other", "hpsearch-share"
ROOT = Path(__file__).resolve().parent.parent
SPEC = """
    name: {name}
    command: 'while [ ! -e "{go}" ]; do sleep 0.05; done; echo "@hpsearch step=0 loss={{x}}"'
    search: {{strategy: grid, space: {{x: {{choices: [1, 2]}}}}}}
    objective: {{metric: loss}}
    share: {share}
    """


def _modes(root: Path) -> dict[str, int]:
    """relative path -> permission bits (setgid included) of everything under root."""
    return {str(p.relative_to(root)): stat.S_IMODE(p.lstat().st_mode) for p in root.rglob("*")}


def test_share_is_checked_with_file_line_and_key(tmp_path):
    text = ("name: demo\ncommand: run {x}\nobjective: {metric: loss}\nsearch:\n"
            "  strategy: random\n  trials: 1\n  space: {x: {low: 0, high: 1}}\n")
    assert parse_spec(text, "s.yaml", tmp_path).share == "private"
    assert parse_spec(text + "share: group\n", "s.yaml", tmp_path).share == "group"
    with pytest.raises(BadInput) as err:
        parse_spec(text + "share: grop\n", "s.yaml", tmp_path)
    assert (err.value.line, err.value.key) == (8, "share")
    assert err.value.detail == ("unknown share 'grop'; expected one of private, group; "
                                "did you mean 'group'?")


@pytest.mark.parametrize("umask", [0o002, 0o077], ids=["umask-002", "umask-077"])
def test_shared_results_are_group_readable_never_group_writable(cli, umask):
    (cli.cwd / "go").touch()
    spec = cli.write_spec(SPEC.format(name="shared", go=cli.cwd / "go", share="group"))
    old = os.umask(umask)
    try:
        cli("submit", spec, check=0)
    finally:
        os.umask(old)
    exp = cli.runs / "shared"
    assert stat.S_IMODE(cli.runs.stat().st_mode) == 0o750  # made by hpsearch
    modes = _modes(exp)
    assert stat.S_IMODE(exp.stat().st_mode) == 0o750
    assert modes["store.sqlite"] == 0o640
    assert modes["requests"] == modes["pilots"] == 0o700
    for trial in ("trials/00000", "trials/00001"):
        assert modes[trial] == 0o750
        assert modes[f"{trial}/params.json"] == modes[f"{trial}/stdout.log"] == 0o640
    assert {p: oct(m) for p, m in modes.items() if m & 0o027} == {}  # no group w, no others


@pytest.mark.parametrize("storage", ["local", "network"])
def test_the_stores_journal_takes_the_stores_mode_not_the_umask(tmp_path, monkeypatch, storage):
    """The store is created under the driver's umask 027; SQLite gives its -journal (a
    shared filesystem's rollback journal) or -wal and -shm the store's own mode."""
    monkeypatch.setenv("HPSEARCH_STORAGE", storage)
    path = tmp_path / "store.sqlite"
    old = os.umask(0o027)
    try:
        Store.create(path, name="e", spec_yaml="x: 1\n", spec_file="s.yaml", base_dir="/",
                     strategy="random", directions=["minimize"], trials_requested=3).close()
        os.umask(0o077)
        store = Store(path)
        store.db.conn.execute("begin immediate")
        store.db.conn.execute("insert into events (time, kind, message) values (0, 'x', 'y')")
        journals = [p for p in tmp_path.iterdir() if p != path]
        assert {p.name[len(path.name):] for p in journals} == (
            {"-journal"} if storage == "network" else {"-wal", "-shm"})
        assert {stat.S_IMODE(p.stat().st_mode) for p in journals} == {0o640}
        store.db.conn.execute("rollback")
        store.close()
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


# -- a real group member -------------------------------------------------------------------

@pytest.fixture(scope="module")
def member() -> tuple[int, int, int]:
    """(uid, primary gid, shared group's gid) of the second user and a group made for the
    test, each created if missing."""
    if os.geteuid() != 0:
        reason = "needs root to create a group and become a second Unix user"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    if not os.access("/usr/bin/python3", os.X_OK) or subprocess.run(
            ["/usr/bin/python3", "-c", f"import sys; sys.exit(sys.version_info[:2] != "
             f"{tuple(sys.version_info[:2])})"]).returncode:
        pytest.skip(f"the second user runs hpsearch with /usr/bin/python3 (it cannot reach "
                    f"this venv's interpreter), which must be Python {sys.version_info[:2]}")
    for make, lookup, name in ((["useradd", "--system", "--no-create-home", "--shell",
                                 "/usr/sbin/nologin"], pwd.getpwnam, OTHER),
                               (["groupadd", "--system"], grp.getgrnam, GROUP)):
        ensure_system_entry(make, lookup, name)
    user = pwd.getpwnam(OTHER)
    return user.pw_uid, user.pw_gid, grp.getgrnam(GROUP).gr_gid


@pytest.fixture
def project(member):
    """A project space of the shared group, as sites make them: setgid, group-writable,
    under /tmp (the second user can reach it; pytest's own folders are root's alone). With
    the sticky bit: without it hpsearch refuses a runs dir there, since a group member could
    rename it away (tests/test_site_acl.py)."""
    folder = Path(tempfile.mkdtemp(prefix="hps-project-", dir="/tmp"))
    os.chown(folder, -1, member[2])
    os.chmod(folder, 0o3770)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _as_member(member, *args: str, in_group: bool = True) -> subprocess.CompletedProcess:
    """`hpsearch ARGS` as the second user, in the shared group or not. This venv's
    interpreter lives under /root: the system's Python runs this tree's code and packages."""
    uid, gid, shared = member
    path = os.pathsep.join([str(ROOT), sysconfig.get_paths()["purelib"]])
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": path, "PYTHONDONTWRITEBYTECODE": "1",
           "HOME": "/nonexistent"}
    return subprocess.run(["/usr/bin/python3", "-m", "hpsearch", *args], user=uid, group=gid,
                          extra_groups=[shared] if in_group else [], cwd="/", env=env,
                          capture_output=True, text=True, timeout=120)


def _fingerprint(folder: Path) -> dict[str, tuple]:
    """Every file under folder: its size, mtime and content hash."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns,
                                         hashlib.sha256(p.read_bytes()).hexdigest())
            for p in folder.rglob("*") if p.is_file()}


@pytest.mark.slow  # 3.8 s in the quick tier (2026-11-30): over its 3 s rule
def test_a_group_member_reads_a_shared_experiment_and_never_writes_it(cli, member, project):
    go = cli.cwd / "go"
    spec = cli.write_spec(SPEC.format(name="shared", go=go, share="group"))
    runs = project / "runs"
    old = os.umask(0o002)  # the project space's
    try:
        driver = cli.popen("submit", spec, env={"HPSEARCH_RUNS_DIR": str(runs)})
    finally:
        os.umask(old)
    exp = runs / "shared"
    try:
        deadline = time.monotonic() + 60
        while not (exp / "trials" / "00000" / "params.json").exists():
            assert driver.poll() is None and time.monotonic() < deadline, driver.communicate()
            time.sleep(0.05)
        # while the driver writes (a local filesystem: WAL, its -shm not writable here)
        proc = _as_member(member, "status", "shared", "--runs-dir", str(runs))
        assert proc.returncode == 0 and "experiment shared: running" in proc.stdout, proc
    finally:
        go.touch()
        out, err = driver.communicate(timeout=120)
    assert driver.returncode == 0, out + err
    for folder in (runs, exp):  # 0750, and setgid kept: what is made there is the group's
        assert stat.S_IMODE(folder.stat().st_mode) == 0o2750, folder
        assert folder.stat().st_gid == member[2]
    assert (exp / "store.sqlite").stat().st_gid == member[2]
    before = _fingerprint(exp)
    for args, shown in ((("status",), "shared  completed"), (("status", "shared"), "loss=2"),
                        (("best", "shared"), "params: x=1"), (("export", "shared"), "param_x")):
        proc = _as_member(member, *args, "--runs-dir", str(runs))  # the driver gone
        assert proc.returncode == 0 and shown in proc.stdout, proc
    assert _fingerprint(exp) == before  # readers never write the store, nor anything else
    uid, gid, shared = member
    for script in ('touch "$1/planted"', ': >> "$1/store.sqlite"',
                   'mkdir "$1/requests/x" || ls "$1/requests"', 'ls "$1/pilots"'):
        proc = subprocess.run(["/bin/sh", "-c", script, "sh", str(exp)], user=uid, group=gid,
                              extra_groups=[shared], capture_output=True, text=True)
        assert proc.returncode != 0 and "Permission denied" in proc.stderr, (script, proc)
    proc = _as_member(member, "status", "shared", "--runs-dir", str(runs), in_group=False)
    assert proc.returncode != 0 and "Permission denied" in proc.stderr, proc


def test_a_group_member_cannot_read_a_private_experiment(cli, member, project):
    (cli.cwd / "go").touch()
    spec = cli.write_spec(SPEC.format(name="mine", go=cli.cwd / "go", share="private"))
    runs = project / "runs"
    old = os.umask(0o002)
    try:
        cli("submit", spec, env={"HPSEARCH_RUNS_DIR": str(runs)}, check=0)
    finally:
        os.umask(old)
    assert stat.S_IMODE(runs.stat().st_mode) == stat.S_IMODE((runs / "mine").stat().st_mode) \
        == 0o2700
    before = _fingerprint(runs / "mine")
    for args in (("status", "mine"), ("best", "mine"), ("export", "mine")):
        proc = _as_member(member, *args, "--runs-dir", str(runs))
        assert proc.returncode != 0 and "Permission denied" in proc.stderr, proc
        assert "x=" not in proc.stdout
    assert _fingerprint(runs / "mine") == before

"""`hpsearch dashboard NAME`: optuna-dashboard on a mirror kept up to date while the search
runs, browsed while its driver runs (its API, and headless Chromium: the trials listed, a
screenshot); without optuna-dashboard, a clear message and exit 2."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import stat
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from hpsearch.store.rows import FINISHED
from hpsearch.store.runs import STORE_FILE
from tests.conftest import Cli
from tests.helpers import read_store, wait_for_trials
from tests.interop_search import SPEC, run_search
from tests.test_other_users import _run_as, other_uid  # noqa: F401  (a fixture)


def _chromium() -> str:
    """The headless browser (as tests/test_report.py finds it): a skip without one, a
    failure on CI."""
    found = next(filter(None, map(shutil.which, ("chromium", "chromium-browser",
                                                 "google-chrome"))), None)
    if found is None and os.environ.get("CI"):
        pytest.fail("CI is set, so the dashboard test must run, but chromium is not "
                    "installed (scripts/test.sh installs it as root)", pytrace=False)
    return found or pytest.skip("chromium is not installed (scripts/test.sh installs it)")


def _browse(cli, url: str, *args: str) -> str:
    """Open `url` in headless Chromium (8 s of virtual time for the page's own requests);
    returns what it printed on stdout."""
    proc = subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu",
                           "--disable-dev-shm-usage", "--window-size=1400,900",
                           "--virtual-time-budget=8000", *args, url],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HOME": str(cli.cwd)})
    return proc.stdout


def _text(dom: str) -> str:
    dom = re.sub(r"(?s)<style.*?</style>|<script.*?</script>", "", dom)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", dom))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Trial 1 (x=1, lr=0.02) waits after its step-1 report while the file HOLD exists: the search
# runs until the test lets it go. The 7 others run to their ends meanwhile, in the other slot.
HOLD = "hold"
GATE = "while [ $s = 1 ] && [ $HPSEARCH_TRIAL_ID = 1 ] && [ -e {hold} ]; do sleep 0.05; done; "
STATES = {"completed": "Complete", "running": "Running", "failed": "Fail", "pruned": "Pruned"}


DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # no http_proxy


def _api(base: str, path: str):
    with DIRECT.open(base + path, timeout=30) as reply:
        return json.load(reply)


def _mirrored_trials(base: str, timeout: float, ready) -> list[dict]:
    """The trials the dashboard's API shows, once ready(trials) holds (the server prints
    its address before it listens: refused connections are asked again)."""
    deadline = time.monotonic() + timeout
    trials: object = "no answer"
    while True:
        try:
            studies = _api(base, "/api/studies")["study_summaries"]
            trials = _api(base, f"/api/studies/{studies[0]['study_id']}")["trials"] \
                if studies else "no study"
            if isinstance(trials, list) and ready(trials):
                return trials
        except OSError as exc:  # refused (URLError), or cut off
            trials = exc
        assert time.monotonic() < deadline, trials
        time.sleep(0.2)


def _number(trials: list[dict], number: int) -> dict:
    return next((t for t in trials if t["number"] == number), {})


def test_dashboard_shows_a_search_while_its_driver_runs_it(cli):
    """Browsed while the driver runs (trial 1 held, the 7 others ended): the API and the
    page show each ended trial with its state and objective value as the store has them, and
    trial 1 running with its reports so far; the search then ends unharmed, with all its
    trials, and the mirror's last sync shows trial 1 complete."""
    pytest.importorskip("optuna_dashboard")
    hold = cli.cwd / HOLD
    hold.touch()
    spec = cli.write_spec(SPEC.format(name="interop", parallel=2,
                                      sleep=GATE.format(hold=hold)), "interop.yaml")
    driver = cli.popen("submit", spec)
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    server = None
    try:
        wait_for_trials(cli, "interop", lambda rows: bool(rows), timeout=60)
        server = cli.popen("dashboard", "interop", "--port", port, "--interval", "0.2",
                           "--storage", cli.cwd / "mirror.log")
        rows = wait_for_trials(cli, "interop", lambda rows: len(rows) == 8 and [
            t.id for t in rows if t.state not in FINISHED] == [1], timeout=60)
        url = None
        while url is None:  # its first line: the first sync; then the address
            line = server.stdout.readline()
            assert line, server.stderr.read()
            found = re.search(r"http://\S+", line)
            url = found and found.group(0)
        assert url == f"{base}/dashboard/"
        trials = _mirrored_trials(base, 30, lambda trials: len(trials) == 8 and len(
            _number(trials, 1).get("intermediate_values", ())) == 2)
        assert driver.poll() is None, "the driver must still run while it is browsed"
        assert {t.id: t.state for t in rows} == {
            0: "completed", 1: "running", 2: "completed", 3: "completed", 4: "failed",
            5: "failed", 6: "pruned", 7: "pruned"}, rows
        shown = {t["number"]: t for t in trials}
        for row in rows:
            trial = shown[row.id]
            assert trial["state"] == STATES[row.state], (row, trial)
            assert {a["key"]: a["value"] for a in trial["user_attrs"]}["hpsearch_trial"] == \
                str(row.id)
            if row.state == "completed":
                assert trial["values"] == row.objective_values, (row, trial)
        assert [shown[n]["values"] for n in (0, 2, 3)] == [[1.0], [4.0], [4.0]]  # x * x
        assert "values" not in shown[1]  # none yet
        assert shown[1]["intermediate_values"] == [{"step": 0, "value": 3.0},
                                                   {"step": 1, "value": 2.0}]

        home = _text(_browse(cli, url, "--dump-dom"))
        assert "interop" in home and "MINIMIZE" in home, home
        page = _text(_browse(cli, url + "studies/0/trials", "--dump-dom"))
        assert "8 Trials" in page, page
        for number, state in [(0, "Complete"), (1, "Running"), (4, "Fail"), (6, "Pruned")]:
            assert f"Trial {number} {state}" in page, page
        shot = cli.cwd / "dashboard.png"
        _browse(cli, url + "studies/0", f"--screenshot={shot}")
        data = shot.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        assert (int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")) == \
            (1400, 900)
        assert len(data) > 30_000  # figures drawn, not a blank page
        if os.environ.get("HPSEARCH_KEEP_SCREENSHOT"):
            shutil.copy(shot, os.environ["HPSEARCH_KEEP_SCREENSHOT"])
        assert driver.poll() is None, "the driver must still run while it is browsed"

        hold.unlink()  # trial 1 goes on: the search ends
        out, err = driver.communicate(timeout=60)
        assert driver.returncode == 1, (out, err)  # some trials fail, by design
        ended = read_store(cli.runs, "interop")[1]
        assert {t.id: t.state for t in ended} == {**{t.id: t.state for t in rows},
                                                   1: "completed"}
        assert ended[1].objective_values == [1.0]
        with contextlib.closing(sqlite3.connect(
                f"file:{cli.runs / 'interop' / STORE_FILE}?mode=ro", uri=True)) as db:
            assert db.execute("pragma integrity_check").fetchone() == ("ok",)
        final = _mirrored_trials(base, 30, lambda trials: _number(trials, 1).get(
            "state") == "Complete")  # the mirror's last sync, after the driver ended
        assert len(final) == 8 and _number(final, 1)["values"] == [1.0]
    finally:
        hold.unlink(missing_ok=True)
        if driver.poll() is None:
            driver.kill()
        if server is not None:
            server.terminate()
            server.wait(timeout=30)


def test_without_optuna_dashboard_it_says_what_to_install(cli):
    run_search(cli)
    shadow = cli.cwd / "shadow" / "optuna_dashboard"  # an optuna_dashboard that fails to import
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError(\"No module named "
                                        "'optuna_dashboard'\")\n")
    path = os.pathsep.join(filter(None, [str(shadow.parent), os.environ.get("PYTHONPATH")]))
    proc = cli("dashboard", "interop", env={"PYTHONPATH": path}, check=2)
    assert "pip install 'hpsearch[dashboard]'" in proc.stderr and proc.stdout == ""


# -- other users of the machine (issue 37 item 3) ----------------------------------------------

@pytest.fixture(scope="module")
def searched(tmp_path_factory) -> Cli:
    """One finished interop search, shared by the tests below."""
    cli = Cli(tmp_path_factory.mktemp("dashboard"))
    run_search(cli)
    return cli


def _shared_tmp(cli, name: str) -> dict:
    """The environment of a login node without $XDG_RUNTIME_DIR whose temp folder is shared
    by everyone, as /tmp (sticky, 1777)."""
    tmp = cli.cwd / name
    tmp.mkdir()
    os.chmod(tmp, 0o1777)
    return {"TMPDIR": str(tmp), "XDG_RUNTIME_DIR": ""}


def _fake_dashboard(cli) -> dict:
    """An optuna_dashboard whose run_server returns at once, saying what it was given."""
    fake = cli.cwd / "fake" / "optuna_dashboard"
    fake.mkdir(parents=True, exist_ok=True)
    (fake / "__init__.py").write_text(
        "def run_server(storage, host, port):\n"
        "    print('served', type(storage).__name__, host, port)\n")
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(fake.parent),
                                                        os.environ.get("PYTHONPATH")]))}


def test_a_mirror_folder_another_user_made_first_is_refused(searched, request):
    """Before: /tmp/hpsearch-dashboard-UID was used with exist_ok and no owner check: a
    user who made it first (open to all) read the mirror, or swapped the journal for a link."""
    other = request.getfixturevalue("other_uid")  # a real second user (needs root)
    env = _shared_tmp(searched, "tmp-taken")
    folder = Path(env["TMPDIR"]) / f"hpsearch-dashboard-{os.geteuid()}"
    _run_as(other, Path(env["TMPDIR"]), f"mkdir -m 777 {folder.name}")
    proc = searched("dashboard", "interop", env=env, timeout=30, check=2)
    assert f"{folder} is owned by uid {other}, not by this user" in proc.stderr, proc.stderr
    assert "give --storage" in proc.stderr
    assert list(folder.iterdir()) == []


def test_a_mirror_folder_open_to_others_is_refused(searched):
    env = _shared_tmp(searched, "tmp-open")
    folder = Path(env["TMPDIR"]) / f"hpsearch-dashboard-{os.geteuid()}"
    folder.mkdir()
    os.chmod(folder, 0o777)
    proc = searched("dashboard", "interop", env=env, timeout=30, check=2)
    assert f"{folder} is open to other users (mode 777)" in proc.stderr, proc.stderr
    assert list(folder.iterdir()) == []


def test_it_says_who_can_connect_to_its_port(searched):
    """The default mirror goes to $XDG_RUNTIME_DIR/hpsearch-dashboard-UID (0700), and the
    dashboard says at start that a loopback port is open to every user of the machine."""
    runtime = searched.cwd / "run-user"
    runtime.mkdir(mode=0o700)
    env = {**_fake_dashboard(searched), "XDG_RUNTIME_DIR": str(runtime)}
    proc = searched("dashboard", "interop", "--port", "8123", env=env, check=0)
    folder = runtime / f"hpsearch-dashboard-{os.geteuid()}"
    assert stat.S_IMODE(os.lstat(folder).st_mode) == 0o700
    assert [p.suffix for p in folder.iterdir()] == [".log"]
    assert "http://127.0.0.1:8123/dashboard/\nserved " in proc.stdout, proc.stdout
    assert "every user of this machine can connect to 127.0.0.1:8123" in proc.stderr
    assert "use --socket" in proc.stderr
    proc = searched("dashboard", "interop", "--host", "0.0.0.0", env=env, check=0)
    assert "anyone who can reach 0.0.0.0:8080 over the network can connect" in proc.stderr


def _get_unix(path: Path, url: str) -> dict:
    with socket.socket(socket.AF_UNIX) as conn:
        conn.settimeout(30)
        conn.connect(str(path))
        conn.sendall(f"GET {url} HTTP/1.0\r\nHost: localhost\r\n\r\n".encode())
        reply = b""
        while chunk := conn.recv(65536):
            reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200"), head
    return json.loads(body)


@pytest.mark.slow  # 6.1 s in the quick tier (2026-11-29): over its 5 s rule
def test_on_a_unix_socket_only_its_owner_can_connect(searched, request):
    """--socket: optuna-dashboard on a Unix socket in the owner-only runtime folder; it
    prints the socket and the ssh -L line, serves the owner, and another user cannot
    connect (the folder is 0700). Ctrl-C stops it and removes the socket, also where it
    was started with SIGINT ignored."""
    pytest.importorskip("optuna_dashboard")
    other = request.getfixturevalue("other_uid")
    runtime = Path(tempfile.mkdtemp(prefix="run-user-"))  # reachable by others, as /run/user
    os.chmod(runtime, 0o711)
    server = searched.popen("dashboard", "interop", "--socket",
                            env={"XDG_RUNTIME_DIR": str(runtime)})
    try:
        line = ""
        while "Unix socket" not in line:
            line = server.stdout.readline()
            assert line, server.stderr.read()
        path = Path(re.search(r"Unix socket (\S+)", line).group(1))
        assert path.parent == runtime / f"hpsearch-dashboard-{os.geteuid()}"
        assert f"ssh -N -L 8080:{path} " in line
        assert stat.S_IMODE(os.lstat(path.parent).st_mode) == 0o700
        deadline = time.monotonic() + 30
        while not path.exists():
            assert time.monotonic() < deadline and server.poll() is None, server.stderr.read()
            time.sleep(0.05)
        studies = _get_unix(path, "/api/studies")["study_summaries"]
        assert [s["study_name"] for s in studies] == ["interop"]
        probe = subprocess.run(
            ["/usr/bin/python3", "-c", "import socket, sys\n"
             "s = socket.socket(socket.AF_UNIX)\n"
             "try:\n    s.connect(sys.argv[1])\n"
             "except PermissionError:\n    print('refused')\n", str(path)],
            user=other, capture_output=True, text=True, timeout=30)
        assert probe.stdout == "refused\n", (probe.stdout, probe.stderr)
    finally:
        server.send_signal(signal.SIGINT)  # as Ctrl-C: the socket goes with it
        code = server.wait(timeout=30)
        shutil.rmtree(runtime, ignore_errors=True)
    assert not path.exists() and code == 0, code

"""`hpsearch dashboard NAME`: optuna-dashboard on a mirror kept up to date while the search
runs, checked in headless Chromium (the trials listed, a screenshot); without
optuna-dashboard, a clear message and exit 2."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time

import pytest

from hpsearch.store.store import STORE_FILE
from tests.interop_search import run_search, write_spec


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


def test_dashboard_lists_the_trials_of_a_running_search(cli):
    pytest.importorskip("optuna_dashboard")
    driver = cli.popen("submit", write_spec(cli, sleep=0.3, parallel=2))
    deadline = time.time() + 30
    while not (cli.runs / "interop" / STORE_FILE).exists() and time.time() < deadline:
        time.sleep(0.05)
    port = _free_port()
    server = cli.popen("dashboard", "interop", "--port", port, "--interval", "0.2",
                       "--storage", cli.cwd / "mirror.log")
    try:
        url = None
        while url is None:  # its first line: the first sync; then the address
            line = server.stdout.readline()
            assert line, server.stderr.read()
            found = re.search(r"http://\S+", line)
            url = found and found.group(0)
        assert url == f"http://127.0.0.1:{port}/dashboard/"
        assert driver.wait(timeout=60) == 1  # some trials fail, by design
        time.sleep(1.0)  # the mirror's last sync, after the driver ended
        home = _text(_browse(cli, url, "--dump-dom"))
        assert "interop" in home and "MINIMIZE" in home, home
        trials = _text(_browse(cli, url + "studies/0/trials", "--dump-dom"))
        assert "8 Trials" in trials, trials
        for number, state in [(0, "Complete"), (1, "Complete"), (4, "Fail"), (6, "Pruned")]:
            assert f"Trial {number} {state}" in trials, trials
        shot = cli.cwd / "dashboard.png"
        _browse(cli, url + "studies/0", f"--screenshot={shot}")
        data = shot.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        assert (int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")) == \
            (1400, 900)
        assert len(data) > 30_000  # figures drawn, not a blank page
        if os.environ.get("HPSEARCH_KEEP_SCREENSHOT"):
            shutil.copy(shot, os.environ["HPSEARCH_KEEP_SCREENSHOT"])
    finally:
        driver.kill() if driver.poll() is None else None
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

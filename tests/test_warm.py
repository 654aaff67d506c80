"""Warm starts (executor.warm, hpsearch.warm) on the local executor, through the real CLI:
`{python}` trials are forked from a server that imported the preloaded modules once; the
first trial starts the server and runs cold. Exit codes, signals, early stopping and the
trial's environment work as for a cold process."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

from hpsearch.launch.attempt import QUICK_CLIENT
from tests.helpers import read_store

# `fractions` stands in for torch: a module nothing else here imports at start.
PROBE = textwrap.dedent("""
    import os, sys, time
    warm = "fractions" in sys.modules
    from hpsearch import trial
    p = trial.params()
    trial.should_stop()
    print(f"warm={warm} pid={os.getpid()} argv={sys.argv[1:]} cwd={os.getcwd()} "
          f"tag={os.environ.get('TAG')} trial={os.environ['HPSEARCH_TRIAL_ID']}", flush=True)
    for step in range(int(p["steps"])):
        trial.report(step, loss=p["x"] + 1.0 / (step + 1))
        if trial.should_stop():
            break
        time.sleep(0.2)
    sys.exit(int(p["x"]) if p["x"] >= 3 else 0)
""")


@pytest.fixture
def runtime_dir():
    """A short folder for the server's socket (a Unix socket path has ~100 bytes); the
    server started in it is stopped at the end."""
    path = tempfile.mkdtemp(prefix="hw", dir="/tmp")
    yield path
    subprocess.run(["pkill", "-f", "--", f"--socket {path}/"], check=False)


def test_a_socket_path_too_long_for_unix_sockets_runs_cold_and_says_why(tmp_path):
    """An XDG_RUNTIME_DIR so deep that the socket path passes the 107 bytes a Unix socket
    takes: the trial runs cold at once and stderr says why (it ran cold without a word, and
    tried to start a server that could not bind, before this check)."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    proc = subprocess.run(
        [sys.executable, "-m", "hpsearch.warm", "run", "--preload", "json", "--", "-m",
         "platform"], env={**os.environ, "XDG_RUNTIME_DIR": str(deep)},
        capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip(), proc.stderr
    assert "longer than the 107 bytes a Unix socket allows" in proc.stderr
    assert not list(deep.glob("hpsearch-warm-*/*.log"))  # no server was started


@pytest.mark.parametrize("client", ["full", "quick"])
def test_a_run_with_another_pythonpath_is_not_served_by_another_checkout_s_server(
        tmp_path, runtime_dir, client):
    """Two checkouts of a package (`pkg`, preloaded) and the same interpreter: a server
    started for one must not fork the other's runs (its children have its modules, and
    hpsearch's). Before, the socket's key left the module search path out, and a run with
    the second PYTHONPATH got the first checkout's module from the warm server."""
    def run(checkout):
        env = {**os.environ, "XDG_RUNTIME_DIR": runtime_dir,
               "PYTHONPATH": os.pathsep.join(filter(None, (
                   str(tmp_path / checkout), os.environ.get("PYTHONPATH"))))}
        argv = ([sys.executable, "-m", "hpsearch.warm", "run", "--preload", "pkg", "--"]
                if client == "full" else [sys.executable, "-I", "-S", str(QUICK_CLIENT), "pkg",
                                          "--"])  # what {python} runs (its alias's key)
        return subprocess.run([*argv, str(tmp_path / "who.py")], env=env, capture_output=True,
                              text=True, timeout=60, check=True).stdout.split()
    (tmp_path / "who.py").write_text(
        "import sys\nwarm = 'pkg' in sys.modules\nimport pkg\nprint(pkg.WHO, warm)\n")
    for checkout in ("a", "b"):
        (tmp_path / checkout / "pkg").mkdir(parents=True)
        (tmp_path / checkout / "pkg" / "__init__.py").write_text(f"WHO = {checkout!r}\n")
    deadline = time.monotonic() + 30
    while run("a") != ["a", "True"]:  # until a's server is up and forks a's runs
        assert time.monotonic() < deadline, "no warm run of checkout a"
        time.sleep(0.2)
    assert run("b")[0] == "b"


def _spec(cli, name, xs, steps=1, pruner="none", parallel=1):
    (cli.cwd / "probe.py").write_text(PROBE)
    return cli.write_spec(f"""
        name: {name}
        command: "{{python}} probe.py {{x}} {{steps}}"
        env: {{TAG: "it's me"}}
        search:
          strategy: grid
          parallel: {parallel}
          space: {{x: {{choices: {xs}}}, steps: {{value: {steps}}}}}
          pruner: {pruner}
        objective: {{metric: loss}}
        executor: {{type: local, grace: 2, warm: [fractions]}}
        """, f"{name}.yaml")


def _stdout(cli, name, tid) -> str:
    return (cli.runs / name / "trials" / f"{tid:05d}" / "stdout.log").read_text()


def test_trials_after_the_first_are_forked_warm_with_their_own_env_args_and_exit_codes(
        cli, runtime_dir):
    spec = _spec(cli, "warm", [0, 1, 2, 3])
    env = {"XDG_RUNTIME_DIR": runtime_dir}
    proc = cli("submit", spec, env=env)
    assert proc.returncode == 1, proc.stdout  # trial 3 exits 3: failed
    _, trials = read_store(cli.runs, "warm")
    assert [t.state for t in trials] == ["completed"] * 3 + ["failed"]
    assert trials[3].exit_code == 3
    lines = [_stdout(cli, "warm", t.id) for t in trials]
    assert "warm=False" in lines[0]  # the first one started the server and ran cold
    time.sleep(0)  # (the server imports fractions while trial 0 runs)
    assert all("warm=True" in line for line in lines[2:]), lines
    for t, line in zip(trials, lines):
        assert f"argv=['{t.params['x']}', '1']" in line and "tag=it's me" in line
        assert f"trial={t.id}" in line and f"cwd={cli.cwd}" in line
    pids = {re.search(r"pid=(\d+)", line).group(1) for line in lines}
    assert len(pids) == 4  # a fresh process each time


@pytest.mark.slow  # over 7 s in the quick tier (docs/testing.md#tiers)
def test_a_warm_trial_is_pruned_by_sigterm_through_the_client_and_leaves_nothing(
        cli, runtime_dir):
    env = {"XDG_RUNTIME_DIR": runtime_dir}
    cli("submit", _spec(cli, "prime", [0]), env=env, check=0)  # the server is up now
    spec = _spec(cli, "warmprune", [0, 1, 2, 4], steps=30,
                 pruner="{type: median, n_startup_trials: 1, n_warmup_steps: 1}")
    proc = cli("submit", spec, env=env, check=0)
    _, trials = read_store(cli.runs, "warmprune")
    assert [t.state for t in trials] == ["completed", "pruned", "pruned", "pruned"], \
        proc.stdout
    for t in trials[1:]:
        assert "warm=True" in _stdout(cli, "warmprune", t.id)
        took = float(re.search(r"stopped ([\d.]+) s after", t.error).group(1))
        assert took < 3.0, t.error
    left = subprocess.run(["pgrep", "-f", "probe.py"], capture_output=True, text=True)
    assert left.stdout == "", left.stdout


def test_killing_the_client_kills_its_forked_trial(cli, runtime_dir, tmp_path):
    (tmp_path / "sleepy.py").write_text("import time\nprint('up', flush=True)\n"
                                        "time.sleep(60)\n")
    env = {**os.environ, "XDG_RUNTIME_DIR": runtime_dir}
    run = [sys.executable, "-m", "hpsearch.warm", "run", "--preload", "fractions", "--",
           str(tmp_path / "sleepy.py")]
    subprocess.run(run[:-1] + [str(tmp_path / "missing.py")], env=env, capture_output=True)
    deadline = time.monotonic() + 20
    while not list(__import__("pathlib").Path(runtime_dir).glob("*/*.sock")):
        assert time.monotonic() < deadline, "no warm server came up"
        time.sleep(0.1)
    client = subprocess.Popen(run, env=env, stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    assert client.stdout.readline().strip() == "up"
    server_children = _children_of_server(runtime_dir)
    assert len(server_children) == 1, server_children
    os.killpg(client.pid, signal.SIGKILL)
    client.wait()
    deadline = time.monotonic() + 5
    while _alive(server_children[0]):
        assert time.monotonic() < deadline, "the forked trial outlived its client"
        time.sleep(0.05)


def _children_of_server(runtime_dir: str) -> list[int]:
    found = subprocess.run(["pgrep", "-f", "--", f"--socket {runtime_dir}/"], capture_output=True,
                           text=True).stdout.split()
    servers = [int(pid) for pid in found if _ppid(int(pid)) == 1]
    return [int(pid) for pid in found if int(pid) not in servers and _ppid(int(pid)) in servers]


def _server_of(runtime_dir: str) -> int:
    """The pid of the one warm server under runtime_dir (waits for it to come up)."""
    deadline = time.monotonic() + 20
    while True:
        found = subprocess.run(["pgrep", "-f", "--", f"--socket {runtime_dir}/"],
                               capture_output=True, text=True).stdout.split()
        servers = [int(pid) for pid in found if _ppid(int(pid)) == 1]
        if len(servers) == 1:
            return servers[0]
        assert time.monotonic() < deadline, f"warm servers: {servers}"
        time.sleep(0.1)


def _ppid(pid: int) -> int:
    try:
        return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
    except OSError:
        return -1


def _alive(pid: int) -> bool:
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize("warm,problem", [
    ("[torch, 'os; rm -rf /']", "executor.warm[1]: expected a module name such as torch"),
    ("{preload: torch}", "executor.warm.preload: expected a list of strings"),
    ("{modules: [torch]}", "executor.warm.modules: unknown key 'modules'"),
    ("3", "executor.warm: expected a list of strings"),
])
def test_bad_warm_preloads_are_refused_with_file_line_and_key(cli, warm, problem):
    spec = cli.write_spec(f"""
        name: badwarm
        command: "{{python}} x.py {{x}}"
        search: {{strategy: grid, space: {{x: {{choices: [1]}}}}}}
        objective: {{metric: loss}}
        executor: {{type: local, warm: {warm}}}
        """)
    proc = cli("submit", spec, check=2)
    assert "spec.yaml:5: " + problem in proc.stderr, proc.stderr
    assert not (cli.runs / "badwarm").exists()


@pytest.mark.slow  # long end-to-end run, 10 to 200 s (docs/testing.md#tiers)
def test_hostile_requests_are_refused_and_the_server_keeps_serving(runtime_dir, tmp_path):
    """Garbage, a length of 1 GiB, bytes that are not UTF-8, a request cut short, JSON of
    the wrong shape, nesting deep enough to exhaust recursion, a stalled client: each
    connection is closed unanswered, nothing is forked, and a real trial runs after them."""
    import socket
    import struct
    from pathlib import Path
    env = {**os.environ, "XDG_RUNTIME_DIR": runtime_dir}
    (tmp_path / "ok.py").write_text("import os, sys\nprint(os.getppid())\nsys.exit(7)\n")
    run = [sys.executable, "-m", "hpsearch.warm", "run", "--preload", "fractions", "--",
           str(tmp_path / "ok.py")]
    assert subprocess.run(run, env=env).returncode == 7  # cold: starts the server
    deadline = time.monotonic() + 20
    while not list(Path(runtime_dir).glob("*/*.sock")):
        assert time.monotonic() < deadline, "no warm server came up"
        time.sleep(0.1)
    path = str(next(Path(runtime_dir).glob("*/*.sock")))
    server = _server_of(runtime_dir)
    fds = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("3i", 0, 1, 2))]

    def send(head: bytes, body: bytes = b"", with_fds: bool = True) -> bytes:
        conn = socket.socket(socket.AF_UNIX)
        conn.connect(path)
        conn.settimeout(15)
        try:
            conn.sendmsg([head], fds if with_fds else [])
            if body:
                conn.sendall(body)
            return conn.recv(100)
        except ConnectionResetError:
            return b""
        finally:
            conn.close()

    deep = b"[" * 100000
    assert send(b"\xff\xfe\x00\x01", with_fds=False) == b""
    assert send(struct.pack("!I", 1 << 30)) == b""
    assert send(struct.pack("!I", 10), b"\xff\xfe not js") == b""
    assert send(struct.pack("!I", 2), b"[]") == b""
    assert send(struct.pack("!I", 30), b'{"argv": [], "env": {}, "cwd": "/"}'[:30]) == b""
    assert send(struct.pack("!I", len(deep)), deep) == b""
    began = time.monotonic()
    assert send(struct.pack("!I", 100), b"{") == b""  # stalls: dropped after 10 s
    assert time.monotonic() - began < 14
    assert _children_of_server(runtime_dir) == []  # nothing was forked
    proc = subprocess.run(run, env=env, capture_output=True, text=True)
    assert proc.returncode == 7 and "running cold" not in proc.stderr, proc.stderr
    # the same server forked it: a server that died would be replaced, and the trial run
    # cold, by exec, with the test as its parent
    assert int(proc.stdout) == server and _server_of(runtime_dir) == server

"""The warm client's quick way in (hpsearch/warm/quick.py): `{python}` under executor.warm
runs an isolated interpreter without site that finds the server by the alias the server
made, hands the trial over (argv, environment, working folder, stdio), forwards signals and
exits with the trial's status; anything else goes to the full client, which starts a server
and runs the trial cold. Other users' folders and sockets: tests/test_other_users.py."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from hpsearch.launch.attempt import QUICK_CLIENT
from hpsearch.procs import SAFE_MODULE_RUN
from hpsearch.warm import quick

# `fractions` stands in for torch: a module nothing imports at start
SCRIPT = """
import os, signal, sys, time
warm = "fractions" in sys.modules
def on_term(s, f):
    print("got TERM", flush=True)
    sys.exit(7)
signal.signal(signal.SIGTERM, on_term)
print(f"warm={warm} argv={sys.argv[1:]} cwd={os.getcwd()} tag={os.environ.get('TAG')}",
      flush=True)
time.sleep(float(sys.argv[1]))
sys.exit(int(sys.argv[2]))
"""


@pytest.fixture
def runtime_dir():
    """A short folder for the server's socket; the servers started in it stop at the end."""
    path = tempfile.mkdtemp(prefix="hq", dir="/tmp")
    yield path
    subprocess.run(["pkill", "-f", "--", f"--socket {path}/"], check=False)


def _env(runtime_dir: str, **extra: str) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items()
               if k not in ("SLURM_JOB_ID", "SLURM_STEP_ID", "HPSEARCH_WARM_SCOPE")},
            "XDG_RUNTIME_DIR": runtime_dir, **extra}


def _quick(runtime_dir: str, script: Path, *args: str, cwd: Path, **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-I", "-S", str(QUICK_CLIENT), "fractions", "--",
                             str(script), *args], env=_env(runtime_dir, TAG="it's me"),
                            cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            **popen)


def _alias(runtime_dir: str) -> Path:
    folder = Path(runtime_dir) / f"hpsearch-warm-{os.geteuid()}"
    return folder / quick.alias_name(_env(runtime_dir), sys.executable, ["fractions"])


def _served(runtime_dir: str, script: Path, cwd: Path) -> None:
    """Run the script once through the quick client: no server yet, so the full client runs
    it cold and starts one; wait for the server's alias (to a socket that is there)."""
    first = _quick(runtime_dir, script, "0", "0", cwd=cwd)
    out, err = first.communicate(timeout=60)
    assert first.returncode == 0 and "warm=False" in out, err
    deadline = time.monotonic() + 30
    while not _alias(runtime_dir).exists():
        assert time.monotonic() < deadline, "the server made no alias"
        time.sleep(0.1)


def test_the_quick_client_hands_a_trial_to_the_server_and_relays_its_status(runtime_dir,
                                                                            tmp_path):
    """It stays the trial's process (not replaced by the full client) while the server's
    child runs the script warm, with the client's argv, environment and working folder."""
    script = tmp_path / "probe.py"
    script.write_text(SCRIPT)
    _served(runtime_dir, script, tmp_path)
    proc = _quick(runtime_dir, script, "1", "3", cwd=tmp_path)
    time.sleep(0.5)
    cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")
    out, err = proc.communicate(timeout=60)
    assert cmdline[:4] == [sys.executable.encode(), b"-I", b"-S", str(QUICK_CLIENT).encode()]
    assert out == f"warm=True argv=['1', '3'] cwd={tmp_path} tag=it's me\n", err
    assert proc.returncode == 3 and err == ""


def test_a_signal_to_the_quick_client_reaches_the_trial(runtime_dir, tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(SCRIPT)
    _served(runtime_dir, script, tmp_path)
    proc = _quick(runtime_dir, script, "30", "0", cwd=tmp_path)
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith("warm=True")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert out == "got TERM\n" and proc.returncode == 7, err


def test_a_dead_servers_alias_sends_the_trial_to_the_full_client(runtime_dir, tmp_path):
    """The alias names a socket no server listens on (its server was killed): the full client
    runs the trial cold and starts a new server, which replaces the alias."""
    folder = _alias(runtime_dir).parent
    folder.mkdir(mode=0o700)
    os.symlink("gone.sock", _alias(runtime_dir))
    script = tmp_path / "probe.py"
    script.write_text(SCRIPT)
    _served(runtime_dir, script, tmp_path)
    assert os.readlink(_alias(runtime_dir)) != "gone.sock"


def test_the_quick_client_imports_nothing_from_the_workdir(runtime_dir, tmp_path):
    """Isolated (-I): the working folder is not on its sys.path (nor is it on the full
    client's, SAFE_MODULE_RUN), so a planted C module's name (_socket, _signal) is not taken
    from there."""
    work = tmp_path / "work"
    work.mkdir()
    marker = work / "PWNED"
    for name in ("_socket.py", "_signal.py", "_sha256.py", "os.py"):
        (work / name).write_text(f"open({str(marker)!r}, 'a').write({name!r})\n")
    script = tmp_path / "probe.py"
    script.write_text(SCRIPT)
    proc = subprocess.run([sys.executable, "-I", "-S", str(QUICK_CLIENT), "fractions", "--",
                           str(script), "0", "0"], cwd=work, capture_output=True, text=True,
                          env=_env(runtime_dir), timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert not marker.exists(), marker.read_text()


@pytest.mark.parametrize("args", [[], ["json"], ["json", "script.py"]])
def test_a_call_without_preloads_and_a_script_is_refused(args):
    proc = subprocess.run([sys.executable, "-I", "-S", str(QUICK_CLIENT), *args],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and proc.stderr.startswith("usage:")


def test_its_requests_read_back_as_json_whatever_the_strings():
    rng = random.Random(7)
    alphabet = "\0\x01\n\t\"\\/ aZé€\u2028\udcff\U0001f600"
    for _ in range(200):
        words = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
                 for _ in range(4)]
        body = quick.request(words[:2], {words[2]: words[3]}, "/w")
        assert json.loads(body) == {"argv": words[:2], "env": {words[2]: words[3]},
                                    "cwd": "/w"}


def test_its_fallback_runs_modules_as_hpsearch_does():
    assert quick.SAFE_MODULE_RUN == SAFE_MODULE_RUN


def test_in_a_pilot_a_trial_before_its_servers_are_up_runs_cold_and_starts_none(runtime_dir,
                                                                               tmp_path):
    """The pilot starts its nodes' servers (hpsearch.pilot.warm_servers): a trial that comes
    first runs cold at once and says so, as the full client does, and starts no server of
    its own (which would end with the trial's step)."""
    script = tmp_path / "probe.py"
    script.write_text(SCRIPT)
    folder = _alias(runtime_dir).parent
    folder.mkdir(mode=0o700)
    proc = subprocess.run([sys.executable, "-I", "-S", str(QUICK_CLIENT), "fractions", "--",
                           str(script), "0", "4"], capture_output=True, text=True, timeout=60,
                          env=_env(runtime_dir, HPSEARCH_WARM_SCOPE="77.pilot"), cwd=tmp_path)
    assert proc.returncode == 4 and proc.stdout.startswith("warm=False"), proc.stderr
    assert proc.stderr == ("hpsearch.warm: the pilot's warm server on this node is not up "
                           "(yet); running cold\n")
    time.sleep(0.5)
    assert list(folder.iterdir()) == []  # no server, socket or log


@pytest.mark.parametrize("client", ["quick", "full"])
def test_a_server_that_dies_under_a_trial_takes_the_trial_with_it(runtime_dir, tmp_path,
                                                                   client):
    """The server's exit reports the trial's status; without it the attempt ends (exit 1)
    and its process must not run on unwatched, as it did (the step log of a node-crash run
    on the emulated cluster: a forked trial wrote a step and result.json after its client
    had exited)."""
    script = tmp_path / "probe.py"
    script.write_text(SCRIPT)
    _served(runtime_dir, script, tmp_path)
    late = tmp_path / "late"
    (tmp_path / "late.py").write_text(
        "import os, sys, time\nwarm = 'fractions' in sys.modules\n"
        "print(f'warm={warm} pid={os.getpid()}', flush=True)\ntime.sleep(1.5)\n"
        f"open({str(late)!r}, 'w').write('ran on')\n")
    argv = ([sys.executable, "-I", "-S", str(QUICK_CLIENT), "fractions", "--"] if client
            == "quick" else [sys.executable, "-c", SAFE_MODULE_RUN, "hpsearch.warm", "run",
                             "--preload", "fractions", "--"])  # as the quick one hands over
    proc = subprocess.Popen([*argv, str(tmp_path / "late.py")], env=_env(runtime_dir),
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None
    first = proc.stdout.readline()
    assert first.startswith("warm=True"), first
    child = int(first.split("pid=")[1])
    server = int(Path(f"/proc/{child}/stat").read_text().split(") ")[1].split()[1])
    os.kill(server, signal.SIGKILL)  # the server alone (its forked child has its cmdline)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 1
    assert f"the server ended before trial process {child}; killed it" in err
    time.sleep(2)
    assert not late.exists()  # it did not run on
    assert not Path(f"/proc/{child}").exists() or Path(f"/proc/{child}/stat").read_text(
    ).split(") ")[1].startswith("Z")

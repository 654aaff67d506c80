"""Code planted in a folder others may write never runs as the owner (issue 37, item 1).

hpsearch starts Python programs of its own in folders it does not own: a pilot's and the
driver job's batch scripts start in the folder `submit` ran from (Slurm's default), a warm
client and a GPU sampler in the trial's workdir. `python -m` puts that folder first on
sys.path, so a group member who may write it plants `hpsearch/__init__.py`, or a module named
like one of the standard library's (`uuid.py`, `runpy.py`), and it runs as the owner. Every
such program now starts through hpsearch.procs.module_argv. Each test plants the same files,
each writing a marker when imported, and runs the exact command hpsearch builds there.
The pilot on the emulated cluster: tests/slurm/test_planted_code_slurm.py."""

from __future__ import annotations

import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from hpsearch.driver.slurm_job import driver_script
from hpsearch.preflight import parse_spec
from hpsearch.procs import module_argv
from tests.helpers import read_store

PLANTED = ("hpsearch/__init__.py", "hpsearch/warm/__init__.py", "uuid.py", "runpy.py",
           "json.py")


def plant(folder: Path) -> Path:
    """Files in `folder` that write `folder/PWNED` when imported; the marker's path."""
    marker = folder / "PWNED"
    for name in PLANTED:
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"open({str(marker)!r}, 'a').write({name!r} + '\\n')\n")
    return marker


def test_the_planted_files_do_run_under_python_dash_m(tmp_path):
    """The attack itself, so the tests below can fail: `python -m` imports them."""
    marker = plant(tmp_path)
    subprocess.run([sys.executable, "-m", "hpsearch.warm", "--help"], cwd=tmp_path,
                   capture_output=True, timeout=60)
    assert marker.exists()


def test_module_argv_runs_the_module_as_dash_m_does_without_the_folder(tmp_path):
    marker = plant(tmp_path)
    code = "import sys; print(sys.argv); print(sys.path[0])"
    (tmp_path / "elsewhere").mkdir()
    mod = tmp_path / "elsewhere" / "probe_mod.py"
    mod.write_text(code + "\nprint(__name__)\n")
    proc = subprocess.run(module_argv(sys.executable, "probe_mod", "a b", "--x"), cwd=tmp_path,
                          env={"PYTHONPATH": str(mod.parent)}, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    argv, path0, name = proc.stdout.splitlines()
    assert argv == repr([str(mod), "a b", "--x"])  # as `python -m probe_mod 'a b' --x`
    assert name == "__main__" and path0 == str(mod.parent)  # the folder is not on sys.path
    assert not marker.exists()


def test_the_pilot_batch_command_imports_nothing_from_the_submit_folder(cli):
    """The last line of the pilot's batch script (what `plan` prints and sbatch gets), run in
    the folder `submit` ran from: it reaches hpsearch.pilot.submitted, and nothing planted
    ran."""
    spec = cli.write_spec("""
        name: planted
        command: "true {x}"
        search: {strategy: grid, space: {x: {choices: [1]}}}
        objective: {metric: loss}
        executor: {type: slurm, pilots: {nodes: 1, time: "00:05:00"}}
        """)
    line = cli("plan", spec, env={"PATH": "/usr/bin:/bin"}).stdout.split(
        "export SUBMITIT_EXECUTOR=slurm\n", 1)[1].splitlines()[0]
    assert "hpsearch.pilot.submitted" in line and " -m " not in line
    marker = plant(cli.cwd)
    # one argument too many: it stops at its usage line, after its imports
    proc = subprocess.run(["/bin/sh", "-c", line + " extra"], cwd=cli.cwd,
                          capture_output=True, text=True, timeout=60)
    assert not marker.exists(), marker.read_text()
    assert proc.returncode == 2 and "hpsearch.pilot.submitted" in proc.stderr, proc.stderr


def test_the_driver_jobs_command_imports_nothing_from_the_workdir(tmp_path):
    """The driver job's `exec` line, run in its --chdir (the spec's workdir): it reaches
    `hpsearch resume`, which finds no such experiment, and nothing planted ran."""
    text = ("name: planted\ncommand: true {x}\nobjective: {metric: loss}\n"
            "search: {strategy: grid, space: {x: {choices: [1]}}}\n"
            f"runs_dir: {tmp_path / 'runs'}\n")
    spec = parse_spec(text, str(tmp_path / "spec.yaml"), tmp_path)
    script = driver_script(spec, sys.executable, None)
    assert f"#SBATCH --chdir={tmp_path}" in script.splitlines()
    exec_line = script.splitlines()[-1]
    assert exec_line.startswith("exec ") and " -m " not in exec_line
    marker = plant(tmp_path)
    proc = subprocess.run(["/bin/sh", "-c", exec_line], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    assert not marker.exists(), marker.read_text()
    assert proc.returncode == 2 and "planted" in proc.stderr, proc.stderr


@pytest.fixture
def runtime_dir():
    """A short folder for the warm server's socket; its server is stopped at the end."""
    path = tempfile.mkdtemp(prefix="hw", dir="/tmp")
    yield path
    subprocess.run(["pkill", "-f", "--", f"--socket {path}/"], check=False)


def test_warm_trials_and_their_server_import_nothing_from_the_workdir(cli, tmp_path,
                                                                      runtime_dir):
    """executor.warm: `{python}` becomes the warm client, which starts the server, both in
    the trial's workdir; the script itself lives elsewhere (its own folder is the user's
    business, as with a plain `python train.py`)."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    marker = plant(workdir)
    script = tmp_path / "code" / "train.py"
    script.parent.mkdir()
    script.write_text("import os, sys\nprint('@hpsearch step=0 loss=' + sys.argv[1])\n")
    spec = cli.write_spec(f"""
        name: warmplant
        command: "{{python}} {shlex.quote(str(script))} {{x}}"
        workdir: {workdir}
        search: {{strategy: grid, parallel: 1, space: {{x: {{choices: [1, 2, 3]}}}}}}
        objective: {{metric: loss}}
        executor: {{type: local, warm: [fractions]}}
        """)
    proc = cli("submit", spec, env={"XDG_RUNTIME_DIR": runtime_dir})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _, trials = read_store(cli.runs, "warmplant")
    assert [t.state for t in trials] == ["completed"] * 3
    assert not marker.exists(), marker.read_text()

"""Launchers x container runtimes: golden command lines, and the ones that run here, run.

Golden files (tests/golden/launch/<launcher>-<runtime>-<slurm|local>.sh) pin the shell text of
every combination that makes sense, for a 2-node x 2-task trial under Slurm and a 2-task
trial on the local executor. Set UPDATE_GOLDEN=1 to rewrite them after a deliberate change,
then read the diff. Test ids end in `golden_only` where the programs cannot run here:
Apptainer/Singularity and pyxis/enroot are not installable on these machines, and
horovodrun and podman are not installed (podman needs image pulls, which have no network).
charliecloud runs for real in tests/test_charliecloud.py, mpirun (Open MPI) in
tests/slurm/test_mpirun.py.

What does run: the `none` and `torchrun` launchers locally (torchrun: 2 CPU ranks, gloo
all_reduce), and the `srun` and `torchrun` batch bodies under a stand-in `srun` and `scontrol`
(small scripts that start the tasks on this machine with SLURM_* set, and answer with output
captured from the emulated cluster), which checks the quoting and the rank variables. The
same bodies on the real emulated cluster belong in tests/slurm (they need its fixture).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hpsearch.errors import EXIT_BAD_INPUT
from hpsearch.launch import (
    LaunchError,
    RankLayout,
    layout_for,
    make_launcher,
    make_runtime,
    port_for,
)
from hpsearch.launch.base import merged_binds
from hpsearch.spec.model import Container, Launcher, Resources

GOLDEN = Path(__file__).parent / "golden" / "launch"
VENV_BIN = str(Path(sys.executable).parent)

# The golden files' command: a quoted parameter, kept simple so a reader can follow the
# nesting; the real runs below use a value with a quote, $( ) and backticks.
COMMAND = "python train.py --lr 0.01 --name 'a b'"
WORKDIR = "/shared/projects/digits"
TRIAL_DIR = "/shared/runs/digits/trials/00007"
CONTAINERS = {
    "none": Container(),
    "apptainer": Container("apptainer", "/shared/images/digits.sif", ("/scratch/data:/data:ro",),
                           ("NCCL_DEBUG",)),
    "singularity": Container("singularity", "/shared/images/digits.sif",
                             ("/scratch/data:/data:ro",), ("NCCL_DEBUG",)),
    "pyxis": Container("pyxis", "/shared/images/digits.sqsh", ("/scratch/data:/data:ro",),
                       ("NCCL_DEBUG",)),
    "charliecloud": Container("charliecloud", "/shared/images/digits", ("/scratch/data:/data",),
                              ("NCCL_DEBUG",)),
    "podman": Container("podman", "localhost/hpsearch-digits:latest",
                        ("/scratch/data:/data:ro",), ("NCCL_DEBUG",)),
}
LAUNCHERS = ("none", "srun", "torchrun", "mpirun", "horovodrun")
# Programs that cannot run on these machines: their combinations are checked by golden files
# only, and their test ids say so.
NOT_HERE = {"apptainer": "not installable", "singularity": "not installable",
            "pyxis": "not installable (an srun plugin with enroot)",
            "podman": "not installed; would need an image pull (no network)",
            "horovodrun": "not installed"}
SLURM = RankLayout(nodes=2, tasks_per_node=2, gpus_per_node=1, cpus_per_task=4,
                   master_port=34567, under_slurm=True, binds=(WORKDIR, TRIAL_DIR),
                   workdir=WORKDIR)
LOCAL = RankLayout(nodes=1, tasks_per_node=2, gpus_per_node=1, cpus_per_task=4,
                   master_port=34567, under_slurm=False, binds=(WORKDIR, TRIAL_DIR),
                   workdir=WORKDIR)


def _makes_sense(launcher: str, runtime: str, under_slurm: bool) -> bool:
    if not under_slurm and (launcher == "srun" or runtime == "pyxis"):
        return False  # need Slurm: LaunchError (test_refused_combinations)
    return not (runtime == "pyxis" and launcher in ("mpirun", "horovodrun"))


def _case_id(launcher: str, runtime: str, under_slurm: bool) -> str:
    name = f"{launcher}-{runtime}-{'slurm' if under_slurm else 'local'}"
    return f"{name}-golden_only" if {launcher, runtime} & set(NOT_HERE) else name


CASES = [(launcher, runtime, under_slurm) for launcher in LAUNCHERS for runtime in CONTAINERS
         for under_slurm in (True, False) if _makes_sense(launcher, runtime, under_slurm)]


def _text(launcher: str, runtime: str, under_slurm: bool) -> str:
    return make_launcher(launcher).wrap(COMMAND, SLURM if under_slurm else LOCAL,
                                        make_runtime(CONTAINERS[runtime]))


def _golden(launcher: str, runtime: str, under_slurm: bool) -> str:
    layout = SLURM if under_slurm else LOCAL
    where = ("under Slurm: the batch script's body, run on the allocation's first node"
             if under_slurm else "on the local executor: run as it is by /bin/sh")
    c = CONTAINERS[runtime]
    container = (f"{c.runtime} image {c.image}, binds {list(c.binds)}, env {list(c.env)}"
                 if c.runtime != "none" else "none")
    resources = (f"{layout.nodes} node(s) x {layout.tasks_per_node} tasks, "
                 f"{layout.gpus_per_node} GPU per node, {layout.cpus_per_task} CPUs per task; "
                 f"master port {layout.master_port}")
    header = textwrap.dedent(f"""\
        # launcher {launcher}, container {runtime}, {where}
        # resources: {resources}
        # container: {container}
        # workdir {WORKDIR} and trial dir {TRIAL_DIR} are bound at the same path
        # command: {COMMAND}
        # generated by tests/test_launch.py (UPDATE_GOLDEN=1 rewrites it)
        """)
    return header + _text(launcher, runtime, under_slurm) + "\n"


@pytest.mark.parametrize("case", CASES, ids=[_case_id(*c) for c in CASES])
def test_command_line_matches_golden_file(case):
    """One golden file per combination. Ids ending in golden_only name programs that cannot
    run here (Apptainer, pyxis: not installable; horovodrun, podman: not installed)."""
    text = _golden(*case)
    path = GOLDEN / f"{_case_id(*case).removesuffix('-golden_only')}.sh"
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"{path} missing: run with UPDATE_GOLDEN=1 and read it"
    assert text == path.read_text()


def test_no_stale_golden_files():
    expected = {f"{_case_id(*c).removesuffix('-golden_only')}.sh" for c in CASES}
    assert {p.name for p in GOLDEN.glob("*.sh")} == expected


@pytest.mark.parametrize("case", CASES, ids=[_case_id(*c) for c in CASES])
def test_command_line_is_valid_shell(case):
    """`sh -n` parses every generated text (quoting of the nested sh -c levels)."""
    proc = subprocess.run(["sh", "-n"], input=_text(*case), text=True, capture_output=True)
    assert proc.returncode == 0, proc.stderr


def test_every_rank_sets_the_same_variables():
    for launcher in LAUNCHERS:
        text = _text(launcher, "none", True)
        for name in ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK"):
            assert f"export {name}" in text or f" {name}=" in text, (launcher, name)
    # torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE itself; the others export them.
    for launcher in ("none", "srun", "mpirun", "horovodrun"):
        text = _text(launcher, "none", True)
        for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
            assert f" {name}=" in text, (launcher, name)


@pytest.mark.parametrize("launcher, container, layout, message", [
    ("srun", Container(), LOCAL, "launcher: srun starts ranks as Slurm tasks"),
    ("none", CONTAINERS["pyxis"], LOCAL, "container.runtime: pyxis is a Slurm srun plugin"),
    ("torchrun", CONTAINERS["pyxis"], LOCAL, "container.runtime: pyxis is a Slurm srun plugin"),
    ("mpirun", CONTAINERS["pyxis"], SLURM, "launcher: mpirun cannot start pyxis containers"),
    ("horovodrun", CONTAINERS["pyxis"], SLURM, "launcher: horovodrun cannot start pyxis"),
    (Launcher("none", ("--x",)), Container(), SLURM, "launcher.args: launcher none"),
    ("none", Container("charliecloud", "/img", ("/a:/b:ro",)), LOCAL,
     "container.binds: '/a:/b:ro': ch-run binds take no options"),
])
def test_refused_combinations(launcher, container, layout, message):
    with pytest.raises(LaunchError) as err:
        make_launcher(launcher).wrap("true", layout, make_runtime(container))
    assert message in str(err.value)
    assert err.value.exit_code == EXIT_BAD_INPUT


@pytest.mark.parametrize("container, message", [
    (Container("apptainer", None), "container.image: runtime apptainer needs an image"),
    (Container("apptainer", "/i.sif", args=("--cleanenv",)), "container.args: --cleanenv would"),
    (Container("singularity", "/i.sif", args=("-e",)), "container.args: -e would drop"),
    (Container("podman", "img", ("data:/data",)), "container.binds: 'data:/data': expected"),
])
def test_refused_containers(container, message):
    with pytest.raises(LaunchError) as err:
        make_launcher("none").wrap("true", LOCAL, make_runtime(container))
    assert message in str(err.value)


def test_spec_env_names_reach_podman_and_pyxis_by_name():
    podman = make_runtime(CONTAINERS["podman"], ["OMP_NUM_THREADS", "NCCL_DEBUG"])
    argv = podman.wrap(["true"], LOCAL)
    assert argv[argv.index("OMP_NUM_THREADS") - 1] == "-e"
    assert argv.count("NCCL_DEBUG") == 1
    pyxis = make_runtime(CONTAINERS["pyxis"], ["OMP_NUM_THREADS"])
    assert "--container-env=OMP_NUM_THREADS,NCCL_DEBUG" in pyxis.srun_options(SLURM)


def test_port_for_is_stable_in_range_and_distinct_for_neighbours():
    assert port_for("digits", 7) == port_for("digits", 7) == 21748  # a stable hash, not hash()
    ports = [port_for("digits", t) for t in range(500)]
    low, high = map(int, open("/proc/sys/net/ipv4/ip_local_port_range").read().split())
    assert all(20000 <= p < low and p < 32768 for p in ports)  # never an ephemeral port
    assert len(set(ports)) == 500
    assert port_for("other", 7) != port_for("digits", 7)


def test_layout_for_takes_resources_and_binds_workdir_and_trial_dir():
    layout = layout_for(Resources(nodes=2, tasks_per_node=4, gpus_per_node=4, cpus_per_task=8),
                        master_port=40000, under_slurm=True, workdir="/w", trial_dir="/r/t/1")
    assert layout == RankLayout(2, 4, 4, 8, 40000, True, ("/w", "/r/t/1"), "/w")
    assert layout.world_size == 8
    assert RankLayout(nodes=2, tasks_per_node=4, under_slurm=False).world_size == 4


def test_merged_binds_skip_paths_already_visible_and_put_parents_first():
    layout = RankLayout(binds=("/proj", "/proj/runs/t/1", "/scratch/t/2"))
    binds = merged_binds(["/data/in/x:/proj/data", "/scratch", "/opt/a:/opt/a:ro"], layout)
    assert [b.spec() for b in binds] == [
        "/scratch:/scratch", "/proj:/proj", "/data/in/x:/proj/data", "/opt/a:/opt/a:ro"]
    # The user's own bind of a path wins over the same-path one (it may be read-only).
    assert [b.spec() for b in merged_binds(["/proj:/proj:ro"], RankLayout(binds=("/proj",)))] \
        == ["/proj:/proj:ro"]


# -- real runs --------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _trial_env(tmp_path: Path, params: dict) -> dict[str, str]:
    tdir = tmp_path / "trials" / "00003"
    (tdir / "checkpoints").mkdir(parents=True)
    return {**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}",
            "HPSEARCH_EXPERIMENT": "launch", "HPSEARCH_TRIAL_ID": "3", "HPSEARCH_ATTEMPT": "1",
            "HPSEARCH_TRIAL_DIR": str(tdir), "HPSEARCH_CHECKPOINT_DIR": str(tdir / "checkpoints"),
            "HPSEARCH_PARAMS": json.dumps(params)}


def _run(text: str, env: dict, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    proc = subprocess.run(["/bin/sh", "-c", text], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{text}\n{proc.stdout}\n{proc.stderr}"
    return proc


# Each rank appends one line: its variables, then the quoted parameter as the rank saw it.
RANK_LINE = ("printf '%s|%s\\n' \"$RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $NODE_RANK "
             "$MASTER_ADDR $MASTER_PORT $HPSEARCH_TRIAL_ID\" {name} >> ranks.txt")
NAME = "'it'\"'\"'s a $(x) `y`'"   # the value it's a $(x) `y`, shell-quoted as templates do


def _ranks(cwd: Path) -> list[str]:
    return sorted((cwd / "ranks.txt").read_text().splitlines())


def test_none_runs_a_local_command_exactly_as_written(tmp_path):
    """Launcher none, no container, local executor: the trial's command itself, nothing
    added (one plain process; rank variables are for launchers that start several)."""
    layout = RankLayout(tasks_per_node=2, master_port=41234, workdir=str(tmp_path))
    command = RANK_LINE.format(name=NAME)
    text = make_launcher("none").wrap(command, layout, make_runtime(None))
    assert text == command
    _run(text, _trial_env(tmp_path, {}), tmp_path)
    assert _ranks(tmp_path) == ["       3|it's a $(x) `y`"]


DDP_PROBE = r'''
import json, os, sys
import torch, torch.distributed as dist
dist.init_process_group("gloo")
total = torch.tensor([dist.get_rank() + 1.0])
dist.all_reduce(total)
names = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR",
         "MASTER_PORT", "HPSEARCH_TRIAL_ID")
with open(f"rank-{dist.get_rank()}.json", "w") as out:  # one file each: no interleaving
    json.dump({"env": {n: os.environ.get(n) for n in names}, "sum": total.item(),
               "argv": sys.argv[1:]}, out)
dist.destroy_process_group()
'''


@pytest.mark.slow
def test_torchrun_local_two_cpu_ranks_all_reduce_with_gloo(tmp_path):
    """torchrun locally: 2 ranks on CPU, gloo init and all_reduce; each rank sees the same
    variables the other launchers set, the trial's port, and the quoted parameter."""
    (tmp_path / "probe.py").write_text(DDP_PROBE)
    port = _free_port()
    layout = RankLayout(tasks_per_node=2, master_port=port, workdir=str(tmp_path))
    text = make_launcher("torchrun").wrap(f"python probe.py --name {NAME}", layout,
                                          make_runtime(None))
    _run(text, {**_trial_env(tmp_path, {}), "OMP_NUM_THREADS": "1"}, tmp_path)
    ranks = [json.loads((tmp_path / f"rank-{i}.json").read_text()) for i in range(2)]
    assert [r["env"] for r in ranks] == [
        {"RANK": str(i), "WORLD_SIZE": "2", "LOCAL_RANK": str(i), "LOCAL_WORLD_SIZE": "2",
         "NODE_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
         "HPSEARCH_TRIAL_ID": "3"} for i in range(2)]
    assert [r["sum"] for r in ranks] == [3.0, 3.0]
    assert all(r["argv"] == ["--name", "it's a $(x) `y`"] for r in ranks)


# A stand-in for srun: starts --ntasks copies of the program on this machine with the
# variables Slurm gives each task (block distribution: tasks fill node 0 first).
STUB_SRUN = r'''#!/usr/bin/env python3
import os, subprocess, sys
args, opts = sys.argv[1:], {}
while args and args[0].startswith("--"):
    key, _, value = args.pop(0)[2:].partition("=")
    opts[key] = value
ntasks, per_node = int(opts["ntasks"]), int(opts["ntasks-per-node"])
procs = [subprocess.Popen(args, env={**os.environ, "SLURM_PROCID": str(t),
                                     "SLURM_LOCALID": str(t % per_node),
                                     "SLURM_NODEID": str(t // per_node),
                                     "SLURM_NTASKS": str(ntasks)})
         for t in range(ntasks)]
sys.exit(max(p.wait() for p in procs))
'''
# A stand-in for scontrol: `show hostnames` expands node[1-2]; `show node -o NAME` answers
# with the line captured from the emulated cluster (tests/slurm/captured/
# scontrol_show_node_oneliner.txt), whose NodeAddr is 127.0.0.1.
NODE_LINE = ("NodeName={name} Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=4 CPUTot=4 "
             "CPULoad=0.95 AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:2 "
             "NodeAddr=127.0.0.1 NodeHostName=localhost Port=16828 Version=22.05.8 OS=Linux "
             "6.18.44-fc-v782 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=4000 AllocMem=0 "
             "FreeMem=22300 Sockets=4 Boards=1 State=IDLE+NOT_RESPONDING ThreadsPerCore=1")
STUB_SCONTROL = f'''#!/bin/sh
case "$2" in
  hostnames) echo node1; echo node2 ;;
  node) [ -n "$STUB_NO_NODE" ] || echo "{NODE_LINE}" | sed "s/{{name}}/$4/" ;;
esac
'''


@pytest.fixture
def stub_slurm(tmp_path):
    bin_dir = tmp_path / "stub-bin"
    bin_dir.mkdir()
    for name, body in (("srun", STUB_SRUN), ("scontrol", STUB_SCONTROL)):
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    env = _trial_env(tmp_path, {})
    return {**env, "PATH": f"{bin_dir}:{env['PATH']}", "SLURM_JOB_NODELIST": "node[1-2]"}


def test_slurm_master_addr_is_the_first_nodes_nodeaddr_else_its_name(tmp_path, stub_slurm):
    layout = RankLayout(master_port=41000, under_slurm=True)
    text = make_launcher("none").wrap('echo "$MASTER_ADDR:$MASTER_PORT"', layout,
                                      make_runtime(None))
    assert _run(text, stub_slurm, tmp_path).stdout == "127.0.0.1:41000\n"
    assert _run(text, {**stub_slurm, "STUB_NO_NODE": "1"}, tmp_path).stdout == "node1:41000\n"


def test_a_pilots_trial_takes_its_first_node_and_address_from_the_pilot_not_scontrol(
        tmp_path, stub_slurm):
    """The pilot asks slurmctld once for its nodes' addresses and tells each trial; its
    trials run no scontrol (a failing one here). A trial started under another job (the
    variables inherited, say, by a search started from inside a pilot's trial) asks."""
    layout = RankLayout(master_port=41000, under_slurm=True)
    text = make_launcher("none").wrap('echo "$MASTER_ADDR:$MASTER_PORT $hpsearch_first_node"',
                                      layout, make_runtime(None))
    told = {**stub_slurm, "HPSEARCH_FIRST_NODE": "node2", "HPSEARCH_FIRST_NODE_ADDR": "10.0.0.2",
            "HPSEARCH_PILOT_JOB": "77", "SLURM_JOB_ID": "77"}
    failing = tmp_path / "failing-bin"
    failing.mkdir()
    (failing / "scontrol").write_text("#!/bin/sh\necho called >&2\nexit 1\n")
    (failing / "scontrol").chmod(0o755)
    run = _run(text, {**told, "PATH": f"{failing}:{told['PATH']}"}, tmp_path)
    assert (run.stdout, run.stderr) == ("10.0.0.2:41000 node2\n", "")
    other_job = _run(text, {**told, "SLURM_JOB_ID": "78"}, tmp_path)
    assert other_job.stdout == "127.0.0.1:41000 node1\n"


def test_srun_body_under_stub_srun_gives_each_task_its_rank(tmp_path, stub_slurm):
    layout = RankLayout(nodes=2, tasks_per_node=2, master_port=41001, under_slurm=True)
    text = make_launcher("srun").wrap(RANK_LINE.format(name=NAME), layout, make_runtime(None))
    _run(text, stub_slurm, tmp_path)
    assert _ranks(tmp_path) == [
        f"{r} 4 {r % 2} 2 {r // 2} 127.0.0.1 41001 3|it's a $(x) `y`" for r in range(4)]


@pytest.mark.slow
def test_torchrun_body_under_stub_srun_two_nodes_two_ranks_each(tmp_path, stub_slurm):
    """Two torchrun agents (the stand-in srun's two tasks) meet on the static rendezvous at
    the first node's NodeAddr and the trial's port; the 4 workers get consistent ranks."""
    port = _free_port()
    layout = RankLayout(nodes=2, tasks_per_node=2, master_port=port, under_slurm=True)
    text = make_launcher("torchrun").wrap(RANK_LINE.format(name=NAME), layout,
                                          make_runtime(None))
    _run(text, stub_slurm, tmp_path)
    assert _ranks(tmp_path) == [
        f"{r} 4 {r % 2} 2 {r // 2} 127.0.0.1 {port} 3|it's a $(x) `y`" for r in range(4)]

"""hpsearch.slurm.commands.Slurm with and without `cluster=`: the command lines it runs
(golden: without a cluster they are what they were before clusters existed; with one, each
Slurm command gets `--clusters=NAME` after its name and nothing else changes). The parsers
of what they print are tested in tests/test_slurm_parse.py, on output captured from the
test cluster's second cluster. The commands themselves run on the real cluster in
tests/slurm/test_clusters.py.

The command lines are recorded by stand-in programs named sbatch, squeue, ... on PATH,
which write their arguments to a file and print output captured from the test cluster.
Set UPDATE_GOLDEN=1 to rewrite tests/golden/slurm/commands.txt after a deliberate change,
then read the diff.
"""

from __future__ import annotations

import os
import pwd
import shlex
from pathlib import Path

import pytest

from hpsearch.slurm.commands import CLUSTER_COMMANDS, Slurm
from hpsearch.slurm.failures import SlurmError

CAPTURED = Path(__file__).resolve().parent / "slurm" / "captured"
GOLDEN = Path(__file__).resolve().parent / "golden" / "slurm" / "commands.txt"
SECOND = "hpsearch2"

# What each stand-in prints: enough for every parser to accept it. It records its name and
# arguments on one line, separated by \x1f (a shell stand-in: no Python start-up per call).
STAND_IN = f"""#!/bin/sh
name=${{0##*/}}
{{ printf '%s' "$name"; for arg in "$@"; do printf '\\037%s' "$arg"; done; echo; }} >>"$RECORD"
case "$name $*" in
    "sbatch --test-only"*) ;;
    sbatch*--clusters=*) echo "71;{SECOND}" ;;
    sbatch*) echo 71 ;;
    "scontrol "*" job "*) cat '{CAPTURED}/scontrol_show_job_running.txt' ;;
    "scontrol "*" node "*) cat '{CAPTURED}/scontrol_show_node_oneliner.txt' ;;
    "scontrol "*" config"*) echo "MaxArraySize            = 1001" ;;
    sacctmgr*) cat '{CAPTURED}/sacctmgr_list_clusters.txt' ;;
esac
"""


def _run_every_method(slurm: Slurm) -> None:
    """Each public method of Slurm once (clusters() aside: sacctmgr takes no -M)."""
    slurm.sbatch("#!/bin/bash\ntrue\n", ["-J", "hps-x", "--partition=left"], cwd="/")
    slurm.sbatch_test("#!/bin/bash\ntrue\n")
    slurm.sacct(["71", "72_3"])
    slurm.sacct_runs(["71"])
    slurm.sacct_usage(["71"])
    slurm.squeue()
    slurm.squeue(["71", "72"])
    slurm.scancel(["71", "72"])
    slurm.scancel(["71"], signal="USR1")
    slurm.step_ids("71")
    slurm.signal_step("71.0", "TERM")
    slurm.requeue("71")
    slurm.scancel_by_name("hps-x")
    slurm.scontrol_show_job("71")
    slurm.job_record("71")
    slurm.job_id_by_name("hps-x")
    slurm.ping()
    slurm.config_value("TopologyPlugin")
    slurm.max_array_size()
    slurm.set_nodelist("71", "node[1-2]")
    slurm.sinfo_nodes()
    slurm.topology()
    slurm.node_addr("node1")


@pytest.fixture
def stand_ins(tmp_path: Path) -> dict[str, str]:
    """PATH with stand-ins for Slurm's commands first; RECORD the file they write to."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in [*CLUSTER_COMMANDS, "sacctmgr"]:
        (bin_dir / name).write_text(STAND_IN)
        (bin_dir / name).chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "RECORD": str(tmp_path / "record.txt")}


def _recorded(env: dict[str, str], cluster: str | None) -> list[str]:
    """The command lines, the user running the tests written as USER."""
    Path(env["RECORD"]).unlink(missing_ok=True)
    _run_every_method(Slurm(env=env, timeout=30, cluster=cluster))
    user = pwd.getpwuid(os.getuid()).pw_name
    return [shlex.join("USER" if (arg == user and words[i - 1] == "--user") else arg
                       for i, arg in enumerate(words))
            for words in (line.split("\x1f") for line in
                          Path(env["RECORD"]).read_text().splitlines())]


def test_without_a_cluster_the_command_lines_are_the_golden_ones(stand_ins):
    lines = _recorded(stand_ins, None)
    text = "".join(line + "\n" for line in lines)
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()
    assert not any("--clusters" in line or " -M" in line for line in lines)


def test_with_a_cluster_every_command_gets_the_option_after_its_name(stand_ins):
    plain = _recorded(stand_ins, None)
    on_second = _recorded(stand_ins, SECOND)
    assert len(on_second) == len(plain)
    for without, with_cluster in zip(plain, on_second, strict=True):
        name, *args = shlex.split(without)
        assert name in CLUSTER_COMMANDS
        assert shlex.split(with_cluster) == [name, f"--clusters={SECOND}", *args]
    assert {shlex.split(line)[0] for line in on_second} == CLUSTER_COMMANDS


def test_sbatch_on_a_cluster_returns_the_job_id_of_its_answer(stand_ins):
    slurm = Slurm(env=stand_ins, cluster=SECOND)
    assert slurm.sbatch("#!/bin/bash\ntrue\n") == "71"


def test_clusters_lists_what_slurmdbd_knows_with_sacctmgr(stand_ins):
    for cluster in (None, SECOND):
        Path(stand_ins["RECORD"]).unlink(missing_ok=True)
        slurm = Slurm(env=stand_ins, cluster=cluster)
        assert slurm.clusters() == ["hpsearch", SECOND]
        assert Path(stand_ins["RECORD"]).read_text().split("\x1f") == [
            "sacctmgr", "-n", "-P", "list", "clusters", "format=cluster\n"]
        assert slurm.calls["sacctmgr"] == 1


def test_an_error_names_the_command_line_that_ran_with_its_cluster(tmp_path: Path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    failing = bin_dir / "squeue"
    stderr = (CAPTURED / "failures" / "transient-squeue-M-cluster-stopped.txt").read_text()
    failing.write_text("#!/bin/sh\ncat >&2 <<'END'\n" + stderr.partition("\n")[2]
                       + "END\nexit 1\n")
    failing.chmod(0o755)
    slurm = Slurm(env={"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"},
                  cluster=SECOND)
    with pytest.raises(SlurmError) as caught:
        slurm.squeue()
    assert caught.value.argv[:2] == ["squeue", f"--clusters={SECOND}"]
    assert caught.value.kind == "transient"
    assert f"`squeue --clusters={SECOND} -h -o" in str(caught.value)


@pytest.mark.parametrize("bad", ["", "a,b", "all ", "-x", "a b", "hp;search", "a" * 65])
def test_a_cluster_must_be_one_plain_name(bad):
    with pytest.raises(ValueError, match="not a Slurm cluster name"):
        Slurm(cluster=bad)


def test_partition_availability_parses_sinfo_and_refuses_other_shapes():
    from hpsearch.slurm.parse import parse_partitions_up
    assert parse_partitions_up("debug*|up\nleft|down\n\n") == {"debug*": "up", "left": "down"}
    for hostile in ("debug up\n", "|up\n", "\udcff\x00|up"[1:] + "\nno-bar\n"):
        with pytest.raises(ValueError):
            parse_partitions_up(hostile)

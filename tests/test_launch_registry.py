"""The launchers' and container runtimes' registries (hpsearch.launch.registry): the names
docs/launchers.md documents are the registered ones, in the same order; every runtime is built
through the one signature (ContainerRuntime.from_spec); an unknown name gets the known ones;
a launcher or runtime added to the registry, or by an entry point, is found by make_launcher,
make_runtime and the PATH check with no other edit; and the facts on the classes give the
same host programs as the branches on names they replaced.
"""

from __future__ import annotations

import re
from importlib.metadata import EntryPoint, EntryPoints
from pathlib import Path

import pytest

from hpsearch import registry
from hpsearch.errors import EXIT_BAD_INPUT
from hpsearch.launch import LaunchError, RankLayout, make_launcher, make_runtime
from hpsearch.launch.attempt import build_launch
from hpsearch.launch.base import ContainerRuntime, Launcher, command_line, script
from hpsearch.launch.programs import host_programs
from hpsearch.launch.registry import LAUNCHERS, RUNTIMES
from hpsearch.spec import model

DOCS = Path(__file__).parents[1] / "docs" / "launchers.md"
SLURM = RankLayout(nodes=2, tasks_per_node=2, gpus_per_node=1, under_slurm=True,
                   binds=("/shared/work",), workdir="/shared/work")


def _section(heading: str) -> str:
    return DOCS.read_text().split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def _table_names(heading: str) -> tuple[str, ...]:
    """The `names` in the first column of the table under `## heading`."""
    rows = [line for line in _section(heading).splitlines() if line.startswith("| `")]
    return tuple(name for row in rows for name in re.findall(r"`([^`]+)`", row.split("|")[1]))


def _example_names(key: str) -> tuple[str, ...]:
    """The names the example spec at the top lists in the comment after `key:`."""
    line = next(line for line in DOCS.read_text().splitlines()
                if line.lstrip().startswith(f"{key}:"))
    listed = line.split("#", 1)[1].split(",")[0]  # "none | srun | ...", then ", or {type:"
    return tuple(name.strip() for name in listed.split("|"))


def test_registered_names_are_the_documented_ones():
    assert LAUNCHERS.names() == ("none", "srun", "torchrun", "mpirun", "horovodrun")
    assert LAUNCHERS.names() == _table_names("Launchers") == _example_names("launcher")
    assert RUNTIMES.names() == ("none", "apptainer", "singularity", "pyxis", "charliecloud",
                                "podman")
    assert RUNTIMES.names() == _table_names("Container runtimes") == _example_names("runtime")


@pytest.mark.parametrize("name", RUNTIMES.names())
def test_every_runtime_builds_through_the_one_signature(name):
    container = model.Container(name, "/images/digits", ("/data",), ("NCCL_DEBUG",))
    runtime = RUNTIMES.get(name).from_spec(name, container, ["OMP_NUM_THREADS"])
    assert isinstance(runtime, ContainerRuntime)
    assert runtime.name == name  # the registered name, also for a class registered twice
    assert (runtime.image, runtime.binds) == ("/images/digits", ("/data",))
    assert runtime.env == ("OMP_NUM_THREADS", "NCCL_DEBUG")
    assert make_runtime(container, ["OMP_NUM_THREADS"]).__dict__ == runtime.__dict__
    # `program` is what the argv starts with; a runtime without one adds no words
    argv = runtime.wrap(["true"], SLURM)
    program = RUNTIMES.get(name).program_for(name)
    assert argv[:1] == [program] if program else argv == ["true"]


def test_no_container_is_the_host_runtime():
    host = make_runtime(None)
    assert (host.name, host.uses_image, host.wrap(["true"], SLURM)) == ("none", False, ["true"])
    with pytest.raises(LaunchError, match="container.image: runtime podman needs an image"):
        RUNTIMES.get("podman").from_spec("podman", None)


@pytest.mark.parametrize("name", LAUNCHERS.names())
def test_every_launcher_builds_from_its_args(name):
    launcher = make_launcher(model.Launcher(name, ("--x",)))
    assert isinstance(launcher, LAUNCHERS.get(name))
    assert (launcher.name, launcher.args) == (name, ("--x",))  # its class says its name


def test_unknown_names_get_the_known_ones():
    with pytest.raises(LaunchError) as err:
        make_launcher("srunn")
    assert str(err.value) == ("launcher: 'srunn': expected one of none, srun, torchrun, "
                              "mpirun, horovodrun")
    assert err.value.exit_code == EXIT_BAD_INPUT
    with pytest.raises(LaunchError) as err:
        make_runtime(model.Container("docker", "img"))
    assert str(err.value) == ("container.runtime: 'docker': expected none, apptainer, "
                              "singularity, pyxis, charliecloud or podman")
    assert err.value.exit_code == EXIT_BAD_INPUT


def _by_name(launcher: str, args: tuple[str, ...], runtime: str,
             warm: bool) -> list[tuple[str, str]]:
    """host_programs as it was, a branch per name: what the facts on the classes replace."""
    found = []
    if launcher == "torchrun":
        if runtime == "none" and not (warm and not args):
            found.append(("launcher", "torchrun"))
    elif launcher != "none":
        found.append(("launcher", launcher))
    programs = {"apptainer": "apptainer", "singularity": "singularity",
                "charliecloud": "ch-run", "podman": "podman"}
    if runtime in programs:
        found.append(("container.runtime", programs[runtime]))
    return found


@pytest.mark.parametrize("warm", [False, True])
@pytest.mark.parametrize("args", [(), ("--max-restarts=1",)])
def test_host_programs_from_the_classes_facts(args, warm):
    for launcher in LAUNCHERS.names():
        for runtime in RUNTIMES.names():
            assert host_programs(launcher, args, runtime, warm) == \
                _by_name(launcher, args, runtime, warm), (launcher, runtime)


@pytest.mark.parametrize("launcher", LAUNCHERS.names())
def test_checkpoint_signal_reaches_torchrun_workers_only(launcher, tmp_path):
    recipe = model.TrialRecipe(
        "digits", tmp_path, "true", (), tmp_path, model.Resources(), model.Launcher(launcher),
        model.Container(), "usr1", under_slurm=True, warm=None)
    env = build_launch(recipe, 7, 1, {}).env
    # torchrun passes on to its workers only the signals PET_SIGNALS_TO_HANDLE lists
    assert env.get("PET_SIGNALS_TO_HANDLE") == (
        "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1" if launcher == "torchrun" else None)


# -- plugins ----------------------------------------------------------------------------------

class EchoRuntime(ContainerRuntime):
    """A runtime no part of hpsearch knows: `echo-run IMAGE -- CMD`."""

    name, program = "echo", "echo-run"

    def wrap(self, argv: list[str], layout: RankLayout) -> list[str]:
        return ["echo-run", self.image, "--", *argv]


class PrunLauncher(Launcher):
    """A launcher no part of hpsearch knows: `prun -n N CMD`, one rank per task."""

    name = program = "prun"

    def wrap(self, command: str, layout: RankLayout, runtime: ContainerRuntime) -> str:
        self.check(layout, runtime)
        return script([command_line(["prun", "-n", str(layout.world_size), *self.args],
                                    runtime, ["sh", "-c", command], layout)])


@pytest.fixture
def fresh_registries(monkeypatch):
    """LAUNCHERS and RUNTIMES as they are, given back as they were after the test."""
    for seam in (LAUNCHERS, RUNTIMES):
        monkeypatch.setattr(seam, "_entries", dict(seam._entries))
        monkeypatch.setattr(seam, "_plugins_read", seam._plugins_read)


def _check_plugins_found():
    runtime = make_runtime(model.Container("echo", "/images/x"))
    text = make_launcher(model.Launcher("prun", ("--bind",))).wrap("true", SLURM, runtime)
    assert text == "prun -n 4 --bind \\\n    echo-run /images/x -- \\\n    sh -c true"
    assert host_programs("prun", (), "echo", False) == [("launcher", "prun"),
                                                        ("container.runtime", "echo-run")]
    with pytest.raises(LaunchError, match="charliecloud, podman or echo$"):
        make_runtime(model.Container("docker", "img"))
    with pytest.raises(LaunchError, match="container.image: runtime echo needs an image"):
        make_runtime(model.Container("echo"))


def test_a_plugin_added_at_run_time_is_found(fresh_registries):
    RUNTIMES.add("echo", EchoRuntime)
    LAUNCHERS.add("prun", PrunLauncher)
    _check_plugins_found()


def test_a_plugin_by_entry_point_is_found(fresh_registries, monkeypatch):
    points = {"hpsearch.runtimes": [EntryPoint("echo", f"{__name__}:EchoRuntime",
                                               "hpsearch.runtimes")],
              "hpsearch.launchers": [EntryPoint("prun", f"{__name__}:PrunLauncher",
                                                "hpsearch.launchers")]}
    monkeypatch.setattr(registry, "_entry_points",
                        lambda: EntryPoints([p for group in points.values() for p in group]))
    for seam in (LAUNCHERS, RUNTIMES):
        monkeypatch.setattr(seam, "_plugins_read", False)
    _check_plugins_found()

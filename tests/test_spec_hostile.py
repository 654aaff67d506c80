"""The spec is untrusted input: hostile bytes, exploding aliases, deep nesting, huge files,
control characters in values that reach a batch script, and specs this machine cannot run
all get exit 2 and one message naming file, line and key, from validate, plan and submit
alike, quickly and with nothing written. A spec whose first launch failed before any trial
ran can be corrected and submitted again under the same name.
"""

from __future__ import annotations

import codecs
import dataclasses
import json
import os
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from hpsearch.errors import BadInput
from hpsearch.preflight import parse_spec
from hpsearch.spec.loading import MAX_DEPTH, MAX_NODES
from tests.conftest import ROOT
from tests.helpers import AWK_QUAD, read_store

GOOD = """\
name: demo
command: "echo {x}"
search:
  strategy: random
  trials: 2
  space:
    x: {low: 0.0, high: 1.0}
objective: {metric: loss}
"""
# The same search with a trial that reports its loss (a search that can complete).
QUICK = GOOD.replace('"echo {x}"', json.dumps(AWK_QUAD.replace("{y}", "0")))


def _laughs(levels: int = 9) -> str:
    lines = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        prev, cur = chr(ord("a") + i - 1), chr(ord("a") + i)
        lines.append(f"{cur}: &{cur} [" + ", ".join([f"*{prev}"] * 9) + "]")
    return GOOD + "\n".join(lines) + "\n"


def _alias_depth_chain() -> str:
    """Each anchor wraps the one before in 10 more levels: few nodes, deep once expanded."""
    lines = ["a0: &a0 " + "[" * 10 + "1" + "]" * 10]
    for i in range(1, 10):
        lines.append(f"a{i}: &a{i} " + "[" * 10 + f"*a{i - 1}" + "]" * 10)
    return GOOD + "\n".join(lines) + "\n"


# (id, file bytes, line the message names, fragments it must contain)
HOSTILE_FILES = [
    ("not-utf8", GOOD.replace("name: demo", "name: d\xe9mo").encode("latin-1"), 1,
     ["byte 0xe9 is not UTF-8", "byte offset 7", "must be UTF-8"]),
    ("not-utf8-later-line", GOOD.replace("echo {x}", "echo {x} \udcff").encode(
        "utf-8", "surrogateescape"), 2, ["byte 0xff is not UTF-8", "column 20"]),
    ("utf16-bom", GOOD.encode("utf-16"), 1, ["UTF-16", "must be UTF-8", "iconv"]),
    ("utf16-be-bom", codecs.BOM_UTF16_BE + GOOD.encode("utf-16-be"), 1, ["UTF-16"]),
    ("utf32-bom", GOOD.encode("utf-32"), 1, ["UTF-32", "must be UTF-8"]),
    ("utf16-no-bom", GOOD.encode("utf-16-le"), 1, ["NUL byte", "UTF-16"]),
    ("raw-control-character", GOOD.replace("echo", "ec\x07ho").encode(), 2,
     ["control character U+0007"]),
    ("billion-laughs", _laughs().encode(), 14, ["billion laughs", f"{MAX_NODES:,}"]),
    ("alias-cycle", (GOOD + "loop: &loop [*loop]\n").encode(), 9, ["alias *loop", "cycle"]),
    ("deep-flow-nesting", (GOOD + "deep: " + "[" * 200_000 + "]" * 200_000 + "\n").encode(),
     9, [f"deeper than {MAX_DEPTH} levels"]),
    ("deep-block-nesting", (GOOD + "".join("  " * i + f"k{i}:\n" for i in range(200)))
     .encode(), 9 + MAX_DEPTH - 1, [f"deeper than {MAX_DEPTH} levels"]),
    ("deep-by-aliases", _alias_depth_chain().encode(), 15, ["alias *a5", "deeper than"]),
]


def _run(cli, *args, env=None, timeout=60):
    started = time.monotonic()
    proc = cli(*args, env=env, timeout=timeout)
    return proc, time.monotonic() - started


def _assert_refused(cli, proc, path: Path, line: int | None, fragments: list[str]) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    where = f"hpsearch: error: {path.name}" + (f":{line}:" if line else ":")
    assert proc.stderr.startswith(where), proc.stderr[:500]
    assert proc.stderr.count("\n") == 1, proc.stderr[:2000]  # one message
    for fragment in fragments:
        assert fragment in proc.stderr, (fragment, proc.stderr[:2000])
    assert not cli.runs.exists(), "nothing may be written for a refused spec"


@pytest.mark.parametrize("command", ["validate", "plan", "submit"])
@pytest.mark.parametrize("case, data, line, fragments", HOSTILE_FILES,
                         ids=[c[0] for c in HOSTILE_FILES])
def test_hostile_spec_files_are_refused_with_one_message(cli, command, case, data, line,
                                                         fragments):
    path = cli.cwd / "spec.yaml"
    path.write_bytes(data)
    proc, took = _run(cli, command, path.name)
    _assert_refused(cli, proc, path, line, fragments)
    assert took < 20, f"{case}: {took:.1f}s"


def test_a_utf8_byte_order_mark_is_accepted_as_yaml_tools_do(cli):
    path = cli.cwd / "spec.yaml"
    path.write_bytes(codecs.BOM_UTF8 + QUICK.encode())
    assert cli("validate", path.name).returncode == 0
    cli("submit", path.name, "--no-tui", "-q", check=0)
    # the same file again is the same spec: --resume continues it, no "different spec"
    proc = cli("submit", path.name, "--resume", "--no-tui", "-q")
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("command", ["validate", "plan", "submit"])
def test_a_huge_file_is_refused_before_it_is_read(cli, command):
    path = cli.cwd / "spec.yaml"
    with open(path, "wb") as out:  # 64 MB: a data file passed by mistake
        out.write(GOOD.encode() + b"#" * (64 << 20) + b"\n")
    proc, took = _run(cli, command, path.name)
    _assert_refused(cli, proc, path, None, ["too large (67,108,", "at most 1,048,576 bytes"])
    assert took < 10, f"{took:.1f}s"


def test_an_endless_stream_is_refused_after_the_limit(cli):
    """A spec read from a pipe has no size to look at: reading stops past the limit."""
    (cli.cwd / "spec.yaml").write_text(GOOD)
    proc = subprocess.run(f"{sys.executable} -m hpsearch validate <(cat spec.yaml; "
                          "yes '# padding')", shell=True, executable="/bin/bash", cwd=cli.cwd,
                          env=cli.env, text=True, capture_output=True, timeout=60)
    assert proc.returncode == 2 and "too large (more than that)" in proc.stderr, proc.stderr


# -- values that reach a batch script or a command line ------------------------------------

def _spec_with(tmp_path: Path, extra: str, executor: str = "slurm"):
    return parse_spec(GOOD + f"executor: {executor}\n" + extra, "spec.yaml", tmp_path)


# (id, YAML appended to GOOD, key path, line, fragments)
BAD_VALUES = [
    ("newline-in-partition", 'resources: {partition: "gpu\\n#SBATCH --uid=0"}',
     "resources.partition", 10, ["control character U+000A (newline)"]),
    ("space-in-account", 'resources: {account: "proj x"}', "resources.account", 10,
     ["Slurm account name"]),
    ("tab-in-qos", 'resources: {qos: "hi\\tgh"}', "resources.qos", 10,
     ["control character U+0009 (tab)"]),
    ("newline-in-sbatch-extra", 'resources:\n  sbatch_extra: ["--exclusive", '
                                '"--constraint=a100\\n#SBATCH --uid=0"]',
     "resources.sbatch_extra[1]", 11, ["control character U+000A (newline)"]),
    ("two-options-in-one-entry", 'resources:\n  sbatch_extra: ["--exclusive", '
                                 '"--mem=4G --partition=x"]',
     "resources.sbatch_extra[1]", 11, ["expected one sbatch option", "own list entry"]),
    ("shell-in-sbatch-extra", 'resources:\n  sbatch_extra: ["--comment=a;b", "; rm -rf ~"]',
     "resources.sbatch_extra[1]", 11, ["expected an sbatch option such as"]),
    ("quote-in-sbatch-extra", """resources:\n  sbatch_extra: ['--comment="x"']""",
     "resources.sbatch_extra[0]", 11, ["no spaces or quotes"]),
    ("job-name-in-sbatch-extra", 'resources:\n  sbatch_extra: ["--job-name=mine"]',
     "resources.sbatch_extra[0]", 11, ["--job-name is set by hpsearch"]),
    ("trailing-newline-in-name", None, "name", 1, ["newline"]),
    ("slash-in-partition", 'resources: {partition: "../gpu"}', "resources.partition", 10,
     ["expected a Slurm partition name", "no spaces"]),
    ("trailing-newline-in-time", 'resources: {time: "01:00:00\\n"}', "resources.time", 10,
     ["expected a Slurm time"]),
    ("trailing-newline-in-mem", 'resources: {mem: "4G\\n"}', "resources.mem", 10,
     ["expected a size"]),
    ("newline-in-env-name", 'env: {"FOO\\n": 1}', "env.FOO\n", 10,
     ["environment variable name"]),
    ("escape-in-env-value", 'env: {FOO: "\\e[2J"}', "env.FOO", 10,
     ["control character U+001B (escape)"]),
    ("newline-in-launcher-args", 'launcher: {type: srun, args: ["--mpi=pmix\\nx"]}',
     "launcher.args[0]", 10, ["newline"]),
    ("newline-in-image", 'container: {runtime: apptainer, image: "a.sif\\nb"}',
     "container.image", 10, ["newline"]),
    ("newline-in-metric", None, "objective.metric", 8, ["newline"]),
    ("control-in-command", None, "command", 2, ["U+0008"]),
]


@pytest.mark.parametrize("case, extra, key, line, fragments", BAD_VALUES,
                         ids=[c[0] for c in BAD_VALUES])
def test_control_characters_and_bad_options_name_their_key(tmp_path, case, extra, key, line,
                                                           fragments):
    text = GOOD + "executor: slurm\n" + (extra or "")
    text = {"trailing-newline-in-name": text.replace("name: demo", 'name: "demo\\n"'),
            "newline-in-metric": text.replace("{metric: loss}", '{metric: "lo\\nss"}'),
            "control-in-command": text.replace('"echo {x}"', '"echo {x}\\b"')}.get(case, text)
    with pytest.raises(BadInput) as info:
        parse_spec(text, "spec.yaml", tmp_path)
    err = info.value
    assert (err.key, err.line) == (key, line), str(err)
    for fragment in fragments:
        assert fragment in err.detail, str(err)


def test_newlines_where_they_belong_are_kept(tmp_path):
    """A multi-line command (a here-document) and single sbatch options stay allowed."""
    spec = _spec_with(tmp_path, 'resources:\n  partition: "gpu,gpu-long"\n  sbatch_extra: '
                      '["--constraint=a100|h100", "--exclusive", "--gres=gpu:a100:2", '
                      '"--no-requeue"]\n')
    assert spec.resources.sbatch_extra[0] == "--constraint=a100|h100"
    multi = parse_spec(GOOD.replace('"echo {x}"', '|\n  cat <<EOF\n  {x}\n  EOF'),
                       "spec.yaml", tmp_path)
    assert multi.command == "cat <<EOF\n{x}\nEOF\n"


def test_plan_of_an_injected_partition_prints_no_batch_script(cli):
    path = cli.write_spec(GOOD + "executor: slurm\nresources: {partition: \"gpu\\n#SBATCH "
                                 "--uid=0\"}\n")
    proc = cli("plan", path.name)
    _assert_refused(cli, proc, path, 10, ["resources.partition"])
    assert "#SBATCH" not in proc.stdout


def test_a_runs_dir_with_a_newline_is_refused(cli):
    """The runs dir ends up in #SBATCH --output=...: it is checked like the spec's paths."""
    path = cli.write_spec(GOOD + "executor: slurm\n")
    proc = cli("plan", path.name, env={"HPSEARCH_RUNS_DIR": str(cli.cwd / "r\n#SBATCH x")})
    assert proc.returncode == 2 and "runs_dir" in proc.stderr and "newline" in proc.stderr, \
        proc.stderr


# -- what submit would find only when it starts ----------------------------------------------

@pytest.mark.parametrize("command", ["validate", "plan", "submit"])
def test_a_launcher_the_executor_cannot_run_is_refused_before_anything(cli, command):
    path = cli.write_spec(GOOD + "launcher: srun\n")
    proc = cli(command, path.name)
    _assert_refused(cli, proc, path, 9, ["launcher", "srun", "needs `executor: slurm`"])


def test_submit_executor_override_is_checked_like_the_spec(cli):
    """A Slurm spec that runs srun cannot run with --executor local: refused, nothing written
    (no Slurm is needed to say so)."""
    path = cli.write_spec(GOOD + "executor: slurm\nlauncher: srun\n")
    assert cli("plan", path.name).returncode == 0
    proc = cli("submit", path.name, "--executor", "local")
    _assert_refused(cli, proc, path, 10, ["launcher", "needs `executor: slurm`"])


def test_pyxis_on_the_local_executor_is_refused_by_validate(cli):
    path = cli.write_spec(GOOD + "container: {runtime: pyxis, image: ubuntu}\n")
    _assert_refused(cli, cli("validate", path.name), path, 9, ["container.runtime", "pyxis"])


def test_more_gpus_per_trial_than_listed_is_refused_by_validate(cli):
    path = cli.write_spec(GOOD + "resources: {gpus_per_node: 2}\nexecutor: {type: local, "
                                 "gpus: [0]}\n")
    _assert_refused(cli, cli("validate", path.name), path, 10,
                    ["executor.gpus", "lists 1 device(s) but each trial needs 2"])


def _site_without(tmp_path: Path, hidden: tuple[str, ...]) -> Path:
    """This environment's packages minus `hidden`, as the folder a `python -S` imports from:
    to Python the hidden packages are simply not installed."""
    site = Path(sysconfig.get_paths()["purelib"])
    farm = tmp_path / "site"
    farm.mkdir()
    for entry in site.iterdir():
        name = entry.name.split("-")[0].split(".")[0].lower()
        if name not in hidden:
            (farm / entry.name).symlink_to(entry)
    return farm


@pytest.mark.parametrize("strategy, hidden, missing", [
    ("gp", ("torch", "functorch", "torchgen"), "torch"), ("cmaes", ("cmaes",), "cmaes")])
def test_a_strategy_whose_package_is_missing_is_refused_by_validate(cli, tmp_path, strategy,
                                                                   hidden, missing):
    farm = _site_without(tmp_path, hidden)
    env = {**cli.env, "PYTHONPATH": f"{farm}{os.pathsep}{ROOT}"}

    def hpsearch(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-S", "-m", "hpsearch", *args], cwd=cli.cwd,
                              env=env, capture_output=True, text=True, timeout=120)

    probe = subprocess.run([sys.executable, "-S", "-c", f"import optuna, yaml\ntry:\n"
                            f"    import {missing}\nexcept ImportError:\n    print('gone')"],
                           env=env, capture_output=True, text=True, timeout=60)
    assert probe.stdout.strip() == "gone", probe  # really not installed, optuna still is
    path = cli.write_spec(GOOD.replace("strategy: random", f"strategy: {strategy}"))
    for command in ("validate", "plan", "submit"):
        _assert_refused(cli, hpsearch(command, path.name), path, 4,
                        ["search.strategy", f"needs the Python package {missing}"])
    path.write_text(GOOD)  # a strategy without optional packages still validates there
    assert hpsearch("validate", path.name).returncode == 0


# -- a spec that failed at launch can be corrected and submitted again ----------------------


def test_a_spec_that_failed_at_launch_can_be_corrected_and_submitted_again(cli):
    """A workdir typo is refused at submit, before any trial (issue 38: before, every trial
    failed to start, launch_error); the corrected spec runs under the same name; once a
    trial has run, the name is taken as before."""
    (cli.cwd / "code").mkdir()
    path = cli.write_spec(QUICK + "workdir: cdoe\n")
    first = cli("submit", path.name, "--no-tui", "-q")
    assert first.returncode == 2 and "workdir:" in first.stderr, first.stderr
    assert not (cli.runs / "demo").exists()
    path.write_text(QUICK + "workdir: code\n")  # corrected: no "already exists"
    second = cli("submit", path.name, "--no-tui", "-q")
    assert second.returncode == 0, second.stderr
    exp, trials = read_store(cli.runs, "demo")
    assert exp.spec_yaml.endswith("workdir: code\n")
    assert [t.state for t in trials] == ["completed", "completed"]
    third = cli("submit", path.name, "--no-tui", "-q")  # trials ran: the name is taken
    assert third.returncode == 2 and "already exists" in third.stderr


def test_a_search_that_ran_trials_is_never_started_over(cli):
    path = cli.write_spec(QUICK.replace('"awk', '"exit 3; awk'))
    assert cli("submit", path.name, "--no-tui", "-q").returncode == 1  # trials ran and failed
    proc = cli("submit", path.name, "--no-tui", "-q")
    assert proc.returncode == 2 and "already exists" in proc.stderr


def test_the_batch_script_builder_refuses_a_line_break_it_is_given(tmp_path):
    """Defence in depth: a value that got past the spec check (here set directly) makes
    the builder raise instead of writing a second #SBATCH line."""
    from hpsearch.launch.attempt import build_launch
    from hpsearch.slurm.sbatch import batch_script

    spec = _spec_with(tmp_path, "resources: {partition: gpu}\n")
    launch = build_launch(spec.trial_recipe(True), 1, 1, {"x": 0.5})
    assert "#SBATCH --partition=gpu\n" in batch_script(spec.slurm_job(), launch)
    bad = dataclasses.replace(spec, resources=dataclasses.replace(
        spec.resources, partition="gpu\n#SBATCH --uid=0"))
    with pytest.raises(ValueError, match="control character"):  # the trial's resources
        batch_script(bad.slurm_job(), build_launch(bad.trial_recipe(True), 1, 1, {"x": 0.5}))

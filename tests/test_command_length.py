"""A command too long to run: its parameters substituted, a trial's command passes what Linux
lets one argument hold (MAX_ARG_STRLEN, 131,072 bytes with its NUL) or what sbatch takes.
Before, such a spec validated and every trial of it failed at launch with "Argument list too
long"; now validate, plan and submit refuse it with exit 2, one message naming `command`,
its length and the limit, and nothing written. A command just under the limit still runs.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tests.helpers import read_store

pytestmark = pytest.mark.slow  # 10,000-parameter and 200 KB specs (16-50 s each)

LIMIT = 131_071  # bytes in one argument, its NUL not counted


def _spec(cli, command: str, space: str, extra: str = "", trials: int = 1) -> str:
    cli.write_spec(f"name: long\ncommand: {json.dumps(command)}\nsearch:\n  strategy: random\n"
                   f"  trials: {trials}\n  space:\n{space}objective: {{metric: loss}}\n{extra}")
    return "spec.yaml"


def _refused(proc, fragments: list[str]) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr[-2000:])
    message = proc.stderr.rstrip("\n")
    assert "\n" not in message and "Traceback" not in message, message[-2000:]
    assert message.startswith("hpsearch: error: spec.yaml:2: command: "), message
    for fragment in fragments:
        assert fragment in message, message
    assert len(message) < 1000
    return message


def _many(n: int) -> str:
    return "".join(f"    p{i:05d}: {{low: 0.0, high: 1.0}}\n" for i in range(n))


@pytest.mark.parametrize("how", ["{params}", "each {name}"])
def test_ten_thousand_parameters_on_the_command_line_are_refused_up_front(cli, how):
    """10,000 floats are about 300 KB on the command line: before, validate said ok and
    every trial failed at launch."""
    names = " ".join(f"{{p{i:05d}}}" for i in range(10_000))
    spec = _spec(cli, "echo " + ("{params}" if how == "{params}" else names), _many(10_000))
    for command in ("validate", "plan", "submit"):
        message = _refused(cli(command, spec), ["Argument list too long",
                                                f"at most {LIMIT:,} bytes (MAX_ARG_STRLEN)"])
        size = int(re.search(r"the command is ([\d,]+) bytes", message)[1].replace(",", ""))
        assert size > 180_000
    assert not cli.runs.exists()


def _fixed(length: int) -> str:
    return f"    v: {{value: {'a' * length}}}\n    x: {{choices: [0, 1]}}\n"


# The trial reports how many bytes of v (and x) reached it.
COUNT = 'echo "@hpsearch step=0 loss=$(printf %s {v}{x} | wc -c)"'


def test_a_command_just_under_the_limit_runs_and_one_byte_more_is_refused(cli):
    message = _refused(cli("validate", _spec(cli, COUNT, _fixed(200_000))), ["131,071"])
    size = int(re.search(r"the command is ([\d,]+) bytes", message)[1].replace(",", ""))
    longest = 200_000 - (size - LIMIT)  # the value that makes the command LIMIT bytes

    _refused(cli("validate", _spec(cli, COUNT, _fixed(longest + 1))), [f"{LIMIT + 1:,} bytes"])
    assert not cli.runs.exists()

    spec = _spec(cli, COUNT, _fixed(longest))
    cli("validate", spec, check=0)
    proc = cli("submit", spec, timeout=120)
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-2000:])
    _, (trial,) = read_store(cli.runs, "long")
    assert trial.state == "completed", trial
    assert trial.objective_values == [longest + 1]  # every byte of the value arrived


TWICE = 'echo {v} {v} > /dev/null; echo "@hpsearch step=0 loss={x}"'


def test_slurm_limits_each_argument_and_the_batch_script(cli):
    """On Slurm the command is lines of a batch script: each word is one argument, so two
    100 KB arguments are fine there, though not as the local executor's one `sh -c`
    argument; a launcher puts the whole command in one argument again, and sbatch takes a
    batch script of at most 4 MiB (max_script_size)."""
    space = _fixed(100_000)
    _refused(cli("validate", _spec(cli, TWICE, space)), ["/bin/sh -c"])
    cli("validate", _spec(cli, TWICE, space, "executor: slurm\n"), check=0)
    _refused(cli("validate", _spec(cli, TWICE, space, "executor: slurm\nlauncher: srun\n")),
             ["one argument of the command is 20", "MAX_ARG_STRLEN"])  # 2 x 100 KB + rank script
    many = " ; ".join([": {v}"] * 45) + ' ; echo "@hpsearch step=0 loss={x}"'
    _refused(cli("validate", _spec(cli, many, space, "executor: slurm\n")),
             ["batch script is 4,6", "4,194,304 bytes", "max_script_size"])
    assert not cli.runs.exists()


def test_parameters_too_long_for_the_environment_are_refused_at_the_space(cli):
    """$HPSEARCH_PARAMS holds every parameter: past MAX_ARG_STRLEN no trial can start, even
    with a command that passes none of them."""
    space = "".join(f"    f{i}: {{value: {'b' * 30_000}}}\n" for i in range(5))
    command = "echo {f0} > /dev/null; echo {f1} {f2} {f3} {f4} > /dev/null; echo {x}"
    proc = cli("validate", _spec(cli, command, space + "    x: {choices: [0, 1]}\n",
                                 "executor: slurm\n"))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("hpsearch: error: spec.yaml:6: search.space: the parameters "
                                  "are 150,"), proc.stderr
    assert "$HPSEARCH_PARAMS" in proc.stderr and "MAX_ARG_STRLEN" in proc.stderr


def test_command_and_environment_together_stay_within_one_exec_of_this_machine(cli):
    """Under `ulimit -s 512` one exec takes at most 128 KiB of arguments and environment:
    a 100 KB command that passes $HPSEARCH_PARAMS (100 KB too) cannot start."""
    spec = _spec(cli, COUNT, _fixed(100_000))
    cli("validate", spec, check=0)
    proc = subprocess.run(f"ulimit -s 512 && {sys.executable} -m hpsearch validate {spec}",
                          shell=True, executable="/bin/bash", cwd=cli.cwd, env=cli.env,
                          capture_output=True, text=True, timeout=60)
    _refused(proc, ["the command and the environment of a trial are 20",
                    "at most 131,072 bytes (a quarter of the stack limit"])


def test_a_long_env_value_is_refused_at_its_key(cli):
    spec = _spec(cli, "echo {x}", "    x: {choices: [0, 1]}\n",
                 "env: {BIG: " + "b" * 140_000 + "}\n")
    proc = cli("validate", spec)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("hpsearch: error: spec.yaml:9: env.BIG: BIG=... is 140,004 "
                                  "bytes as an environment string"), proc.stderr


def test_the_word_splitter_reads_commands_as_shlex_does():
    """The size check splits a long command into the shell's words with a regular
    expression (shlex reads one character at a time: 10.8 s for a 4.5 MB command): on
    20,000 seeded random strings of quotes, backslashes and blanks it gives shlex.split's
    words, and None where shlex raises (an unbalanced quote)."""
    import random
    import shlex

    from hpsearch.preflight.command_size import split_words

    rng = random.Random(1)
    for _ in range(20_000):
        text = "".join(rng.choice("ab '\"\\\t\n$#;") for _ in range(rng.randint(0, 12)))
        try:
            want = shlex.split(text)
        except ValueError:
            want = None
        assert split_words(text) == want, repr(text)

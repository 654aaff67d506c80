"""Which program was not found, from the stderr of a trial that exited 127.

127 is the shell's status for a command it cannot find. The shell's own words are in the
trial's stderr.log ("sh: 1: exec: torchrun: not found" from dash, "torchrun: command not
found" from bash, "env: 'torchrun': No such file or directory"), but under Slurm the last
lines are srun's ("srun: error: node2: task 1: Exited with exit code 127"), which name the
node and not the program. `missing_program` names both, for the trial's failure message.
"""

from __future__ import annotations

import re

NOT_FOUND_EXIT = 127
_NOT_FOUND = re.compile(r"(?:^|: )(?:exec: )?['‘]?(?P<program>[^\s:'‘’\x00-\x1f\x7f]+)['’]?: "
                        r"(?:(?:command )?not found|No such file or directory)\s*$")
_SRUN_TASK = re.compile(r"^srun: error: (?P<node>[^\s:]+): tasks? [\d,-]+: Exited with exit "
                        rf"code {NOT_FOUND_EXIT}\s*$")


def missing_program(stderr_lines: list[str]) -> str | None:
    """'torchrun: not found on node2 (...)': the first program the shell could not find in
    these lines, the nodes whose srun tasks exited 127 (if any), and what to do; or None
    when no line names a program."""
    program = next((m.group("program") for line in stderr_lines
                    if (m := _NOT_FOUND.search(line))), None)
    if program is None:
        return None
    nodes = list(dict.fromkeys(m.group("node") for line in stderr_lines
                               if (m := _SRUN_TASK.match(line))))
    where = f" on {', '.join(nodes)}" if nodes else ""
    if "/" in program:  # a path: not a PATH lookup
        return f"{program}: not found{where}"
    nodes_text = "on every node the trial runs on" if nodes else "where the trial runs"
    return (f"{program}: not found{where} (it must be on PATH {nodes_text}: "
            "docs/trial.md#your-scripts-environment)")

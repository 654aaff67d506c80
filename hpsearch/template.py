"""The command template: `{name}` placeholders replaced by shell-quoted values.

`${VAR}` stays a shell variable (a `{` right after `$` is not a placeholder) and `{{` / `}}`
are literal braces. Every substituted value goes through shlex.quote, so a value with spaces,
quotes, `$(...)`, `;` or newlines reaches the trial as one intact argument and runs nothing.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any, Mapping

# Placeholders hpsearch fills itself; a search parameter may not take these names.
BUILTIN_PLACEHOLDERS = ("trial_id", "trial_dir", "checkpoint_dir", "experiment", "params",
                        "python")

_TOKEN = re.compile(r"\$\{[^{}]*\}|\{\{|\}\}|\{([^{}]*)\}|\{|\}")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def placeholders(template: str) -> list[str]:
    """Names used as {name} in template, in order. ValueError on a malformed brace."""
    names = []
    for match in _TOKEN.finditer(template):
        token = match.group(0)
        if token in ("{{", "}}") or token.startswith("${"):
            continue  # literal brace, or a shell variable ${VAR}
        if match.group(1) is None:
            raise ValueError(f"unmatched '{token}' at column {match.start() + 1}; write "
                             f"'{token * 2}' for a literal brace")
        name = match.group(1)
        if not _NAME.match(name):
            raise ValueError(f"bad placeholder {{{name}}} at column {match.start() + 1}; "
                             "expected {parameter_name}")
        names.append(name)
    return names


def shell_value(value: Any) -> str:
    """The text of a parameter value as a trial sees it on its command line."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return repr(value)  # keep 1.0 a float on the command line
    return str(value)


def render(template: str, params: Mapping[str, Any], builtins: Mapping[str, str]) -> str:
    """Substitute every placeholder, each value quoted for a POSIX shell."""
    values = {**{k: shell_value(v) for k, v in params.items()}, **builtins}
    values.setdefault("params", json.dumps(dict(params), sort_keys=True))

    def substitute(match: re.Match) -> str:
        token = match.group(0)
        if token == "{{":
            return "{"
        if token == "}}":
            return "}"
        if token.startswith("${"):
            return token
        return shlex.quote(values[match.group(1)])

    return _TOKEN.sub(substitute, template)

"""The command template: `{name}` placeholders replaced by shell-quoted values.

Only `{identifier}` is a placeholder: `${VAR}` stays a shell variable, any other brace text
(awk's `{ print $1 }`, `{a,b}`) is left as written, and `{{name}}` gives a literal `{name}`.
Every substituted value goes through shlex.quote, so a value with spaces, quotes, `$(...)`,
`;` or newlines reaches the trial as one intact argument and runs nothing.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from typing import Any

# Placeholders hpsearch fills itself; a search parameter may not take these names.
BUILTIN_PLACEHOLDERS = ("trial_id", "trial_dir", "checkpoint_dir", "experiment", "params",
                        "python")

_TOKEN = re.compile(r"\$\{[^{}]*\}|\{\{[A-Za-z_][A-Za-z0-9_]*\}\}|\{([A-Za-z_][A-Za-z0-9_]*)\}")


def placeholders(template: str) -> list[str]:
    """Names used as {name} in template, in order."""
    return [m.group(1) for m in _TOKEN.finditer(template) if m.group(1) is not None]


def shell_value(value: Any) -> str:
    """The text of a parameter value as a trial sees it on its command line."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, (list, dict)):
        return json.dumps(value, sort_keys=True)  # a fixed list or mapping arrives as JSON
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return repr(value)  # keep 1.0 a float on the command line
    return str(value)


def render(template: str, params: Mapping[str, Any], builtins: Mapping[str, str]) -> str:
    """Substitute every placeholder, each value quoted for a POSIX shell."""
    values = {**{k: shell_value(v) for k, v in params.items()}, **builtins}
    values.setdefault("params", json.dumps(dict(params), sort_keys=True))

    def substitute(match: re.Match) -> str:
        token = match.group(0)
        if match.group(1) is None:  # ${VAR} stays; {{name}} becomes {name}
            return token if token.startswith("${") else token[1:-1]
        return shlex.quote(values[match.group(1)])

    return _TOKEN.sub(substitute, template)

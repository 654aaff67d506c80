"""`hpsearch scale`'s child spec: one trial's configuration re-run at several sizes.

The child is the parent's spec as it was submitted, with
- `name`: PARENT-scale-K;
- `search`: a grid, one trial at a time (parallel 1: sizes measured alone, not side by
  side), whose space holds every parameter of trial K fixed to its value, and the size
  parameter taking each size; the parent's pruner, warm starts and trial count are dropped;
- `resources.<field>` (nodes, gpus_per_node or tasks_per_node) naming the size parameter:
  the parameter the parent's field already names ("{ranks}"), else a new one
  (`nodes`, `gpus`, `tasks`, or `scale_<that>` where the name is taken);
- `workdir`, `runs_dir` and `placement.topology` made absolute, so the child reads the same
  files although its spec file lives in its own experiment folder;
- a first comment line naming the parent and trial (PARENT_MARK), kept in the child's store.
Pure: text in, text out; validating it is the caller's (hpsearch.preflight.parse_spec).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

# the command's option -> the resources field it sizes
SIZE_FIELDS = {"nodes": "nodes", "gpus": "gpus_per_node", "tasks": "tasks_per_node"}
PARENT_MARK = "# hpsearch scale: parent="
_REFERENCE = re.compile(r"^\{([A-Za-z_][A-Za-z0-9_]*)\}$")


def child_name(parent: str, trial: int) -> str:
    return f"{parent}-scale-{trial}"


def size_param(raw: dict, option: str, taken: set[str]) -> tuple[str, bool]:
    """(the parameter that sizes `option`'s field, whether the parent's resources name it)."""
    written = (raw.get("resources") or {}).get(SIZE_FIELDS[option])
    found = _REFERENCE.match(written.strip()) if isinstance(written, str) else None
    if found:
        return found.group(1), True
    name = option
    while name in taken:
        name = f"scale_{name}"
    return name, False


def child_text(parent_text: str, parent: str, trial: int, params: dict[str, Any],
               option: str, sizes: list[int], paths: dict[str, Path | None]) -> str:
    """The child spec's YAML. `params`: trial K's parameters; `option`: a key of
    SIZE_FIELDS; `paths`: the parent's resolved workdir, runs_dir and topology (or None)."""
    raw = yaml.safe_load(parent_text) or {}
    name, named = size_param(raw, option, set(params))
    space: dict[str, Any] = {k: {"value": v} for k, v in params.items() if k != name}
    space[name] = {"choices": list(sizes)}
    raw["name"] = child_name(parent, trial)
    raw["search"] = {"strategy": "grid", "parallel": 1, "space": space}
    resources = dict(raw.get("resources") or {})
    resources[SIZE_FIELDS[option]] = f"{{{name}}}"
    raw["resources"] = resources
    raw["workdir"] = str(paths["workdir"])
    raw["runs_dir"] = str(paths["runs_dir"])
    if paths.get("topology") is not None:
        raw["placement"] = {**(raw.get("placement") or {}), "topology": str(paths["topology"])}
    head = (f"{PARENT_MARK}{parent} trial={trial} {option}="
            f"{','.join(map(str, sizes))} param={name}"
            f"{'' if named else ' (added by scale)'}\n")
    return head + yaml.safe_dump(raw, sort_keys=False, default_flow_style=False)


def parent_of(child_spec_text: str) -> tuple[str, int] | None:
    """(parent, trial) from a child spec's first line, or None for another spec."""
    first = child_spec_text.split("\n", 1)[0]
    if not first.startswith(PARENT_MARK):
        return None
    parent, _, rest = first[len(PARENT_MARK):].partition(" trial=")
    trial = rest.split(" ", 1)[0]
    return (parent, int(trial)) if trial.isdigit() else None

"""How the report draws each parameter: on a linear, log, integer or categorical axis.

Read from the stored spec's `search.space` as written (no validation: the experiment was
validated when it was submitted, and the report must open on any machine), and completed
by the values the trials got, for a parameter the spec does not list at the top level.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ParamScale:
    """One parameter's axis. kind: "float", "int" or "categorical"; log: a log axis (a
    numeric parameter with `log: true`); choices: a categorical's values in the spec's order,
    then any other value seen in a trial."""

    name: str
    kind: str
    log: bool = False
    choices: tuple = ()

    @property
    def categorical(self) -> bool:
        return self.kind == "categorical"

    def label(self) -> str:
        """The axis label: the name, with "(log)" for a log axis."""
        return f"{self.name} (log)" if self.log else self.name


def choice_label(value) -> str:
    """A categorical value as the report writes it (YAML's spelling of true/false/null)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def spec_space(spec_yaml: str) -> dict[str, dict]:
    """{name: its definition mapping} of the spec's search.space, in the spec's order; {}
    where the text or that key cannot be read. Fixed (bare scalar) parameters are left out."""
    import yaml
    try:
        raw = yaml.safe_load(spec_yaml) or {}
    except yaml.YAMLError:
        return {}
    search = raw.get("search") if isinstance(raw, dict) else None
    space = search.get("space") if isinstance(search, dict) else None
    if not isinstance(space, dict):
        return {}
    return {str(k): v for k, v in space.items() if isinstance(v, dict)}


def param_scales(space: dict[str, dict], values: dict[str, list]) -> dict[str, ParamScale]:
    """The scale of each parameter in `values` ({name: the values the trials that have it
    got}), in the spec's order, then the others in the order given.

    A spec entry with `choices` (or `type: categorical`) is categorical; a numeric one with
    `log: true` is on a log axis when every value is > 0. Without a spec entry: numbers
    are float or int, anything else categorical."""
    names = [n for n in space if n in values] + [n for n in values if n not in space]
    out = {}
    for name in names:
        seen = [v for v in values[name] if v is not None]
        entry = space.get(name, {})
        numeric = bool(seen) and all(_is_number(v) for v in seen)
        if "choices" in entry or entry.get("type") == "categorical" or not numeric:
            listed = list(entry.get("choices") or [])
            labels = {choice_label(c) for c in listed}
            extra = sorted({choice_label(v) for v in values[name]} - labels)
            out[name] = ParamScale(name, "categorical",
                                   choices=tuple(choice_label(c) for c in listed) + tuple(extra))
            continue
        kind = "int" if all(isinstance(v, int) for v in seen) else "float"
        log = bool(entry.get("log")) and all(v > 0 for v in seen)
        out[name] = ParamScale(name, kind, log)
    return out

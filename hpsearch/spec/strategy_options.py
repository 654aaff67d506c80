"""A strategy's own settings under `search:` (spec/vocabulary.py Option): each checked as its
registry entry declares it, defaults filled in; one that belongs to another strategy is named
as such, not as an unknown key."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hpsearch.errors import shown
from hpsearch.spec.vocabulary import Option, StrategyFacts
from hpsearch.spec.yamlpos import KeyPath

if TYPE_CHECKING:
    from hpsearch.spec.validate import _Validator


def options(v: _Validator, d: dict, path: KeyPath,
            facts: StrategyFacts) -> tuple[tuple[str, Any], ...]:
    """(name, value) of each of `facts`' options, as given in `d` or by default."""
    own = {o.name for o in facts.options}
    for key in d:
        if key in v.vocabulary.option_names() and key not in own:
            owners = [s.name for s in v.vocabulary.strategies
                      if any(o.name == key for o in s.options)]
            v.problems.note(v.fail(path + (key,), f"'{key}' is a setting of strategy "
                                                  f"{' or '.join(owners)}, not of "
                                                  f"{facts.name}"))
    return tuple((o.name, v.optional(d, o.name, path, lambda x, p, o=o: _value(v, o, x, p),
                                      o.default)) for o in facts.options)


def _value(v: _Validator, option: Option, value: Any, path: KeyPath) -> Any:
    if option.kind == "int":
        return v.integer(value, path, option.low)
    if value not in option.choices:
        raise v.fail(path, f"expected one of {', '.join(map(str, option.choices))}; "
                           f"got {shown(value)}")
    return value

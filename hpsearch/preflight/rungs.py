"""Rungs a trial can never reach (issue 38): `max_resource: 9` while the command passes a
fixed `epochs: 5`.

No key ties the pruner's resource to the command. The convention (docs/early-stopping.md):
one reported step is one unit of resource, an epoch, and the command passes the full length
in every segment (`--epochs {epochs}`, equal to max_resource). So a fixed parameter *feeds*
the resource when the command passes it as `{name}` and its name, or the option written just
before the placeholder (`--epochs {n}`, `--max-epochs={n}`, `trainer.max_epochs={n}`), counts
epochs, steps or iterations (`epochs`, `max_epochs`, `num_train_epochs`, `n_steps`,
`max_iter`, ...). Below the pruner's max_resource (promotion; hyperband) or, for successive
halving that stops trials, below its first rung, it leaves rungs no trial reaches: a warning,
not an error, as a script may count its steps otherwise.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hpsearch.spec.model import Param, Spec

_COUNT = re.compile(r"^(?:(?:max|num|n|total|train|num_train|training)_)?"
                    r"(?:epochs?|steps?|iters?|iterations?)$")
_OPTION = re.compile(r"(--?[A-Za-z][\w.-]*|[A-Za-z_][\w.]*)(?:=|\s+)$")


def unreachable_rungs(spec: Spec) -> tuple[str, str] | None:
    """(key, warning) where a fixed parameter the command passes is below a rung it feeds;
    else None."""
    pruner = spec.search.pruner
    rungs = _rungs(spec)
    found = _resource_parameter(spec.command, spec.search.space) if rungs else None
    if not found:
        return None
    param, written = found
    beyond = [r for r in rungs if r > param.value]
    if not beyond:
        return None
    top = pruner.max_resource or pruner.option("max_resource")
    what = (f"max_resource is {top}" if top is not None else
            f"its first rung is {rungs[0]} steps (min_resource)")
    fix = (f"set max_resource to {param.value} or {param.name} to {top}" if top is not None
           else f"lower min_resource, or raise {param.name}")
    shown = ", ".join(map(str, beyond))
    return (f"search.space.{param.name}",
            f"the command passes {written} = {param.value}, the steps a trial runs, but "
            f"search.pruner's {what}: rung{'s' if len(beyond) > 1 else ''} {shown} "
            f"(of {', '.join(map(str, rungs))}) can never be reached; {fix} (one reported "
            "step is one unit of resource: docs/early-stopping.md)")


def _rungs(spec: Spec) -> list[int]:
    """The step counts the pruner judges or pauses trials at, lowest first ([] if none)."""
    pruner = spec.search.pruner
    if pruner.promotion:
        from hpsearch.pruning.promotion import Promotion
        ladders = Promotion(pruner, spec.objectives[0].direction, "").ladders
        return sorted({r for ladder in ladders for r in ladder})
    if pruner.type == "hyperband":
        return [pruner.option("max_resource")]
    if pruner.type == "successive_halving":
        eta = pruner.option("reduction_factor", 4)
        return [pruner.option("min_resource", 1) * eta ** pruner.option(
            "min_early_stopping_rate", 0)]
    return []


def _resource_parameter(command: str, space: tuple[Param, ...]) -> tuple[Param, str] | None:
    """(the fixed integer parameter that counts a trial's steps, as the command writes it)."""
    for p in space:
        if p.kind != "fixed" or not isinstance(p.value, int) or isinstance(p.value, bool):
            continue
        placeholder = "{" + p.name + "}"
        for at in (m.start() for m in re.finditer(re.escape(placeholder), command)):
            option = _OPTION.search(command[:at])
            names = [p.name] + ([option.group(1)] if option else [])
            if any(_COUNT.match(_plain(name)) for name in names):
                return p, (option.group(0) if option else "") + placeholder
    return None


def _plain(name: str) -> str:
    """`--max-epochs` -> `max_epochs`; `trainer.max_epochs` -> `max_epochs`."""
    return name.lstrip("-").rsplit(".", 1)[-1].replace("-", "_").lower()

"""What the read-only views need to know of an experiment's spec, read from the spec text the
store keeps (not validated again: a view shows what was run)."""

from __future__ import annotations


def spec_facts(spec_yaml: str) -> tuple[tuple[str, ...], str]:
    """(objective metric names, executor type) from the stored spec text."""
    import yaml
    raw = yaml.safe_load(spec_yaml) or {}
    objective = raw.get("objective") or []
    objectives = objective if isinstance(objective, list) else [objective]
    metrics = tuple(str(o.get("metric")) for o in objectives if isinstance(o, dict))
    executor = raw.get("executor") or {}
    return metrics, str(executor.get("type", "local")) if isinstance(executor, dict) else "local"

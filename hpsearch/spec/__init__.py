"""The experiment spec: YAML in, a validated, typed Spec out."""

from hpsearch.spec.model import Objective, Param, Spec
from hpsearch.spec.validate import load_spec, parse_duration, parse_spec

__all__ = ["Objective", "Param", "Spec", "load_spec", "parse_duration", "parse_spec"]

"""The experiment spec: YAML in, a validated, typed, frozen Spec out (validate.build). The
bottom step: it imports nothing of the system above it; the seams' names come in as a
Vocabulary, and what needs this machine or the cluster to check is hpsearch.preflight's,
which is how every command reads a spec (preflight.load_spec)."""

from hpsearch.spec.model import Objective, Param, Spec

__all__ = ["Objective", "Param", "Spec"]

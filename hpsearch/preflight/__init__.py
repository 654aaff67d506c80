"""Preflight: what checking a spec needs beyond the spec's own rules. The spec package is the
bottom step (YAML to a frozen Spec) and imports nothing above it; here its names come from
the seams' registries (vocabulary.py), and the checks that need the system run
(run_checks.py): the strategy's packages, local GPUs, the launcher with the executor, the
launch text and batch-script sizes (command_size.py); the files the command names
(here.py), the rungs a trial can reach (rungs.py), whether Slurm answers (cluster.py).
`submit`, `validate` and `plan` read every spec through load_spec (load.py).
"""

from hpsearch.preflight.here import check_here, missing_here
from hpsearch.preflight.load import load_spec, parse_spec

__all__ = ["check_here", "load_spec", "missing_here", "parse_spec"]

"""A spec read and checked: the spec's own rules (hpsearch.spec), then what only this machine
can tell (run_checks.py)."""

from __future__ import annotations

from pathlib import Path

from hpsearch.errors import BadInput
from hpsearch.preflight.run_checks import run_problem
from hpsearch.preflight.vocabulary import vocabulary
from hpsearch.spec.loading import read_spec_text
from hpsearch.spec.model import Spec
from hpsearch.spec.validate import build
from hpsearch.spec.yamlpos import dotted, load_yaml_with_lines, nearest_line
from hpsearch.store.runs import default_runs_dir


def load_spec(path: str | Path, runs_dir: str | Path | None = None,
              executor: str | None = None) -> Spec:
    """Read and check the spec at `path`. Relative paths in it are relative to its folder.
    `executor` overrides executor.type (submit --executor), and is checked like it."""
    path = Path(path)
    return parse_spec(read_spec_text(path), str(path), path.resolve().parent, runs_dir,
                      executor)


def parse_spec(text: str, file: str, base_dir: Path, runs_dir: str | Path | None = None,
               executor: str | None = None) -> Spec:
    """The checked Spec of `text`, or a BadInput (BadInputs: every problem the spec's own
    rules find, in file order). Checks also that this machine can run it: the strategy's
    optional packages, the launcher with the executor, the command's size."""
    spec = build(text, file, base_dir, vocabulary(), default_runs_dir(), runs_dir, executor)
    found = run_problem(spec)
    if found:
        keys, problem = found
        lines = load_yaml_with_lines(text, file)[1]
        raise BadInput(problem, file, nearest_line(lines, keys), dotted(keys) or None)
    return spec

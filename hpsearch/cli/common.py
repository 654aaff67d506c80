"""Helpers shared by the CLI commands."""

from __future__ import annotations

import argparse
from pathlib import Path

from hpsearch.store.runs import default_runs_dir

EXIT_CODES = "exit codes: 0 ok, 1 trials failed or search incomplete, 2 bad input or conflict"


def add_command(sub, name: str, help_text: str, examples: str, handler) -> argparse.ArgumentParser:
    parser = sub.add_parser(name, help=help_text, description=help_text,
                            epilog="examples:\n" + examples + "\n\n" + EXIT_CODES,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.set_defaults(handler=handler)
    return parser


def add_runs_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs-dir", type=Path, default=None,
                        help="where experiments live (default: $HPSEARCH_RUNS_DIR or "
                             "./hpsearch-runs)")


def spec_path_to_name(args) -> None:
    """`hpsearch status spec.yaml` (resume, best, watch, ...): a NAME that is a spec file
    stands for the experiment it names, in its runs dir unless --runs-dir says otherwise."""
    name = getattr(args, "name", None)
    if not isinstance(name, str) or not name.endswith((".yaml", ".yml")) \
            or not Path(name).is_file():
        return
    from hpsearch.preflight import load_spec  # exit 2 with its line if the spec is bad
    spec = load_spec(name, args.runs_dir.absolute() if getattr(args, "runs_dir", None)
                     else None)
    args.name = spec.name
    if hasattr(args, "runs_dir"):
        args.runs_dir = spec.runs_dir


def runs_dir_of(args) -> Path:
    return args.runs_dir.absolute() if args.runs_dir else default_runs_dir()


def format_value(value) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, bool) or value is None:
        return yaml_text(value)  # true, false, null: as in the spec
    return str(value)


def yaml_text(value) -> str:
    """A value as it would be written in the spec (flow style): [sgd, adam], true, null."""
    import yaml
    text = yaml.safe_dump(value, default_flow_style=True, width=10**6, allow_unicode=True)
    return text.strip().removesuffix("...").strip()


def format_params(params: dict) -> str:
    return " ".join(f"{k}={format_value(v)}" for k, v in params.items())


def print_table(header: list[str], rows: list[list[str]]) -> None:
    """Columns padded to their widest cell, the last one unpadded."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(header)]
    widths[-1] = 0  # last column unpadded
    for line in [header] + rows:
        print("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip())

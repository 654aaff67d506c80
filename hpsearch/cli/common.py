"""Helpers shared by the CLI commands."""

from __future__ import annotations

import argparse
from pathlib import Path

from hpsearch.runs import default_runs_dir

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


def runs_dir_of(args) -> Path:
    return args.runs_dir.absolute() if args.runs_dir else default_runs_dir()


def format_value(value) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def format_params(params: dict) -> str:
    return " ".join(f"{k}={format_value(v)}" for k, v in params.items())

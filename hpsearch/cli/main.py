"""`hpsearch` command line: parses arguments, maps errors to exit codes.

Exit codes: 0 ok; 1 trials failed or the search is incomplete; 2 bad input (spec, flags,
names) or a conflict (the experiment exists, another driver owns it).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import NoReturn

from hpsearch import __version__
from hpsearch.cli import (
    checkpoint_cmds,
    cluster_cmds,
    finish_cmds,
    grow_cmds,
    inspect_cmds,
    manage_cmds,
    mirror_cmds,
    optuna_cmds,
    replay_cmds,
    run_cmds,
    scale_cmds,
    sites_cmds,
    spec_cmds,
    view_cmds,
)
from hpsearch.cli.common import spec_path_to_name
from hpsearch.errors import EXIT_BAD_INPUT, HpsearchError

EPILOG = """\
examples:
  hpsearch validate examples/quadratic/spec.yaml
  hpsearch plan examples/quadratic/spec.yaml
  hpsearch submit examples/quadratic/spec.yaml --executor local
  hpsearch status                 # every experiment under ./hpsearch-runs
  hpsearch best quadratic -k 3
  hpsearch resume quadratic       # after a crash, kill -9 or Ctrl-C
  hpsearch watch quadratic        # live view; Ctrl-C leaves it, the search goes on
  hpsearch topology               # Slurm: leaf switches, their nodes and trials

exit codes: 0 ok, 1 trials failed or search incomplete, 2 bad input or conflict
docs: docs/cli.md, docs/spec.md
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse exits 2 too; keep one message style
        self.print_usage(sys.stderr)
        print(f"hpsearch: error: {message}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="hpsearch", description="Crash-safe hyperparameter search on "
                     "Slurm clusters and laptops.", epilog=EPILOG,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"hpsearch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for module in (spec_cmds, run_cmds, inspect_cmds, view_cmds, cluster_cmds,
                   checkpoint_cmds, optuna_cmds, mirror_cmds, manage_cmds, grow_cmds, finish_cmds,
                   replay_cmds, scale_cmds, sites_cmds):
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return EXIT_BAD_INPUT
    try:
        spec_path_to_name(args)
        return args.handler(args)
    except HpsearchError as exc:
        for one in getattr(exc, "errors", [exc]):  # BadInputs: each problem on its line
            print(f"hpsearch: error: {one}", file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:  # `hpsearch status | head`: the reader has what it wanted
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the exit's flush finds no pipe either
        return 0
    except OSError as exc:  # e.g. an --out file in a folder we may not write: no traceback
        print(f"hpsearch: error: {exc.filename + ': ' if exc.filename else ''}"
              f"{exc.strerror or exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env bash
# Quick start, part 2: install hpsearch with its test dependencies into ./.venv and run the
# whole test suite. Extra arguments go to pytest (e.g. scripts/test.sh -k resume).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh test,gp
exec .venv/bin/python -m pytest -q -rs "$@"

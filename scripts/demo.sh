#!/usr/bin/env bash
# Quick start, part 1: install hpsearch into ./.venv and run a real TPE search of 24 trials
# on the local executor (examples/quadratic), then print the best trial.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh report   # matplotlib, for `hpsearch report` in the README's tour
rm -rf demo-runs/quadratic   # the demo starts fresh each time; your own runs are elsewhere
.venv/bin/hpsearch submit examples/quadratic/spec.yaml --executor local --runs-dir demo-runs
echo
.venv/bin/hpsearch best quadratic -k 3 --runs-dir demo-runs

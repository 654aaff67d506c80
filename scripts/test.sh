#!/usr/bin/env bash
# Quick start, part 2: install hpsearch with its test dependencies into ./.venv and run the
# whole test suite. Extra arguments go to pytest (e.g. scripts/test.sh -k resume).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh test,gp,pipeline,report,bench,dashboard
# MF-Hartmann learning curves for benchmarks/early_stopping.py: mf-prior-bench 1.10 pins
# numpy < 2 for parts hpsearch does not use, so it goes in without its dependencies (the
# benchmark loads only its numpy-only MF-Hartmann module).
.venv/bin/python -m pip install -q --no-deps mf-prior-bench==1.10.0
# The Slurm tests run on a real emulated cluster (scripts/slurm-cluster.sh; docs/testing.md).
# Installing its Debian packages here keeps apt out of the tests' time limits. Not root: the
# Slurm tests skip and say why (under CI=true they fail instead).
if [ "$(id -u)" = 0 ]; then
  scripts/slurm-cluster.sh install
  # ch-run, for the trial that runs inside a charliecloud image (tests/test_charliecloud.py)
  if ! command -v ch-run >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q charliecloud-runtime || { apt-get update -q && apt-get install -y -q charliecloud-runtime; }
  fi
  # mpirun (Open MPI), for `launcher: mpirun` trials on the cluster and in a pilot's node
  # subset (tests/slurm/test_mpirun.py)
  if ! command -v mpirun >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q openmpi-bin || { apt-get update -q && apt-get install -y -q openmpi-bin; }
  fi
  # tmux and chromium: the live view in a real terminal (tests/tui/) and the report's
  # screenshot (tests/test_report.py)
  if ! command -v tmux >/dev/null || ! command -v chromium >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q tmux chromium || { apt-get update -q && apt-get install -y -q tmux chromium; }
  fi
fi
exec .venv/bin/python -m pytest -q -rs "$@"

#!/usr/bin/env bash
# Quick start, part 2: install hpsearch with its test dependencies into ./.venv and run the
# whole test suite. Extra arguments go to pytest (e.g. scripts/test.sh -k resume).
#
#   scripts/test.sh            # the whole suite, as CI and the README run it (as root it
#                              # installs the Slurm cluster, ch-run, mpirun, tmux, chromium);
#                              # three runs side by side: the tests without a cluster
#                              # on 2 workers, the slurm_clock tests on a cluster of
#                              # their own, the other cluster tests on the usual one
#   scripts/test.sh --quick    # the inner loop: ruff, mypy, lint-imports, then the tests that
#                              # need no Slurm cluster, no apt-installed program (chromium,
#                              # ch-run, tmux, mpirun) and are not marked slow, on 2 workers;
#                              # no root, no apt. Fails if any of the four fails.
# The tiers and their markers: docs/testing.md#tiers.
set -euo pipefail
cd "$(dirname "$0")/.."
quick=
if [ "${1:-}" = --quick ]; then
  quick=1
  shift
fi
scripts/setup.sh test,gp,pipeline,report,bench,dashboard,lightning,gpu
# MF-Hartmann learning curves for benchmarks/early_stopping.py: mf-prior-bench 1.10 pins
# numpy < 2 for parts hpsearch does not use, so it goes in without its dependencies (the
# benchmark loads only its numpy-only MF-Hartmann module).
.venv/bin/python -m pip install -q --no-deps mf-prior-bench==1.10.0
if [ -n "$quick" ]; then
  failed=()
  step() {  # step NAME COMMAND...: runs it, times it, remembers a failure and goes on
    local name=$1 began=$SECONDS
    shift
    echo "== $name"
    if "$@"; then
      echo "== $name: ok ($((SECONDS - began)) s)"
    else
      echo "== $name: FAILED ($((SECONDS - began)) s)"
      failed+=("$name")
    fi
  }
  step "ruff" .venv/bin/ruff check hpsearch
  step "mypy" .venv/bin/mypy
  step "lint-imports" .venv/bin/lint-imports
  # -n 2 --dist loadfile: two workers, each taking whole files (module fixtures run once).
  step "pytest (quick tier)" .venv/bin/python -m pytest -q -rs -n 2 --dist loadfile \
    -m "not cluster and not external and not slow" "$@"
  if [ ${#failed[@]} -gt 0 ]; then
    echo "scripts/test.sh --quick: FAILED: ${failed[*]}" >&2
    exit 1
  fi
  echo "scripts/test.sh --quick: all passed (the whole suite: scripts/test.sh)"
  exit 0
fi
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
# Three runs side by side, all always: the tests that need no cluster on two workers (xdist,
# whole files per worker, as the quick tier); the cluster's `slurm_clock` tests one at a time
# on a cluster of their own (HPSEARCH_SLURM_DIR/PORT_BASE below: its own munge, MariaDB,
# slurmdbd, slurmctld and 8 slurmds), because they stop Slurm's daemons, kill a node's slurmd
# or set account limits, which other tests would feel; and the other cluster tests one at a
# time on the usual cluster. The cluster tests wait mostly on Slurm (scheduling, sacct, time
# limits), so the three share the CPUs well. The cluster runs' output follows when all three end.
# Fails if any fails. docs/testing.md#tiers has the times.
CLOCK_CLUSTER=(HPSEARCH_SLURM_DIR=/tmp/hpsearch-slurm-clock HPSEARCH_SLURM_PORT_BASE=17000)
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
background() {  # background NAME [VAR=VALUE...] -- PYTEST-ARGS...: pytest in the background
  local name=$1
  shift
  local vars=()
  while [ "$1" != -- ]; do vars+=("$1"); shift; done
  shift
  ( rc=0
    env "${vars[@]}" .venv/bin/python -m pytest -q -rs -p no:cacheprovider --durations=15 \
      "$@" >"$logs/$name.log" 2>&1 || rc=$?
    echo "$rc" >"$logs/$name.rc" ) &
}
echo "== pytest, three runs side by side: the tests that need no Slurm cluster (2 workers), the"
echo "   slurm_clock tests on their own cluster, and the other cluster tests (one at a time each)"
began=$SECONDS
background clock "${CLOCK_CLUSTER[@]}" -- -m "cluster and slurm_clock" "$@"
background cluster -- -m "cluster and not slurm_clock" "$@"
echo "== pytest: the tests that need no Slurm cluster (2 workers; the cluster runs' output"
echo "   follows when all three end)"
status=0
rc=0
.venv/bin/python -m pytest -q -rs --durations=15 -n 2 --dist loadfile -m "not cluster" "$@" || rc=$?
if [ "$rc" != 0 ] && [ "$rc" != 5 ]; then status=1; echo "== local: FAILED (exit $rc)"; fi
wait
for name in clock cluster; do
  case $name in
    clock) echo "== pytest: the slurm_clock tests, on their own cluster (${CLOCK_CLUSTER[*]})";;
    cluster) echo "== pytest: the other Slurm cluster tests";;
  esac
  cat "$logs/$name.log"
  rc=$(cat "$logs/$name.rc")
  # exit 5: no test selected (e.g. with -k), no failure
  if [ "$rc" != 0 ] && [ "$rc" != 5 ]; then status=1; echo "== $name: FAILED (exit $rc)"; fi
done
echo "== all three runs: $((SECONDS - began)) s"
exit $status

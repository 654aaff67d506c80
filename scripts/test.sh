#!/usr/bin/env bash
# Quick start, part 2: install hpsearch with its test dependencies into ./.venv and run the
# whole test suite. Extra arguments go to pytest (e.g. scripts/test.sh -k resume).
#
#   scripts/test.sh            # the whole suite, as CI and the README run it (as root it
#                              # installs the Slurm cluster, ch-run, mpirun, tmux, chromium);
#                              # the tests without a cluster on 2 workers beside the
#                              # slurm_clock tests on a cluster of their own, then the
#                              # other cluster tests on the usual one
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
# Byte-code caches on (this machine's environment sets PYTHONDONTWRITEBYTECODE=1): else every
# `hpsearch` a test runs (thousands) compiles the package from source again (0.31 s against
# 0.23 s for `hpsearch status`), and every pytest worker rewrites the test modules' asserts
# again (13 s of collection a worker). __pycache__/ is in .gitignore. The quick tier went
# from 5 min 32-57 s to 4 min 36 s (docs/testing.md#tiers).
unset PYTHONDONTWRITEBYTECODE
scripts/setup.sh test,gp,pipeline,report,bench,dashboard,lightning,gpu,tensorboard,mlflow
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
  step "pytest (quick tier)" .venv/bin/python -m pytest -q -rfEs -n 2 --dist loadfile \
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
# Four runs, all always. First, side by side: the tests that need no cluster on two workers
# (xdist, whole files per worker, as the quick tier), and the cluster's `slurm_clock` tests one
# at a time on a cluster of their own (HPSEARCH_SLURM_DIR/PORT_BASE below: its own munge,
# MariaDB, slurmdbd, slurmctld and 8 slurmds): they wait mostly on Slurm's own clocks
# (whole-minute time limits, SlurmdTimeout, daemons stopped for a while), so they leave the
# CPUs to the others, and they stop Slurm's daemons, kill a node's slurmd or set account
# limits, which no other test feels there; and the light cluster tests (below) on a third.
# Then the other cluster tests one at a time, alone: beside the CPU-bound tests without a
# cluster, their 1-minute pilots and DDP ranks outlast pytest-timeout (tried:
# docs/testing.md#tiers). Fails if any fails.
CLOCK_CLUSTER=(HPSEARCH_SLURM_DIR=/tmp/hpsearch-slurm-clock HPSEARCH_SLURM_PORT_BASE=17000)
# The light cluster tests (slurm_beside: shell-sleep trials, no PyTorch, no other user;
# tests/slurm/conftest.py BESIDE) also run beside them, one at a time on a third cluster:
# they wait on Slurm and on their trials' sleeps (docs/testing.md#tiers).
BESIDE_CLUSTER=(HPSEARCH_SLURM_DIR=/tmp/hpsearch-slurm-beside HPSEARCH_SLURM_PORT_BASE=17200)
status=0
run() {  # [nice -n N] pytest ARGS...: exit 5 (no test selected, e.g. with -k) is no failure
  local rc=0 prefix=()
  if [ "$1" = nice ]; then prefix=("$1" "$2" "$3"); shift 3; fi
  "${prefix[@]}" .venv/bin/python -m pytest -q -rfEs --durations=15 "$@" || rc=$?
  if [ "$rc" != 0 ] && [ "$rc" != 5 ]; then status=1; fi
}
clock_log=$(mktemp)
beside_log=$(mktemp)
trap 'rm -f "$clock_log" "$clock_log.rc" "$beside_log" "$beside_log.rc"' EXIT
beside() {  # LOG MARKERS CLUSTER_ENV...: one pytest run in the background, its rc in LOG.rc
  local log=$1 markers=$2 rc=0
  shift 2
  env "$@" .venv/bin/python -m pytest -q -rfEs -p no:cacheprovider --durations=15 \
    -m "$markers" "${args[@]}" >"$log" 2>&1 || rc=$?
  echo "$rc" >"$log.rc"
}
args=("$@")
echo "== pytest: the tests that need no Slurm cluster (2 workers), and beside them the"
echo "   slurm_clock tests and the light cluster tests, each on a cluster of its own (one at a"
echo "   time; their output follows when all end)"
beside "$clock_log" "cluster and slurm_clock" "${CLOCK_CLUSTER[@]}" &
clock=$!
beside "$beside_log" "cluster and slurm_beside and not slurm_clock" "${BESIDE_CLUSTER[@]}" &
light=$!
# At nice 10: the slurm_clock tests beside them wait on Slurm's clocks and need the CPUs only
# in bursts (two DDP ranks starting inside a job's 1-minute limit), which they then get first;
# the tests without a cluster take every cycle those leave. CI's run of e8a7464, at equal
# priority: test_ddp_trial_outlasting_its_time_limit alone took 677 s of the clock run's
# 1653 s (its ranks' start took most of each job's minute), while the rest took 1429 s.
run nice -n 10 -n 2 --dist loadfile -m "not cluster" "$@"
wait "$clock" "$light"
for pair in "slurm_clock:$clock_log:${CLOCK_CLUSTER[*]}" "light (slurm_beside):$beside_log:${BESIDE_CLUSTER[*]}"; do
  IFS=: read -r what log where <<<"$pair"
  echo "== pytest: the $what tests, on their own cluster ($where; they ran beside the above)"
  cat "$log"
  rc=$(cat "$log.rc")
  if [ "$rc" != 0 ] && [ "$rc" != 5 ]; then status=1; fi
done
echo "== pytest: the rest of the Slurm cluster's tests (one at a time)"
run -m "cluster and not slurm_clock and not slurm_beside" "$@"
exit $status

#!/usr/bin/env bash
# Install everything the suite needs (system packages included) and run the whole test suite.
# Usage: bash scripts/test.sh [--fast] [pytest args...]
#   The full run has two tiers, each given the pytest args: the tests that share the cores, on one
#   pytest worker per core (`-n auto -m "not serial"`), then the ones that need the whole machine
#   (`-m serial`: Ray, Spark, ZooKeeper, S3, Flink), one at a time. It fails if either fails. Each
#   tier ends with its slowest tests (`--durations`), where the suite's time goes.
#   --fast: the inner loop, once a full run has installed everything: ruff and the tests not marked
#           `slow` (none starts Ray, Spark, ZooKeeper, S3, Flink or a browser, nor a subprocess CLI
#           run), on one worker per core, without installing anything
set -euo pipefail
cd "$(dirname "$0")/.."
# pytest rewrites the asserts of every test module in every pytest process (each worker, each
# tier) unless it may keep the result in __pycache__: ~7 s of CPU a process, and a fifth of the
# fast tier's time. A machine that sets PYTHONDONTWRITEBYTECODE would redo it every time.
unset PYTHONDONTWRITEBYTECODE

FAST=0
if [ "${1:-}" = "--fast" ]; then FAST=1; shift; fi
if [ "$FAST" = 1 ]; then
  export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 RAY_USAGE_STATS_ENABLED=0
  echo "== ruff =="
  python3 -m ruff check .
  echo "== pytest: the fast tier (-m 'not slow') =="
  exec python3 -m pytest -q -p no:cacheprovider -n auto -m "not slow" "$@"
fi

SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi

# ZooKeeper (Debian package; the tests start and stop their own server by PID).
if [ ! -f /usr/share/java/zookeeper.jar ]; then
  echo "== installing zookeeper (apt) =="
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq zookeeper >/dev/null
fi
command -v java >/dev/null || { echo "java (17) is required for Spark and ZooKeeper" >&2; exit 1; }

# Chromium (Debian package): the benchmark's HTML report is opened in a real headless browser.
if ! command -v chromium >/dev/null; then
  echo "== installing chromium (apt) =="
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi

echo "== installing barrierflow with test extras =="
python3 -m pip install -q --disable-pip-version-check -e ".[test]"

# PyFlink (and Bytewax) in a venv of their own (benchmarks.peers): the NexMark test compares Flink SQL's
# results with barrierflow's, on a real Flink.
if ! python3 -c "import sys; from benchmarks.peers import available; sys.exit(0 if available()['flink'] else 1)"; then
  echo "== installing the peers venv (PyFlink, Bytewax) =="
  python3 -m benchmarks.peers --setup-venv >/dev/null
fi

# No RAY_AUTH_MODE here: the embedded Ray keeps token authentication on (runtime/ray/cluster.py).
export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 RAY_USAGE_STATS_ENABLED=0

echo "== ruff =="
python3 -m ruff check .

# A tier that selects no test (pytest's exit status 5, e.g. for a path with only serial tests)
# is not a failure.
tier() {
  local status=0
  python3 -m pytest -q -p no:cacheprovider "$@" || status=$?
  if [ "$status" = 5 ]; then status=0; fi
  return "$status"
}
echo "== pytest: the tests that share the cores (-n auto -m 'not serial') =="
first=0
tier -n auto -m "not serial" --durations=15 "$@" || first=$?
echo "== pytest: the tests that need the whole machine, one at a time (-m serial) =="
second=0
tier -m serial --durations=25 "$@" || second=$?
if [ "$first" != 0 ]; then exit "$first"; fi
exit "$second"

#!/usr/bin/env bash
# `make test`: unit tests, then a fresh devcluster for every other suite, always torn down.
#
#   1. python -m devcluster.cluster up (fresh cluster: `down` wipes etcd data)
#   2. every other suite: pytest tests --ignore=tests/unit, in two steps
#      a. the tests that share the cluster, on $CLUSTER_WORKERS pytest-xdist workers and one operator
#      b. the `exclusive` ones (they stop the operator, fault a node, ...), one at a time, and
#         beside them tests/unit (no cluster), niced: step b mostly waits (leases, pod starts,
#         deadlines), so the unit tests use its idle CPU instead of a step of their own
#   3. python -m devcluster.cluster down, on any exit (trap)
#
# "No tests collected" (pytest exit code 5) counts as a failure: a suite that silently
# disappears must not look green. On failure the tail of every component log is printed.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PY=${PY:-$ROOT/.venv/bin/python}
# Always the devcluster this script starts: never a KUBECONFIG inherited from the caller's
# shell (tests create and delete namespaces).
export KUBECONFIG=$ROOT/.devcluster/kubeconfig
LOGS=$ROOT/.devcluster/logs
PYTEST_ARGS=${PYTEST_ARGS:-}
# Most cluster tests wait (pod starts, deadlines, graces) rather than compute: three workers
# overlap the waits on this 2-core machine without starving the node's kubelet. worksteal: an
# idle worker takes queued tests from a busy one, so a long test near the end leaves no worker idle.
CLUSTER_WORKERS=${CLUSTER_WORKERS:-3}

status=0
failed_steps=()

# run_pytest NAME ARGS...: run pytest, treat exit 5 (nothing collected) as failure
run_pytest() {
  local name=$1; shift
  local rc=0
  echo "=== $name: pytest $*"
  # The output is also kept, so that its failure summary can be printed again last: the
  # component logs printed on failure would otherwise push it out of a CI log's tail.
  mkdir -p "$LOGS"
  # shellcheck disable=SC2086
  "$PY" -m pytest "$@" $PYTEST_ARGS 2>&1 | tee "$LOGS/pytest-$name.txt" || rc=${PIPESTATUS[0]}
  if [ "$rc" -eq 5 ]; then
    echo "!!! $name: no tests were collected (pytest exit 5): treated as a failure"
  fi
  if [ "$rc" -ne 0 ]; then
    status=1
    failed_steps+=("$name (exit $rc)")
  fi
}

show_logs() {
  [ -d "$LOGS" ] || return 0
  for log in "$LOGS"/*.log; do
    [ -e "$log" ] || continue
    echo "----- tail -n 40 $log"
    tail -n 40 "$log" || true
  done
}

cluster_started=0
unit_pid=
finish() {
  local rc=$?
  if [ -n "$unit_pid" ]; then kill "$unit_pid" 2>/dev/null || true; fi
  if [ "$rc" -ne 0 ] && [ "$status" -eq 0 ]; then
    status=$rc
    failed_steps+=("script (exit $rc)")
  fi
  if [ "$status" -ne 0 ]; then
    echo "=== component logs (failure)"
    show_logs
  fi
  if [ "$cluster_started" -eq 1 ]; then
    echo "=== devcluster down"
    "$PY" -m devcluster.cluster down || status=1
  fi
  if [ "$status" -ne 0 ]; then
    for out in "$LOGS"/pytest-*.txt; do
      [ -e "$out" ] || continue
      echo "=== failures in $(basename "$out" .txt)"
      grep -E '^(FAILED|ERROR) |^=+ .*(passed|failed|error).* =+$' "$out" | tail -n 40 || true
      # the failures' own messages (pytest's `E` lines): the summary above is cut to a line's width
      grep -E '^E ' "$out" | cut -c1-3000 | tail -n 30 || true
    done
    echo "=== FAILED: ${failed_steps[*]}"
  else
    echo "=== all tests passed"
  fi
  exit "$status"
}
trap finish EXIT
trap 'exit 130' INT TERM

echo "=== devcluster up"
cluster_started=1
start=$(date +%s)
if ! "$PY" -m devcluster.cluster up; then
  status=1
  failed_steps+=("devcluster up")
  exit 1
fi
echo "=== devcluster up took $(( $(date +%s) - start ))s"

run_pytest cluster -q --durations=40 -n "$CLUSTER_WORKERS" --dist worksteal -m "not exclusive" \
  tests --ignore=tests/unit

# tests/unit in the background (its output kept, printed when it is done), step b in front; no
# KUBECONFIG: a unit test must never reach the cluster that is up now
mkdir -p "$LOGS"
unit_out=$LOGS/pytest-unit.txt
# shellcheck disable=SC2086
env -u KUBECONFIG nice -n 10 "$PY" -m pytest -q -p no:cacheprovider tests/unit $PYTEST_ARGS > "$unit_out" 2>&1 &
unit_pid=$!
run_pytest cluster-exclusive -q --durations=20 -m exclusive tests --ignore=tests/unit
unit_rc=0
wait "$unit_pid" || unit_rc=$?
unit_pid=
echo "=== unit: pytest tests/unit (beside cluster-exclusive)"
cat "$unit_out"
if [ "$unit_rc" -eq 5 ]; then
  echo "!!! unit: no tests were collected (pytest exit 5): treated as a failure"
fi
if [ "$unit_rc" -ne 0 ]; then
  status=1
  failed_steps+=("unit (exit $unit_rc)")
fi

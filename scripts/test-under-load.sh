#!/usr/bin/env bash
# Runs the test suite several times with a CPU load beside it, to find the tests whose outcome
# depends on timing before CI does: a machine where a thread waits hundreds of milliseconds for
# a core is what CI sometimes is.
#
#   scripts/test-under-load.sh [RUNS]      RUNS (default 5) runs, each beside LOAD busy loops
#                                          (default 2: one per core here) at the host's priority
#   LOAD=bench scripts/test-under-load.sh  the delivery benchmark in a loop as the load instead
#   TESTS="-p kubewasm --test all sandbox::" ... only these tests (cargo test arguments)
#
# The tests are built first, without the load. Each run's output is kept in
# target/under-load/run-N.log; the end prints, per run, the tests that failed. Exits non-zero
# when any run failed.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
load=${LOAD:-2}
read -r -a tests <<<"${TESTS:---workspace}"

bash scripts/setup.sh
KUBEWASM_SERVERS=$(bash scripts/k8s-servers.sh)
KUBEWASM_TEST_TOOLS=$(bash scripts/test-tools.sh)
export KUBEWASM_SERVERS KUBEWASM_TEST_TOOLS
cargo test --locked "${tests[@]}" --no-run
if [[ $load == bench ]]; then
  cargo bench --locked -p kubewasm --bench queries --no-run
fi

out=target/under-load
mkdir -p "$out"
loaders=()
stop_load() {
  if ((${#loaders[@]})); then kill "${loaders[@]}" 2>/dev/null || true; fi
  loaders=()
}
trap stop_load EXIT

start_load() {
  if [[ $load == bench ]]; then
    (while :; do cargo bench --locked -p kubewasm --bench queries >/dev/null 2>&1 || true; done) &
    loaders+=($!)
  else
    local i
    for ((i = 0; i < load; i++)); do
      (while :; do :; done) &
      loaders+=($!)
    done
  fi
}

failed_runs=0
summary=()
for ((run = 1; run <= runs; run++)); do
  log=$out/run-$run.log
  echo "under-load: run $run of $runs (load: $load), log in $log" >&2
  start_load
  start=$SECONDS
  status=0
  cargo test --locked "${tests[@]}" --no-fail-fast >"$log" 2>&1 || status=$?
  stop_load
  # A failing test prints "test NAME ... FAILED" under the "Running" line of its binary.
  failures=$(awk '/^ *Running /{bin=$2} / \.\.\. FAILED$/{print "    " bin ": " $2}' "$log")
  if ((status != 0)); then
    failed_runs=$((failed_runs + 1))
    summary+=("run $run: failed after $((SECONDS - start)) s")
    [[ -n $failures ]] && summary+=("$failures") || summary+=("    (no test named: see $log)")
  else
    summary+=("run $run: passed in $((SECONDS - start)) s")
  fi
done

echo
printf '%s\n' "${summary[@]}"
echo "$((runs - failed_runs)) of $runs runs passed with the load beside them"
((failed_runs == 0))

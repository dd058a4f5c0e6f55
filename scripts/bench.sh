#!/usr/bin/env bash
# Runs every benchmark and regenerates docs/BENCHMARKS.md from this run's results.
#
#   scripts/bench.sh                          # full sizes (about 10 minutes here)
#   KUBEWASM_BENCH_QUICK=1 scripts/bench.sh   # small sizes (a few minutes)
#
# Needs what scripts/setup.sh installs (it is run first) and Go for the client-go peer.
set -euo pipefail
cd "$(dirname "$0")/.."

# weval too: the JavaScript plugins are measured compiled ahead of time. A build of them from
# before weval was installed is made again with it.
[[ -x target/weval/bin/weval ]] || new_weval=yes
scripts/setup.sh --weval
if [[ ${new_weval:-} == yes ]]; then touch plugins/javascript/build.mjs; fi
results=target/bench-results
mkdir -p "$results"
rm -f "$results"/*.txt "$results"/peers.json

# Release builds of the benchmarks; their plugins are built by plugins/artifacts.
for bench in decode delivery queries contract reload folder; do
  echo "bench.sh: $bench" >&2
  cargo bench --locked -p kubewasm --bench "$bench" | tee "$results/$bench.txt"
done
echo "bench.sh: peers (kube-rs and client-go side by side)" >&2
cargo bench --locked -p kubewasm --bench peers 2> >(grep -v '^[IW][0-9]\{4\} ' >&2)

python3 scripts/bench_report.py > docs/BENCHMARKS.md.partial
mv docs/BENCHMARKS.md.partial docs/BENCHMARKS.md
echo "bench.sh: wrote docs/BENCHMARKS.md" >&2

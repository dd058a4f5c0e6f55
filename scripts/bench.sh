#!/usr/bin/env bash
# Runs the benchmarks and regenerates docs/BENCHMARKS.md from their results.
#
#   scripts/bench.sh                          # every benchmark, full sizes (about 50 minutes here)
#   scripts/bench.sh folder contract          # these again; the others' last results are kept
#   scripts/bench.sh controllers              # on a machine with no earlier results: sections
#                                             # 9 to 12 (sharding, cluster, controllers, trial)
#                                             # alone are rewritten in the page, the rest kept
#   KUBEWASM_BENCH_QUICK=1 scripts/bench.sh   # small sizes (a few minutes)
#
# Each result is kept with the commit it ran on (target/bench-results/NAME.commit), and the
# page names that commit per benchmark: a partial rerun never passes old numbers off as new.
# Needs what scripts/setup.sh installs (it is run first) and Go for the client-go peer and kwok.
set -euo pipefail
cd "$(dirname "$0")/.."

# weval too when the JavaScript plugins are measured (delivery, in a whole run): compiled ahead
# of time. A build of them from before weval was installed is made again with it.
if (($# == 0)) || [[ " $* " == *" delivery "* ]]; then
  [[ -x target/weval/bin/weval ]] || new_weval=yes
  scripts/setup.sh --weval
  if [[ ${new_weval:-} == yes ]]; then touch plugins/javascript/build.mjs; fi
else
  scripts/setup.sh
fi
# The real etcd and kube-apiserver the admission round trip is measured through.
KUBEWASM_SERVERS=$(bash scripts/k8s-servers.sh)
export KUBEWASM_SERVERS
results=target/bench-results
all=(decode delivery queries contract reload folder admission hostile peers sharding cluster controllers trial)
if (($#)); then
  # Without every other benchmark's earlier result, scripts/bench_report.py rewrites only the
  # sections of one benchmark each (these) in the page as it stands.
  standalone=" sharding cluster controllers trial "
  benches=("$@")
  for bench in "${all[@]}"; do
    [[ " ${benches[*]} " == *" $bench "* || -e $results/$bench.commit ]] && continue
    for asked in "${benches[@]}"; do
      if [[ $standalone != *" $asked "* ]]; then
        echo "bench.sh: no earlier result of $bench, and $asked shares sections with it: run scripts/bench.sh whole once" >&2
        exit 2
      fi
    done
  done
else
  benches=("${all[@]}")
  rm -rf "$results"
fi
mkdir -p "$results"

# Release builds of the benchmarks; their plugins are built by plugins/artifacts.
for bench in "${benches[@]}"; do
  case $bench in
    peers)
      echo "bench.sh: peers (kube-rs and client-go side by side)" >&2
      cargo bench --locked -p kubewasm --bench peers 2> >(grep -v '^[IW][0-9]\{4\} ' >&2)
      ;;
    cluster)
      # kwok, which simulates the cluster's nodes and pods, built from the Go module proxy.
      KUBEWASM_KWOK=$(bash scripts/test-tools.sh kwok)
      export KUBEWASM_KWOK
      echo "bench.sh: cluster" >&2
      cargo bench --locked -p kubewasm --bench cluster | tee "$results/cluster.txt"
      ;;
    decode | delivery | queries | contract | reload | folder | admission | hostile | sharding | controllers | trial)
      echo "bench.sh: $bench" >&2
      cargo bench --locked -p kubewasm --bench "$bench" | tee "$results/$bench.txt"
      ;;
    *)
      echo "bench.sh: no benchmark $bench (there are: ${all[*]})" >&2
      exit 2
      ;;
  esac
  git describe --always --dirty --exclude '*' >"$results/$bench.commit"
done

python3 scripts/bench_report.py > docs/BENCHMARKS.md.partial
mv docs/BENCHMARKS.md.partial docs/BENCHMARKS.md
echo "bench.sh: wrote docs/BENCHMARKS.md" >&2

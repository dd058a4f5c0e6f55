#!/usr/bin/env bash
# The main job: the host with the example plugins against a copy of examples/cluster.
#
# It builds the plugins, copies the example cluster to target/demo/cluster (so your edits never
# touch the repository), starts the host, and after a few seconds plays a short tour: the stuck
# web pod becomes ready (an update), the batch pod's file is removed (a delete), and a third
# plugin (audit-log) is dropped into the running host's plugins folder (hot load). The host
# keeps running afterwards: edit, add or delete files in target/demo/cluster and watch the
# plugins react. Ctrl-C stops it. DEMO_SECONDS=N stops it by itself after N seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
# Only Rust is needed here: the tool chain rust-toolchain.toml pins, with the guest target it
# lists. scripts/setup.sh installs the Python and JavaScript tool chains the tests need too.
rustup -q toolchain install >/dev/null

# cargo's own progress shows: the first build of the host takes minutes.
echo "demo: building the example plugins (wasm32-wasip2)..." >&2
cargo build --profile plugin --target wasm32-wasip2 --target-dir target/plugins \
  -p pod-phase -p deployment-view -p audit-log
echo "demo: building the host (a debug build: up to 8 minutes the first time, seconds after)..." >&2
cargo build -p kubewasm

demo=target/demo
rm -rf "$demo"
mkdir -p "$demo/plugins" "$demo/cluster"
cp target/plugins/wasm32-wasip2/plugin/pod_phase.wasm "$demo/plugins/pod-phase.wasm"
cp target/plugins/wasm32-wasip2/plugin/deployment_view.wasm "$demo/plugins/deployment-view.wasm"
cp examples/cluster/*.yaml "$demo/cluster/"

./target/debug/kubewasm run --plugins "$demo/plugins" --cluster "$demo/cluster" --config examples/kubewasm.yaml &
host=$!
trap 'kill "$host" 2>/dev/null || true; wait "$host" 2>/dev/null || true' EXIT INT TERM

sleep 4
echo "demo: the stuck pod shop/web-5d8f7c9b6-hv4rd becomes ready (edit of shop-web-stuck-pod.yaml)" >&2
sed -i "s/phase: Pending/phase: Running/; s/status: 'False'/status: 'True'/" "$demo/cluster/shop-web-stuck-pod.yaml"
sleep 2
echo "demo: the batch pod's manifest is deleted (rm batch-report.yaml)" >&2
rm "$demo/cluster/batch-report.yaml"
sleep 2
echo "demo: dropping audit-log.wasm into the plugins folder while the host runs (hot load)" >&2
cp target/plugins/wasm32-wasip2/plugin/audit_log.wasm "$demo/plugins/.audit-log.tmp"
mv "$demo/plugins/.audit-log.tmp" "$demo/plugins/audit-log.wasm"
sleep 3
echo "demo: now edit files in $demo/cluster and watch the plugins; Ctrl-C to stop" >&2

if [[ -n "${DEMO_SECONDS:-}" ]]; then
  sleep "$DEMO_SECONDS"
else
  wait "$host"
fi

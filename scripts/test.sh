#!/usr/bin/env bash
# The whole test suite: formatting, lints (host and guests), unit, integration, end-to-end (a
# real etcd and kube-apiserver on loopback) and doc tests.
# Guest plugins are built for wasm32-wasip2 by plugins/artifacts' build script during the test
# build; nothing is downloaded but crates.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The real etcd and kube-apiserver for the end-to-end tests, built once per version and cached.
KUBEWASM_SERVERS=$(bash scripts/k8s-servers.sh)
export KUBEWASM_SERVERS
# A real OCI registry, cosign and helm for the registry and chart tests, built once per
# version and cached.
KUBEWASM_TEST_TOOLS=$(bash scripts/test-tools.sh)
export KUBEWASM_TEST_TOOLS

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
# The SDK's optional k8s-openapi types compile and their doc example builds.
cargo test --locked -p kubewasm-sdk --features k8s --doc

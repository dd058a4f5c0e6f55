#!/usr/bin/env bash
# The whole test suite: formatting, lints (host and guests), unit, integration, end-to-end (a
# real etcd and kube-apiserver on loopback) and doc tests.
# Guest plugins are built for wasm32-wasip2 by plugins/artifacts' build script during the test
# build; nothing is downloaded but crates and Go modules. Each stage's time is printed at the
# end, whether the suite passed or not.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/stages.sh

stage "tool chains (rustup, Python, npm, weval)" bash scripts/setup.sh
# The real etcd and kube-apiserver for the end-to-end tests, built once per version and cached.
stage_start
KUBEWASM_SERVERS=$(bash scripts/k8s-servers.sh)
stage_end "Go: etcd and kube-apiserver"
export KUBEWASM_SERVERS
# A real OCI registry, cosign and helm for the registry and chart tests, built once per
# version and cached.
stage_start
KUBEWASM_TEST_TOOLS=$(bash scripts/test-tools.sh)
stage_end "Go: registry, cosign, helm, otelcol"
export KUBEWASM_TEST_TOOLS

stage "cargo fmt" cargo fmt --all -- --check
stage "cargo clippy" cargo clippy --workspace --all-targets --locked -- -D warnings
# The Go SDK and plugins: formatted, and vetted for wasip1 (unsafe pointer conversions are the
# canonical ABI's business in the SDK, so that one check is off).
stage "gofmt and go vet" bash -c 'test -z "$(gofmt -l plugin-sdk/go plugins/go host/templates/go)" \
  && (cd plugin-sdk/go && GOOS=wasip1 GOARCH=wasm go vet -unsafeptr=false ./...) \
  && (cd plugins/go && GOOS=wasip1 GOARCH=wasm go vet ./...)' 
stage "build the tests" cargo test --workspace --locked --no-run
stage "run the tests" cargo test --workspace --locked
# The SDK's optional k8s-openapi types compile and their doc example builds.
stage "SDK doc test (k8s feature)" cargo test --locked -p kubewasm-sdk --features k8s --doc

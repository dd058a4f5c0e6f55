#!/usr/bin/env bash
# Installs what building kubewasm needs beyond a Rust toolchain: the wasm32-wasip2 target for
# guest plugins, and rustfmt and clippy for the checks. Idempotent.
set -euo pipefail
if ! command -v rustup >/dev/null 2>&1; then
  echo "setup: rustup is required (https://rustup.rs); it installs the wasm32-wasip2 target" >&2
  exit 1
fi
rustup target add wasm32-wasip2 >/dev/null
rustup component add rustfmt clippy >/dev/null

#!/usr/bin/env bash
# Installs what building kubewasm needs beyond Rust, Python 3 and Node.js: the wasm32-wasip2 target for
# guest plugins, rustfmt and clippy, and the Python and JavaScript component tool chains. Idempotent.
#
#   scripts/setup.sh             what the tests need
#   scripts/setup.sh --weval     also weval, which compiles the JavaScript plugins ahead of time
#                                (about a fifth off each call): what the benchmarks measure
set -euo pipefail
if ! command -v rustup >/dev/null 2>&1; then
  echo "setup: rustup is required (https://rustup.rs); it installs the wasm32-wasip2 target" >&2
  exit 1
fi
# The tool chain rust-toolchain.toml pins (wasmtime 49 needs Rust 1.96) with the target and
# components it lists, any missing ones added; older rustups do not install it on first use.
rustup -q toolchain install >/dev/null

# Guest tool chains for the Python and JavaScript plugins, inside the checkout:
# componentize-py (PyPI) in target/pyenv, componentize-js and jco (npm) in plugins/javascript.
# pytest runs the Python project `kubewasm new` creates.
if [[ ! -x target/pyenv/bin/componentize-py || ! -x target/pyenv/bin/pytest ]]; then
  python3 -m venv target/pyenv
  target/pyenv/bin/pip install --quiet --disable-pip-version-check componentize-py==0.25.1 pytest==8.4.2
fi
if [[ ! -d plugins/javascript/node_modules/@bytecodealliance/componentize-js ]]; then
  # `npm ci` rejects this lockfile (npm 11 leaves out other platforms' optional packages);
  # `install --no-save` follows the lockfile and writes nothing back.
  (cd plugins/javascript && npm install --no-save --no-audit --no-fund --loglevel=error)
fi
# weval, which compiles the JavaScript plugins' code ahead of time (about a fifth off each
# call), for the benchmarks only: the tests build the same plugins without it. componentize-js's
# npm package would download it from GitHub; crates.io has the same version, built here once
# (about 7 minutes on 2 cores) into target/weval.
if [[ ${1:-} == --weval && ! -x target/weval/bin/weval ]]; then
  cargo install --quiet --locked --version 0.5.0 --root target/weval weval
fi

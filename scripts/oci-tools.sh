#!/usr/bin/env bash
# Builds a pinned CNCF distribution registry and cosign from the Go module proxy with the
# machine's Go, into a cache outside the repository keyed by version, and reuses them when
# present. Prints the folder holding both binaries (what KUBEWASM_OCI_TOOLS must point at for
# the registry tests).
#
# Sources: tests/oci-tools/{registry,cosign} (wrapper mains and pinned go.mod/go.sum).
set -euo pipefail
cd "$(dirname "$0")/.."

pinned() { awk -v m="$1" '$1 == m || ($1 == "require" && $2 == m) { print $NF; exit }' "$2"; }
registry_version=$(pinned github.com/distribution/distribution/v3 tests/oci-tools/registry/go.mod)
cosign_version=$(pinned github.com/sigstore/cosign/v2 tests/oci-tools/cosign/go.mod)
if [[ -z "$registry_version" || -z "$cosign_version" ]]; then
  echo "oci-tools: cannot read the pinned versions from tests/oci-tools/*/go.mod" >&2
  exit 1
fi
cache=${KUBEWASM_OCI_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubewasm/oci-tools}
# The wrapper mains are part of the key: a changed wrapper is a different binary.
wrappers=$(cat tests/oci-tools/*/main.go | sha256sum | cut -c1-8)
dir="$cache/registry-$registry_version-cosign-$cosign_version-$wrappers"

if [[ -x "$dir/registry" && -x "$dir/cosign" ]]; then
  echo "$dir"
  exit 0
fi
if ! command -v go >/dev/null 2>&1; then
  echo "oci-tools: Go is required to build the registry and cosign (https://go.dev/dl)" >&2
  exit 1
fi
mkdir -p "$dir"
for tool in registry cosign; do
  if [[ ! -x "$dir/$tool" ]]; then
    echo "oci-tools: building $tool; the first build takes minutes" >&2
    start=$SECONDS
    (cd "tests/oci-tools/$tool" && go build -trimpath -o "$dir/$tool.partial" .)
    mv "$dir/$tool.partial" "$dir/$tool"
    echo "oci-tools: built $tool in $((SECONDS - start)) s" >&2
  fi
done
echo "$dir"

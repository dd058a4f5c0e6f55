#!/usr/bin/env bash
# Builds the pinned tools the tests run beside the real API server: the CNCF distribution
# registry, cosign, helm and an OpenTelemetry Collector, from the Go module proxy with the machine's Go, into a cache
# outside the repository keyed by their versions, and reuses them when present. Prints the
# folder holding the binaries (what KUBEWASM_TEST_TOOLS must point at).
#
# Sources: tests/test-tools/{registry,cosign,helm,otelcol}: a wrapper main, or a `tool` directive, with
# pinned go.mod/go.sum.
set -euo pipefail
cd "$(dirname "$0")/.."

# The version a go.mod requires module $1 at (`require X vN`, or a line of a require block).
pinned() { awk -v m="$1" '$1 == m || ($1 == "require" && $2 == m) { print ($1 == "require" ? $3 : $2); exit }' "$2"; }
registry=$(pinned github.com/distribution/distribution/v3 tests/test-tools/registry/go.mod)
cosign=$(pinned github.com/sigstore/cosign/v2 tests/test-tools/cosign/go.mod)
helm=$(pinned helm.sh/helm/v3 tests/test-tools/helm/go.mod)
otelcol=$(pinned go.opentelemetry.io/collector/otelcol tests/test-tools/otelcol/go.mod)
if [[ -z "$registry" || -z "$cosign" || -z "$helm" || -z "$otelcol" ]]; then
  echo "test-tools: cannot read the pinned versions from tests/test-tools/*/go.mod" >&2
  exit 1
fi
cache=${KUBEWASM_TEST_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubewasm/test-tools}
# The wrapper mains are part of the key: a changed wrapper is a different binary.
wrappers=$(cat tests/test-tools/*/main.go | sha256sum | cut -c1-8)
dir="$cache/registry-$registry-cosign-$cosign-helm-$helm-otelcol-$otelcol-$wrappers"
tools=(registry cosign helm otelcol)

built=yes
for tool in "${tools[@]}"; do [[ -x "$dir/$tool" ]] || built=no; done
if [[ $built == yes ]]; then
  echo "$dir"
  exit 0
fi
if ! command -v go >/dev/null 2>&1; then
  echo "test-tools: Go is required to build the registry, cosign, helm and otelcol (https://go.dev/dl)" >&2
  exit 1
fi
mkdir -p "$dir"
for tool in "${tools[@]}"; do
  if [[ ! -x "$dir/$tool" ]]; then
    echo "test-tools: building $tool; the first build takes minutes" >&2
    start=$SECONDS
    source=tests/test-tools/$tool
    # A wrapper main, or the module's `tool` directive.
    package=.
    [[ -f $source/main.go ]] || package=$(awk '$1 == "tool" { print $2; exit }' "$source/go.mod")
    (cd "$source" && go build -trimpath -o "$dir/$tool.partial" "$package")
    mv "$dir/$tool.partial" "$dir/$tool"
    echo "test-tools: built $tool in $((SECONDS - start)) s" >&2
  fi
done
echo "$dir"

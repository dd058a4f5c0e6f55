#!/usr/bin/env bash
# Builds the pinned tools the tests and benchmarks run beside the real API server, from the Go
# module proxy with the machine's Go, into a cache outside the repository keyed by their
# versions, and reuses them when present. Prints the folder holding the binaries.
#
#   scripts/test-tools.sh        # what the tests need (KUBEWASM_TEST_TOOLS): the CNCF
#                                # distribution registry, cosign, helm, an OpenTelemetry Collector
#   scripts/test-tools.sh kwok   # what the cluster benchmark needs (KUBEWASM_KWOK): kwok, and
#                                # kwok-stages.yaml, the node and pod stages kwokctl gives it
#
# Sources: tests/test-tools/TOOL: a wrapper main, or a `tool` directive, with pinned
# go.mod/go.sum.
set -euo pipefail
cd "$(dirname "$0")/.."

tools=("$@")
((${#tools[@]})) || tools=(registry cosign helm otelcol)

# The module whose version names each tool's build.
module_of() {
  case $1 in
    registry) echo github.com/distribution/distribution/v3 ;;
    cosign) echo github.com/sigstore/cosign/v2 ;;
    helm) echo helm.sh/helm/v3 ;;
    otelcol) echo go.opentelemetry.io/collector/otelcol ;;
    kwok) echo sigs.k8s.io/kwok ;;
    *) echo "test-tools: no tool $1 (there are: registry cosign helm otelcol kwok)" >&2; return 1 ;;
  esac
}
# The version a go.mod requires module $1 at (`require X vN`, or a line of a require block).
pinned() { awk -v m="$1" '$1 == m || ($1 == "require" && $2 == m) { print ($1 == "require" ? $3 : $2); exit }' "$2"; }

key=""
for tool in "${tools[@]}"; do
  module=$(module_of "$tool")
  version=$(pinned "$module" "tests/test-tools/$tool/go.mod")
  if [[ -z $version ]]; then
    echo "test-tools: cannot read the pinned version of $module from tests/test-tools/$tool/go.mod" >&2
    exit 1
  fi
  key+="${key:+-}$tool-$version"
done
cache=${KUBEWASM_TEST_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubewasm/test-tools}
# The wrapper mains are part of the key: a changed wrapper is a different binary.
wrappers=$(cat tests/test-tools/*/main.go | sha256sum | cut -c1-8)
dir="$cache/$key-$wrappers"

built=yes
for tool in "${tools[@]}"; do [[ -x "$dir/$tool" ]] || built=no; done
if [[ $built == yes ]]; then
  echo "$dir"
  exit 0
fi
if ! command -v go >/dev/null 2>&1; then
  echo "test-tools: Go is required to build ${tools[*]} (https://go.dev/dl)" >&2
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
    if [[ $tool == kwok ]]; then
      # kwok simulates nothing without stages; kwokctl passes these, from the same module.
      stages=$(cd "$source" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)/kustomize/stage
      for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
        pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
        echo "---"
        cat "$stages/$f"
      done >"$dir/kwok-stages.yaml"
    fi
    mv "$dir/$tool.partial" "$dir/$tool"
    echo "test-tools: built $tool in $((SECONDS - start)) s" >&2
  fi
done
echo "$dir"

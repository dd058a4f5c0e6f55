#!/usr/bin/env bash
# Builds pinned etcd and kube-apiserver from the Go module proxy with the machine's Go, into a
# cache outside the repository keyed by version, and reuses them when present. Prints the
# folder holding the binaries (what KUBEWASM_SERVERS must point at for the end-to-end tests):
# etcd, kube-apiserver (1.36: sharded list and watch), kube-apiserver-1.34 (without it) and
# kube-controller-manager (1.36: the garbage collector and workload controllers).
#
# Sources: tests/k8s-servers/{etcd,kube-apiserver,kube-apiserver-1.34,kube-controller-manager}
# (wrapper mains and pinned go.mod/go.sum).
set -euo pipefail
cd "$(dirname "$0")/.."

# The pinned versions, from the go.mod files (`require X vN` or a line of a require block).
pinned() { awk -v m="$1" '$1 == m || ($1 == "require" && $2 == m) { print $NF; exit }' "$2"; }
kube_version=$(pinned k8s.io/kubernetes tests/k8s-servers/kube-apiserver/go.mod)
old_kube_version=$(pinned k8s.io/kubernetes tests/k8s-servers/kube-apiserver-1.34/go.mod)
etcd_version=$(pinned go.etcd.io/etcd/server/v3 tests/k8s-servers/etcd/go.mod)
if [[ -z "$kube_version" || -z "$old_kube_version" || -z "$etcd_version" ]]; then
  echo "k8s-servers: cannot read the pinned versions from tests/k8s-servers/*/go.mod" >&2
  exit 1
fi
kcm_version=$(pinned k8s.io/kubernetes tests/k8s-servers/kube-controller-manager/go.mod)
if [[ "$kcm_version" != "$kube_version" ]]; then
  echo "k8s-servers: kube-controller-manager pins $kcm_version, kube-apiserver $kube_version: pin both alike" >&2
  exit 1
fi
cache=${KUBEWASM_SERVERS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubewasm/servers}
dir="$cache/kube-$kube_version-$old_kube_version-etcd-$etcd_version"
servers=(etcd kube-apiserver kube-apiserver-1.34 kube-controller-manager)

built() { for s in "${servers[@]}"; do [[ -x "$dir/$s" ]] || return 1; done; }
if built; then
  echo "$dir"
  exit 0
fi
if ! command -v go >/dev/null 2>&1; then
  echo "k8s-servers: Go is required to build etcd and kube-apiserver (https://go.dev/dl)" >&2
  exit 1
fi
mkdir -p "$dir"
for server in "${servers[@]}"; do
  if [[ ! -x "$dir/$server" ]]; then
    version=$(pinned k8s.io/kubernetes "tests/k8s-servers/$server/go.mod")
    echo "k8s-servers: building $server (${version:-$etcd_version}); the first build takes minutes" >&2
    start=$SECONDS
    (cd "tests/k8s-servers/$server" && go build -trimpath -o "$dir/$server.partial" .)
    mv "$dir/$server.partial" "$dir/$server"
    echo "k8s-servers: built $server in $((SECONDS - start)) s" >&2
  fi
done
echo "$dir"

#!/usr/bin/env bash
# A real etcd and kube-apiserver on loopback, from the cached test servers (scripts/k8s-servers.sh
# builds them the first time, minutes; then they are reused), with the flags the end-to-end tests
# start them with: RBAC on, client certificates, the ServiceAccount admission plugin off. Prints
# the admin kubeconfig; Ctrl-C stops both and keeps the folder (its logs) unless it was made here.
#
#   scripts/cluster.sh [FOLDER]       FOLDER: where certificates, data and logs go (default: a
#                                     new temporary folder); PORT=6443 picks the API server port
#
#   export KUBECONFIG=FOLDER/admin.kubeconfig
#   kubectl get ns
#   kubewasm run --plugins plugins/     # the agent against it, as against any cluster
set -euo pipefail
cd "$(dirname "$0")/.."
servers=$(bash scripts/k8s-servers.sh)
made=
if [[ $# -ge 1 ]]; then dir=$1; mkdir -p "$dir"; else dir=$(mktemp -d); made=1; fi
dir=$(cd "$dir" && pwd)
port=${PORT:-6443}
# etcd listens 10000 above the API server (two ports), or 10000 below where that passes 65535.
etcd_port=$((port + 10000))
if ((etcd_port + 1 > 65535)); then etcd_port=$((port - 10000)); fi

# Certificates: a CA, the server's (127.0.0.1 and localhost), the admin's (system:masters), and
# the service-account signing key.
cd "$dir"
openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj /CN=kubewasm-ca \
  -keyout ca.key -out ca.crt 2>/dev/null
sign() { # name subject extensions (X.509 v3: rustls refuses v1 certificates)
  openssl req -newkey rsa:2048 -nodes -subj "$2" -keyout "$1.key" -out "$1.csr" 2>/dev/null
  printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n%s\n' "$3" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
    -extfile "$1.ext" -out "$1.crt" 2>/dev/null
}
sign server /CN=kube-apiserver \
  $'extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost'
sign admin "/O=system:masters/CN=admin" extendedKeyUsage=clientAuth
openssl genrsa -out sa.key 2048 2>/dev/null
openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null

# etcd first, on its own until it answers: a port another process holds (loopback ports above
# 32767 are also what the kernel hands to outgoing connections) makes it exit, and then it is
# tried again on a port below that range.
start_etcd() {
  rm -rf "$dir/etcd"
  "$servers/etcd" --name=default --data-dir="$dir/etcd" \
    --listen-client-urls="http://127.0.0.1:$etcd_port" --advertise-client-urls="http://127.0.0.1:$etcd_port" \
    --listen-peer-urls="http://127.0.0.1:$((etcd_port + 1))" \
    --initial-advertise-peer-urls="http://127.0.0.1:$((etcd_port + 1))" \
    --initial-cluster="default=http://127.0.0.1:$((etcd_port + 1))" \
    --unsafe-no-fsync --log-level=warn > etcd.log 2>&1 &
  etcd=$!
  for _ in $(seq 1 300); do
    if curl -sf -m 2 "http://127.0.0.1:$etcd_port/health" 2>/dev/null | grep -q true; then return 0; fi
    if ! kill -0 "$etcd" 2>/dev/null; then return 1; fi
    sleep 0.1
  done
  echo "cluster: etcd not healthy after 30 s; see $dir/etcd.log" >&2
  exit 1
}
etcd=
apiserver=
# The API server first (it waits for etcd while it shuts down), at most 10 s, then etcd.
stop() {
  trap - EXIT INT TERM
  if [[ -n $apiserver ]]; then
    kill "$apiserver" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$apiserver" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$apiserver" 2>/dev/null || true
  fi
  if [[ -n $etcd ]]; then kill "$etcd" 2>/dev/null || true; fi
  wait 2>/dev/null || true
  if [[ -n $made ]]; then rm -rf "$dir"; fi
}
trap stop EXIT INT TERM
for attempt in 1 2 3 4 5; do
  if start_etcd; then break; fi
  if ((attempt == 5)); then
    echo "cluster: etcd exited five times; its log:" >&2
    tail -20 etcd.log >&2
    exit 1
  fi
  etcd_port=$((20000 + RANDOM % 12000))
done
"$servers/kube-apiserver" --etcd-servers="http://127.0.0.1:$etcd_port" \
  --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$port" \
  --cert-dir="$dir/certs" --tls-cert-file=server.crt --tls-private-key-file=server.key \
  --client-ca-file=ca.crt --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file=sa.pub --service-account-signing-key-file=sa.key \
  --authorization-mode=RBAC --service-cluster-ip-range=10.96.0.0/24 \
  --disable-admission-plugins=ServiceAccount --endpoint-reconciler-type=none \
  --enable-priority-and-fairness=false > kube-apiserver.log 2>&1 &
apiserver=$!

cat > admin.kubeconfig <<CONFIG
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster: {server: "https://127.0.0.1:$port", certificate-authority: "$dir/ca.crt"}
users:
- name: admin
  user: {client-certificate: "$dir/admin.crt", client-key: "$dir/admin.key"}
contexts:
- name: local
  context: {cluster: local, user: admin}
current-context: local
CONFIG

for _ in $(seq 1 600); do
  if curl -sf -m 5 --cacert ca.crt --cert admin.crt --key admin.key "https://127.0.0.1:$port/readyz" >/dev/null; then
    echo "kube-apiserver: https://127.0.0.1:$port"
    echo "kubeconfig:     $dir/admin.kubeconfig"
    echo "logs:           $dir/etcd.log, $dir/kube-apiserver.log"
    echo "Ctrl-C stops both servers."
    wait "$apiserver"
    exit 0
  fi
  if ! kill -0 "$apiserver" 2>/dev/null; then
    echo "cluster: kube-apiserver exited; its log:" >&2
    tail -20 kube-apiserver.log >&2
    exit 1
  fi
  sleep 0.1
done
echo "cluster: kube-apiserver not ready after 60 s; see $dir/kube-apiserver.log" >&2
exit 1

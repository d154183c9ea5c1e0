#!/bin/sh
# Makes the decode traffic's certificates with openssl and prints the two
# Kubernetes Secrets that mount them (decode-nodes.yaml, trainer-pod.yaml):
#
#   docker/k8s/make-certs.sh [NAMESPACE] > secrets.yaml && kubectl apply -f secrets.yaml
#
# A private CA signs a node certificate naming the headless Service
# (stoker-decode.NAMESPACE.svc.cluster.local, what the trainers dial) and a
# trainer (client) certificate; each side trusts only that CA. The CA's key
# stays in the folder this writes (./stoker-decode-certs): keep it to sign
# more trainers, or delete it. Production clusters often have cert-manager
# issue the same two Secrets instead.
set -eu
ns=${1:-default}
dir=stoker-decode-certs
mkdir -p "$dir"
cd "$dir"
umask 077
svc="stoker-decode.$ns.svc.cluster.local"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 365 \
  -keyout ca.key -out ca.crt -subj "/CN=stoker decode CA" 2>/dev/null
leaf() {  # name, subjectAltName
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -keyout "$1.key" -out "$1.csr" -subj "/CN=$1" 2>/dev/null
  printf 'subjectAltName=%s\n' "$2" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 365 \
    -out "$1.crt" -extfile "$1.ext" 2>/dev/null
}
leaf node "DNS:$svc,DNS:stoker-decode.$ns.svc,DNS:stoker-decode"
leaf trainer "DNS:stoker-trainer"
b64() { base64 -w0 < "$1"; }
secret() {  # name, cert, key
  cat <<YAML
---
apiVersion: v1
kind: Secret
metadata:
  name: $1
  namespace: $ns
type: Opaque
data:
  ca.crt: $(b64 ca.crt)
  tls.crt: $(b64 "$2")
  tls.key: $(b64 "$3")
YAML
}
secret stoker-decode-node-tls node.crt node.key
secret stoker-decode-trainer-tls trainer.crt trainer.key

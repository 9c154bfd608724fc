#!/usr/bin/env bash
# Serving certificate for the ModelDeployment webhooks WITHOUT cert-manager.
#
#   manifests/webhook/gen-certs.sh [--namespace NS] [--days N] [--out DIR] [--apply]
#
# Generates a private CA and a server certificate for the Service
# modeldeployment-operator.<NS>.svc (NS defaults to gpustack-system), then (with --apply) stores the
# pair in the Secret the operator mounts (<NS>/modeldeployment-operator-tls) and patches the CA into both webhook
# configurations' clientConfig.caBundle. Needs openssl and (for --apply) kubectl. Re-run it before
# the certificate expires (default 365 days) and restart the operator Deployment.
set -euo pipefail

SERVICE=modeldeployment-operator
NAMESPACE="${NAMESPACE:-gpustack-system}"
SECRET=modeldeployment-operator-tls
WEBHOOK=modeldeployment-operator
DAYS=365
OUT=""
APPLY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --namespace|-n) NAMESPACE="$2"; shift 2 ;;
    --days) DAYS="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --apply) APPLY=1; shift ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
OUT="${OUT:-$(mktemp -d)}"
mkdir -p "$OUT"
cd "$OUT"

openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days "$DAYS" \
  -keyout ca.key -out ca.crt -subj "/CN=${SERVICE}-webhook-ca" 2>/dev/null

cat > server.ext <<EXT
basicConstraints=CA:FALSE
keyUsage=digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=DNS:${SERVICE},DNS:${SERVICE}.${NAMESPACE},DNS:${SERVICE}.${NAMESPACE}.svc,DNS:${SERVICE}.${NAMESPACE}.svc.cluster.local
EXT
openssl req -newkey rsa:2048 -nodes -sha256 -keyout tls.key -out server.csr \
  -subj "/CN=${SERVICE}.${NAMESPACE}.svc" 2>/dev/null
openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -sha256 -days "$DAYS" \
  -extfile server.ext -out tls.crt 2>/dev/null

echo "wrote $OUT/{ca.crt,tls.crt,tls.key}"
CA_BUNDLE="$(base64 < ca.crt | tr -d '\n')"

if [ "$APPLY" = 1 ]; then
  kubectl -n "$NAMESPACE" create secret tls "$SECRET" --cert=tls.crt --key=tls.key \
    --dry-run=client -o yaml | kubectl apply -f -
  for kind in mutatingwebhookconfiguration validatingwebhookconfiguration; do
    kubectl annotate "$kind" "$WEBHOOK" cert-manager.io/inject-ca-from- >/dev/null 2>&1 || true
    kubectl patch "$kind" "$WEBHOOK" --type=json \
      -p "[{\"op\":\"add\",\"path\":\"/webhooks/0/clientConfig/caBundle\",\"value\":\"${CA_BUNDLE}\"}]"
  done
  kubectl -n "$NAMESPACE" rollout restart deployment/"$SERVICE"
else
  echo "caBundle: $CA_BUNDLE"
fi

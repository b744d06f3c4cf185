#!/usr/bin/env bash
# Runs the end-to-end suite (test/e2e, "existing nodes" mode) against a kind cluster whose
# kubelets and kube-controller-manager use --cloud-provider=external, with the CCM deployed
# from the kustomize overlay deploy/overlays/kind (the fake provider, two replicas).
#
#   hack/e2e-kind.sh            create the cluster, deploy, test, collect logs, delete the cluster
#   KEEP_CLUSTER=1 hack/e2e-kind.sh   keep the cluster afterwards
#
# Needs docker (with a running engine), kind and kubectl (1.27 or newer, for kustomize v5).
set -euo pipefail
cd "$(dirname "$0")/.."

cluster=${CLUSTER_NAME:-ccm-e2e}
image=cloud-controller-manager:e2e
artifacts=${ARTIFACTS:-$PWD/target/e2e-kind}
admin_port=10270

fail() { echo "e2e-kind: $*" >&2; exit 1; }
for tool in docker kind kubectl; do
  command -v "$tool" >/dev/null 2>&1 || fail "'$tool' is not installed; install it to run the kind end-to-end suite (or run 'make e2e' against the embedded API server)"
done
docker info >/dev/null 2>&1 || fail "docker is installed but no container engine answers ('docker info' failed); start the engine and retry"

mkdir -p "$artifacts"
kubeconfig="$artifacts/kubeconfig"
export KUBECONFIG="$kubeconfig"
forward_pid=""

cleanup() {
  status=$?
  [ -n "$forward_pid" ] && kill "$forward_pid" 2>/dev/null || true
  echo "--- collecting logs into $artifacts"
  kubectl -n kube-system logs -l app.kubernetes.io/name=cloud-controller-manager --all-containers --prefix --tail=-1 \
    >"$artifacts/cloud-controller-manager.log" 2>&1 || true
  kubectl get nodes -o wide >"$artifacts/nodes.txt" 2>&1 || true
  kubectl get events -A >"$artifacts/events.txt" 2>&1 || true
  kind export logs "$artifacts/kind" --name "$cluster" >/dev/null 2>&1 || true
  if [ "${KEEP_CLUSTER:-0}" != 1 ]; then
    kind delete cluster --name "$cluster" >/dev/null 2>&1 || true
  fi
  exit "$status"
}
trap cleanup EXIT

echo "--- building $image"
docker build -t "$image" --build-arg FEATURES=fake .

echo "--- creating kind cluster $cluster"
kind create cluster --name "$cluster" --config hack/kind-config.yaml --kubeconfig "$kubeconfig" --wait 0s
kind load docker-image "$image" --name "$cluster"

echo "--- deploying the cloud-controller-manager"
kubectl apply -k deploy/overlays/kind
kubectl -n kube-system rollout status deployment/cloud-controller-manager --timeout=180s

echo "--- forwarding the fake cloud's admin API of the leading replica"
holder=""
for _ in $(seq 1 60); do
  holder=$(kubectl -n kube-system get lease cloud-controller-manager -o jsonpath='{.spec.holderIdentity}' 2>/dev/null || true)
  [ -n "$holder" ] && break
  sleep 2
done
[ -n "$holder" ] || fail "no replica acquired the kube-system/cloud-controller-manager Lease"
# The identity is <hostname>_<uuid>, and a pod's hostname is its name.
pod=${holder%%_*}
kubectl -n kube-system port-forward "pod/$pod" "$admin_port:$admin_port" >"$artifacts/port-forward.log" 2>&1 &
forward_pid=$!
sleep 2

echo "--- running test/e2e in existing-nodes mode"
E2E_KUBECONFIG="$kubeconfig" \
E2E_MODE=existing \
E2E_FAKE_ADMIN="http://127.0.0.1:$admin_port" \
E2E_CCM_NAMESPACE=kube-system \
  cargo test --locked --all-features -p ccm-e2e -- --nocapture --test-threads=1

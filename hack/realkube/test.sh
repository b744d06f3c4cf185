#!/usr/bin/env bash
# The suites that run against a real Kubernetes control plane (hack/realkube): the API server's conformance
# suite (test/apiserver/tests/conformance.rs, unchanged) and its kubectl test (tests/kubectl.rs, with the kubectl
# built beside the control plane), and the end-to-end suite (test/e2e) with the CCM running as the
# ServiceAccount of deploy/base/rbac.yaml under the shipped RBAC, leader failover included; the admission
# webhook of every provider (cmd/cloud-controller-manager/tests/admission_webhook.rs); then
# the end-to-end suite again under the RBAC upstream publishes for its CCM (test/e2e/upstream-rbac.yaml).
#
#   hack/realkube/test.sh          build (cached), start, test, stop
#
# CARGO and FEATURES come from the Makefile, so the test binaries are the ones `make test` built.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
cargo=${CARGO:-cargo}
features=${FEATURES:---all-features}
dir="$root/target/realkube/test"

echo "--- realkube: building the control plane (Go build cache: a warm build takes seconds)"
started=$(date +%s)
realkube="$(hack/realkube/build.sh | tail -n 1)"
echo "realkube: built in $(( $(date +%s) - started ))s: $realkube"

stop() {
  status=$?
  if [ "$status" -ne 0 ] && [ -d "$dir" ]; then
    echo "--- realkube: the last lines of the control plane's logs ($dir)"
    for log in "$dir"/kube-apiserver.log "$dir"/kube-controller-manager.log "$dir"/etcd.log; do
      [ -f "$log" ] && { echo "== $log"; tail -n 30 "$log"; }
    done
  fi
  "$realkube" down --dir "$dir" || true
  exit "$status"
}
trap stop EXIT

"$realkube" up --dir "$dir" \
  --manifest deploy/base/rbac.yaml \
  --service-account kube-system/cloud-controller-manager

echo "--- realkube: the API server's conformance suite, and kubectl (of the same version) against the real server"
# shellcheck disable=SC2086 # FEATURES is a list of flags
TEST_KUBECONFIG="$dir/admin.kubeconfig" KUBECTL="$(dirname "$realkube")/kubectl" \
  "$cargo" test --workspace $features --locked --test conformance --test kubectl

echo "--- realkube: the end-to-end suite (the CCM as the deploy/ ServiceAccount)"
# shellcheck disable=SC2086
E2E_KUBECONFIG="$dir/admin.kubeconfig" KUBECTL="$(dirname "$realkube")/kubectl" \
E2E_CCM_KUBECONFIG="$dir/cloud-controller-manager.kubeconfig" \
E2E_AUDIT_LOG="$dir/audit.log" \
  "$cargo" test --workspace $features --locked --test e2e -- --nocapture

echo "--- realkube: the lb-service admission webhook of every provider, registered with the real API server"
# shellcheck disable=SC2086
ADMISSION_KUBECONFIG="$dir/admin.kubeconfig" KUBECTL="$(dirname "$realkube")/kubectl" \
  "$cargo" test --workspace $features --locked --test admission_webhook -- --ignored --nocapture

# A cluster that keeps the RBAC of the upstream CCM it ran before must keep working. That role has no
# system:auth-delegator binding, so /metrics (read by the suite to find the leader) is served without
# delegated authentication here, as an operator of such a cluster would have to.
"$realkube" down --dir "$dir"
"$realkube" up --dir "$dir" \
  --manifest test/e2e/upstream-rbac.yaml \
  --service-account kube-system/cloud-controller-manager

echo "--- realkube: the end-to-end suite under upstream's published CCM role"
# shellcheck disable=SC2086
E2E_KUBECONFIG="$dir/admin.kubeconfig" KUBECTL="$(dirname "$realkube")/kubectl" \
E2E_CCM_KUBECONFIG="$dir/cloud-controller-manager.kubeconfig" \
E2E_AUDIT_LOG="$dir/audit.log" \
E2E_RBAC_MANIFEST="$root/test/e2e/upstream-rbac.yaml" \
E2E_RBAC_EXACT=false \
E2E_CCM_ARGS="--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics" \
  "$cargo" test --workspace $features --locked --test e2e -- --nocapture

#!/usr/bin/env bash
# The suites that run against a real Kubernetes control plane (hack/realkube): the API server's conformance
# suite (test/apiserver/tests/conformance.rs, unchanged) and the end-to-end suite (test/e2e) with the CCM
# running as the ServiceAccount of deploy/rbac.yaml under the shipped RBAC, leader failover included.
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
  --manifest deploy/rbac.yaml \
  --service-account kube-system/cloud-controller-manager

echo "--- realkube: the API server's conformance suite"
# shellcheck disable=SC2086 # FEATURES is a list of flags
TEST_KUBECONFIG="$dir/admin.kubeconfig" \
  "$cargo" test --workspace $features --locked --test conformance

echo "--- realkube: the end-to-end suite (the CCM as the deploy/ ServiceAccount)"
# shellcheck disable=SC2086
E2E_KUBECONFIG="$dir/admin.kubeconfig" \
E2E_CCM_KUBECONFIG="$dir/cloud-controller-manager.kubeconfig" \
E2E_AUDIT_LOG="$dir/audit.log" \
  "$cargo" test --workspace $features --locked --test e2e -- --nocapture

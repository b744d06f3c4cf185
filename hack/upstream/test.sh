#!/usr/bin/env bash
# The differential controller suite (test/e2e/tests/differential.rs): every scenario runs once with
# k8s.io/cloud-provider's controllers (hack/upstream/cloud-provider) and once with ours, on a real
# kube-apiserver (hack/realkube) under the RBAC upstream publishes for its CCM, and what they leave in the
# cluster must be the same. Then the AWS peer tests (providers/aws/tests/moto/upstream_peer.rs): upstream's
# aws-cloud-controller-manager (hack/upstream/aws) and the AWS provider against moto on a fresh control plane.
#
#   hack/upstream/test.sh          build (cached), start, test, stop
#
# CARGO and FEATURES come from the Makefile, so the test binaries are the ones `make test` built.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
cargo=${CARGO:-cargo}
features=${FEATURES:---all-features}
dir="$root/target/upstream/cluster"
peer_dir="$root/target/upstream/peer-cluster"
logs="$root/target/upstream/logs"

echo "--- upstream: building the upstream CCM and the control plane (Go build cache: a warm build takes seconds)"
started=$(date +%s)
built="$(hack/upstream/build.sh)"
upstream="$(echo "$built" | tail -n 1)"
upstream_aws="$(echo "$built" | tail -n 2 | head -n 1)"
realkube="$(hack/realkube/build.sh | tail -n 1)"
echo "upstream: built in $(( $(date +%s) - started ))s: $upstream"

stop() {
  status=$?
  if [ "$status" -ne 0 ] && [ -d "$dir" ]; then
    echo "--- upstream: the last lines of the API server's log ($dir)"
    tail -n 30 "$dir/kube-apiserver.log" || true
    echo "--- upstream: every run's CCM log is in $logs"
  fi
  "$realkube" down --dir "$dir" || true
  "$realkube" down --dir "$peer_dir" 2>/dev/null || true
  exit "$status"
}
trap stop EXIT
rm -rf "$logs"

"$realkube" up --dir "$dir" \
  --manifest test/e2e/upstream-rbac.yaml \
  --service-account kube-system/cloud-controller-manager

echo "--- upstream: every flag and feature gate of upstream's commands is accepted (upstream $("$upstream" --version 2>&1 | head -n 1), cloud-provider-aws $("$upstream_aws" --version 2>&1 | head -n 1))"
# shellcheck disable=SC2086 # FEATURES is a list of flags
UPSTREAM_CCM="$upstream" \
UPSTREAM_AWS_CCM="$upstream_aws" \
  "$cargo" test --workspace $features --locked --test upstream_flag_set -- --ignored

echo "--- upstream: the differential controller suite (upstream $("$upstream" --version 2>&1 | head -n 1))"
# The scenarios share the cluster: one at a time. Those on real nodes run in hack/realkube/test-nodes.sh.
# shellcheck disable=SC2086 # FEATURES is a list of flags
DIFF_KUBECONFIG="$dir/admin.kubeconfig" \
DIFF_CCM_KUBECONFIG="$dir/cloud-controller-manager.kubeconfig" \
DIFF_UPSTREAM_CCM="$upstream" \
DIFF_LOG_DIR="$logs" \
  "$cargo" test --workspace $features --locked --test differential -- --ignored --test-threads=1 --nocapture \
    --skip real_node_

echo "--- upstream: the AWS peer tests (upstream $("$upstream_aws" --version 2>&1 | head -n 1) against moto)"
# A control plane of their own: the differential suite's Nodes must not become load-balancer backends.
"$realkube" down --dir "$dir"
"$realkube" up --dir "$peer_dir"
# shellcheck disable=SC2086 # FEATURES is a list of flags
UPSTREAM_AWS_CCM="$upstream_aws" \
PEER_KUBECONFIG="$peer_dir/admin.kubeconfig" \
PEER_LOG_DIR="$logs" \
  "$cargo" test --workspace $features --locked --test moto upstream_peer:: -- --ignored --test-threads=1 --nocapture

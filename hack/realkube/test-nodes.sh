#!/usr/bin/env bash
# The end-to-end suite on real nodes (test/e2e/tests/real_nodes.rs): the control plane with three real
# kubelets, a containerd each, and one kube-proxy (`realkube up --nodes 3`), the CCM run by the suite as
# the ServiceAccount of deploy/base/rbac.yaml. Then, on two fresh real nodes under the RBAC upstream
# publishes, the differential scenarios of their initialization and lifecycle
# (test/e2e/tests/differential.rs): upstream's CCM (hack/upstream), then ours, one scenario at a time.
# After each, `realkube down`, which fails when the host is not as it was before the nodes started
# (sysctls, nftables, links, addresses on lo, mounts, cgroups, /run).
#
#   hack/realkube/test-nodes.sh          build (cached), start, test, stop
#
# Needs root and the Debian packages of `make real-nodes-deps`. CARGO and FEATURES come from the Makefile.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
cargo=${CARGO:-cargo}
features=${FEATURES:---all-features}
dir="$root/target/realkube/nodes"

if [ "$(id -u)" -ne 0 ]; then
  echo "test-real-nodes: real nodes need root (kubelets, containerd and kube-proxy change the host; realkube down restores it)" >&2
  exit 1
fi
realkube="$(hack/realkube/build.sh | tail -n 1)"

stop() {
  status=$?
  if [ "$status" -ne 0 ] && [ -d "$dir" ]; then
    echo "--- real nodes: the last lines of the logs ($dir)"
    for log in "$dir"/realkube.log "$dir"/kubelet-node-*.log "$dir"/kube-proxy.log "$dir"/containerd-node-1.log; do
      [ -f "$log" ] && { echo "== $log"; tail -n 20 "$log"; }
    done
  fi
  # down fails when the host differs from before the nodes started.
  "$realkube" down --dir "$dir" || status=1
  exit "$status"
}
trap stop EXIT

started=$(( $(date +%s%N) / 1000000 ))
"$realkube" up --dir "$dir" --nodes 3 \
  --manifest deploy/base/rbac.yaml \
  --service-account kube-system/cloud-controller-manager
echo "real nodes: three Ready nodes $(( $(date +%s%N) / 1000000 - started )) ms after up"

echo "--- real nodes: the end-to-end suite"
# shellcheck disable=SC2086 # FEATURES is a list of flags
E2E_REAL_NODES_DIR="$dir" \
  "$cargo" test --workspace $features --locked --test real_nodes -- --ignored --nocapture
"$realkube" down --dir "$dir"

echo "--- real nodes: their initialization and lifecycle by upstream's CCM and by ours (the differential scenarios)"
upstream="$(hack/upstream/build.sh | tail -n 1)"
"$realkube" up --dir "$dir" --nodes 2 \
  --manifest test/e2e/upstream-rbac.yaml \
  --service-account kube-system/cloud-controller-manager
# shellcheck disable=SC2086
DIFF_REAL_NODES_DIR="$dir" \
DIFF_KUBECONFIG="$dir/admin.kubeconfig" \
DIFF_CCM_KUBECONFIG="$dir/cloud-controller-manager.kubeconfig" \
DIFF_UPSTREAM_CCM="$upstream" \
DIFF_LOG_DIR="$root/target/realkube/nodes-logs" \
  "$cargo" test --workspace $features --locked --test differential real_node_ -- --ignored --nocapture --test-threads=1

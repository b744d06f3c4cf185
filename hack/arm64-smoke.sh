#!/usr/bin/env bash
# The arm64 build, proven under qemu (make test-arm64, part of make test): the daemon built for
# aarch64-unknown-linux-gnu by hack/build-release.sh (the dev profile and the fake provider: the cheapest
# build that runs the daemon) answers --version, then initializes a node of the in-memory API server
# (target/debug/test-apiserver, from make build) and stops cleanly on SIGTERM.
#
# Needs Debian's gcc-aarch64-linux-gnu, libc6-dev-arm64-cross and qemu-user (.ci/run installs them), and a
# kubectl: $KUBECTL, kubectl on PATH, or target/realkube/bin/kubectl.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
fail() { echo "arm64-smoke: $*" >&2; exit 1; }

command -v qemu-aarch64 >/dev/null 2>&1 || fail "qemu-aarch64 is missing: install Debian's qemu-user"
sysroot=/usr/aarch64-linux-gnu
[ -e "$sysroot/lib/ld-linux-aarch64.so.1" ] || fail "no arm64 glibc in $sysroot: install Debian's libc6-dev-arm64-cross"
kubectl=${KUBECTL:-$(command -v kubectl || echo target/realkube/bin/kubectl)}
[ -x "$kubectl" ] || fail "no kubectl: set KUBECTL, put kubectl on PATH or run make realkube"
apiserver=${CARGO_TARGET_DIR:-target}/debug/test-apiserver
[ -x "$apiserver" ] || fail "no $apiserver: run make build first"

started=$(date +%s)
binary=$(hack/build-release.sh arm64 fake target/arm64/cloud-controller-manager dev 2>"$root/target/arm64-build.log" | tail -n 1) \
  || { cat "$root/target/arm64-build.log" >&2; fail "the arm64 build failed"; }
echo "arm64-smoke: built $(file -b "$binary" | cut -d, -f1-2) in $(( $(date +%s) - started ))s"
run() { qemu-aarch64 -L "$sysroot" "$binary" "$@"; }
version=$(run --version)
echo "$version" | grep -q '^cloud-controller-manager v' || fail "unexpected --version output: $version"
echo "arm64-smoke: $(echo "$version" | head -n 1) under qemu-aarch64"

work=$(mktemp -d)
pids=()
cleanup() {
  status=$?
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  [ "$status" -ne 0 ] && [ -f "$work/ccm.log" ] && tail -n 30 "$work/ccm.log" >&2
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT

"$apiserver" --kubeconfig "$work/kubeconfig" >"$work/apiserver.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do [ -s "$work/kubeconfig" ] && break; sleep 0.1; done
[ -s "$work/kubeconfig" ] || fail "the API server did not start"
k() { "$kubectl" --kubeconfig "$work/kubeconfig" "$@"; }
k apply -f - >/dev/null <<'YAML'
apiVersion: v1
kind: Node
metadata:
  name: arm64-node
spec:
  taints:
    - key: node.cloudprovider.kubernetes.io/uninitialized
      value: "true"
      effect: NoSchedule
YAML
echo "clusterID: arm64-smoke" >"$work/cloud.yaml"
qemu-aarch64 -L "$sysroot" "$binary" --cloud-provider=fake --cloud-config="$work/cloud.yaml" \
  --kubeconfig="$work/kubeconfig" --leader-elect=false --secure-port=0 --configure-cloud-routes=false \
  >"$work/ccm.log" 2>&1 &
ccm=$!
pids+=("$ccm")
provider_id=""
for _ in $(seq 1 300); do
  provider_id=$(k get node arm64-node -o jsonpath='{.spec.providerID}')
  [ -n "$provider_id" ] && break
  kill -0 "$ccm" 2>/dev/null || fail "the arm64 daemon exited"
  sleep 0.1
done
[ "$provider_id" = fake://arm64-node ] || fail "the node was not initialized (providerID ${provider_id:-empty})"
kill -TERM "$ccm"
status=0
wait "$ccm" || status=$?
[ "$status" -eq 0 ] || fail "the arm64 daemon exited with $status on SIGTERM"
echo "arm64-smoke: ok (the node was initialized, SIGTERM stopped the daemon cleanly; $(( $(date +%s) - started ))s)"

#!/usr/bin/env bash
# `make demo REAL=1`: the demo (hack/demo) on a real control plane built from the Kubernetes modules
# (hack/realkube) instead of the in-memory API server. The CCM runs as the ServiceAccount of deploy/base/rbac.yaml.
#
#   KEEP=1 make demo REAL=1     leave the control plane running afterwards, to look around with kubectl
#   make demo REAL=1 NODES=2    with two real nodes (kubelets, containerd, kube-proxy; needs root and
#                               `make real-nodes-deps`): the story ends with a request through a load balancer
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
cargo=${CARGO:-cargo}
dir="$root/target/realkube/demo"
nodes="${NODES:-0}"

realkube="$(hack/realkube/build.sh | tail -n 1)"
kubectl="$(dirname "$realkube")/kubectl"
"$realkube" up --dir "$dir" --nodes "$nodes" --manifest deploy/base/rbac.yaml \
  --service-account kube-system/cloud-controller-manager
if [ "${KEEP:-0}" != 1 ]; then
  trap '"$realkube" down --dir "$dir"' EXIT
fi

DEMO_REAL_NODES="$nodes" \
DEMO_KUBECONFIG="$dir/admin.kubeconfig" \
DEMO_CCM_KUBECONFIG="$dir/cloud-controller-manager.kubeconfig" \
  "$cargo" run --locked -p ccm-demo --

if [ "${KEEP:-0}" = 1 ]; then
  cat <<MSG

The control plane keeps running (the CCM has stopped with the demo). Look around with kubectl:
  export KUBECONFIG=$dir/admin.kubeconfig
  $kubectl get nodes -o wide
  $kubectl get pods -o wide
  $kubectl logs hello          # with NODES=N: the pod's log, through its kubelet
  $kubectl describe services
  $kubectl get events -A
Stop it with: $realkube down --dir $dir
MSG
fi

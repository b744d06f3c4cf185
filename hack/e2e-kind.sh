#!/usr/bin/env bash
# Runs the end-to-end suite (test/e2e, "existing nodes" mode) against a kind cluster whose
# kubelets and kube-controller-manager use --cloud-provider=external, with the CCM deployed
# from the kustomize overlay deploy/overlays/kind (the fake provider, two replicas). Then the fake
# load balancers' data path, as cloud-provider-kind users reach their Services, in its two modes:
#   - in the cluster: deploy/overlays/kind-daemonset with deploy/components/fake-data-path (ingress
#     addresses added to the control-plane node's eth0 on the kind network);
#   - on the host: the daemon run here with kind's kubeconfig (ingress addresses on loopback);
# each time `curl` from this host must reach a pod through a LoadBalancer Service's ingress address.
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
host_ccm_pid=""

cleanup() {
  status=$?
  [ -n "$forward_pid" ] && kill "$forward_pid" 2>/dev/null || true
  [ -n "$host_ccm_pid" ] && kill "$host_ccm_pid" 2>/dev/null || true
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

# --- the data path: a LoadBalancer Service that answers from this host
# Waits for the ingress address of Service web and for a pod's name at http://ADDRESS:PORT/hostname.
curl_through_load_balancer() {
  local mode=$1 port=$2 ip="" answer=""
  for _ in $(seq 1 90); do
    ip=$(kubectl get service web -o jsonpath='{.status.loadBalancer.ingress[0].ip}' 2>/dev/null || true)
    [ -n "$ip" ] && break
    sleep 2
  done
  [ -n "$ip" ] || fail "$mode: Service web got no ingress address"
  for _ in $(seq 1 60); do
    answer=$(curl -s -m 3 "http://$ip:$port/hostname" || true)
    case "$answer" in web-*) break ;; esac
    sleep 2
  done
  case "$answer" in
    web-*) echo "$mode: curl http://$ip:$port/hostname answered $answer" ;;
    *) fail "$mode: curl http://$ip:$port/hostname answered '${answer}'" ;;
  esac
}

echo "--- the data path in the cluster (kind-daemonset + fake-data-path)"
kubectl delete -k deploy/overlays/kind --wait=true
subnet=$(docker network inspect kind -f '{{range .IPAM.Config}}{{.Subnet}} {{end}}' | tr ' ' '\n' | grep -m1 '\.')
# The top /29 of the kind network: docker hands out addresses from the bottom.
pool=$(python3 -c 'import ipaddress, sys; n = ipaddress.ip_network(sys.argv[1]); print(f"{n.broadcast_address - 7}/29")' "$subnet")
overlay="$artifacts/data-path"
mkdir -p "$overlay"
deploy=$(python3 -c 'import os, sys; print(os.path.relpath(sys.argv[1], sys.argv[2]))' "$PWD/deploy" "$overlay")
sed "s#loadBalancerCIDR: .*#loadBalancerCIDR: $pool#" deploy/components/fake-data-path/cloud-config.yaml >"$overlay/cloud-config.yaml"
cat >"$overlay/kustomization.yaml" <<EOF
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - $deploy/overlays/kind-daemonset
components:
  - $deploy/components/fake-data-path
patches:
  - path: cloud-config.yaml
EOF
kubectl apply -k "$overlay"
kubectl -n kube-system rollout status daemonset/cloud-controller-manager --timeout=180s
kubectl create deployment web --image=registry.k8s.io/e2e-test-images/agnhost:2.53 --replicas=2 \
  -- /agnhost netexec --http-port=8080
kubectl rollout status deployment/web --timeout=180s
kubectl expose deployment web --type=LoadBalancer --port=80 --target-port=8080
curl_through_load_balancer "in the cluster (pool $pool on the control-plane node's eth0)" 80
kubectl delete service web --wait=true

echo "--- the data path on the host (the daemon beside the kind cluster)"
kubectl delete -k "$overlay" --wait=true
cargo build --locked --features fake -p cloud-controller-manager
printf 'clusterID: kind\ndataPath: true\n' >"$artifacts/host-cloud-config.yaml"
# Front-end port 8080: a port below 1024 would need root or CAP_NET_BIND_SERVICE here.
target/debug/cloud-controller-manager --cloud-provider=fake --cloud-config="$artifacts/host-cloud-config.yaml" \
  --kubeconfig="$kubeconfig" --leader-elect=false --secure-port=0 --controllers=service \
  >"$artifacts/host-ccm.log" 2>&1 &
host_ccm_pid=$!
kubectl expose deployment web --type=LoadBalancer --port=8080 --target-port=8080
curl_through_load_balancer "on the host (pool 127.240.0.0/24 on loopback)" 8080

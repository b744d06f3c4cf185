#!/usr/bin/env bash
# Renders every kustomize overlay of deploy/ with `kubectl kustomize`, and the Helm chart
# deploy/helm/cloud-controller-manager with `helm template` for every provider and mode, and checks what
# comes out:
#
#   - every rendered document parses (kubectl converts the stream to JSON, offline);
#   - the kinds of the overlay's mode, and what the mode promises: a Deployment of 2 replicas with
#     a PodDisruptionBudget, or a DaemonSet on control-plane nodes in the host network;
#   - the daemon's container: each flag is in the README's flag table and accepted by the built
#     daemon (when there is one), --cloud-provider, leader election, /healthz and /readyz probes
#     over HTTPS on 10258, the metrics Service, ConfigMaps and Secrets it refers to, and a
#     --cloud-config file inside a mounted ConfigMap;
#   - RBAC: the rendered ServiceAccounts, Roles, ClusterRoles and bindings are exactly those of
#     deploy/base/rbac.yaml (the file the end-to-end suite checks against the requests the daemon
#     really makes: the "RBAC honesty" case of test/e2e) plus the files of the table below, with
#     the same rules;
#   - the chart: `helm lint`, and cloud-provider-aws's chart (from the module hack/upstream/aws pins)
#     and this one rendered with test/helm/cloud-provider-aws-values.yaml (every key of that chart) give
#     the same workload, pod spec, ServiceAccount, RBAC rules and subjects;
#   - with an API server at hand, every overlay and chart render passes `kubectl apply
#     --dry-run=server` (schemas, unknown fields, defaulting, admission), and the chart is installed
#     and upgraded with helm (provider and mode changed), and a release of cloud-provider-aws's chart
#     is upgraded to this chart with the same values: VERIFY_MANIFESTS_KUBECONFIG, else a control plane
#     of hack/realkube started for the check when target/realkube/bin/realkube is built (make
#     realkube); without either this step is skipped, loudly.
#
#   hack/verify-manifests.sh            (make verify-manifests; part of make test)
#
# kubectl: $KUBECTL, else kubectl on PATH, else target/realkube/bin/kubectl. helm: built by
# hack/helm/build.sh (needs Go). The daemon of the flag check: $CCM_BIN, else
# ${CARGO_TARGET_DIR:-target}/debug/cloud-controller-manager. Needs python3.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

fail() { echo "verify-manifests: $*" >&2; exit 1; }

# Every overlay under deploy/overlays, with what it must render.
#   overlay  provider  mode  RBAC files besides deploy/base/rbac.yaml ("-": none)  Secrets the operator creates ("-": none)
cases=(
  "aws                     aws           deployment  -                                         -"
  "aws-daemonset           aws           daemonset   -                                         -"
  "digitalocean            digitalocean  deployment  deploy/components/digitalocean/rbac.yaml  digitalocean"
  "digitalocean-daemonset  digitalocean  daemonset   deploy/components/digitalocean/rbac.yaml  digitalocean"
  "kind                    fake          deployment  -                                         -"
  "kind-daemonset          fake          daemonset   -                                         -"
)
# The chart, rendered for every provider and mode (the kustomize overlays' promises, with the chart's
# priority class: system-node-critical for a DaemonSet, as cloud-provider-aws's chart).
#   name  provider  mode  RBAC files besides deploy/base/rbac.yaml  Secrets  priority class  helm --set values
chart_cases=(
  "helm-aws                     aws           deployment  -                                                        -             system-cluster-critical  mode=Deployment,cloudConfig=[Global]"
  "helm-aws-daemonset           aws           daemonset   -                                                        -             system-node-critical     hostNetworking=true,cloudConfig=[Global]"
  "helm-digitalocean            digitalocean  deployment  deploy/components/digitalocean/rbac.yaml                 digitalocean  system-cluster-critical  mode=Deployment"
  "helm-digitalocean-daemonset  digitalocean  daemonset   deploy/components/digitalocean/rbac.yaml                 digitalocean  system-node-critical     hostNetworking=true"
  "helm-fake                    fake          deployment  -                                                        -             system-cluster-critical  mode=Deployment,cloudConfig=clusterID: helm"
  "helm-fake-daemonset          fake          daemonset   -                                                        -             system-node-critical     hostNetworking=true,cloudConfig=clusterID: helm"
)
# Optional components, checked on top of an overlay: component  overlay  RBAC file it adds  argument it adds ("-": none)
compositions=(
  "service-account-credentials  kind            deploy/components/service-account-credentials/rbac.yaml  --use-service-account-credentials=true"
  "admission-webhook            digitalocean    -                                                        --webhooks=lb-service"
  "fake-data-path               kind-daemonset  -                                                        -"
)

# --- tools
if [ -n "${KUBECTL:-}" ]; then
  kubectl=$KUBECTL
  command -v "$kubectl" >/dev/null 2>&1 || fail "KUBECTL=$KUBECTL is not an executable"
elif command -v kubectl >/dev/null 2>&1; then
  kubectl=$(command -v kubectl)
elif [ -x target/realkube/bin/kubectl ]; then
  kubectl=$root/target/realkube/bin/kubectl
else
  fail "no kubectl: set KUBECTL, put kubectl (with kustomize v5, kubectl 1.27 or newer) on PATH, or build target/realkube/bin/kubectl with 'make realkube' (needs Go)"
fi
"$kubectl" kustomize --help >/dev/null 2>&1 || fail "$kubectl has no 'kustomize' command; use kubectl 1.27 or newer"
command -v python3 >/dev/null 2>&1 || fail "python3 is needed to compare the rendered objects"
echo "verify-manifests: $("$kubectl" version --client 2>/dev/null | tr '\n' ' ')($kubectl)"

ccm_bin=${CCM_BIN:-${CARGO_TARGET_DIR:-$root/target}/debug/cloud-controller-manager}
if [ -x "$ccm_bin" ]; then
  echo "verify-manifests: container flags are checked against the README and $ccm_bin"
else
  [ -n "${CCM_BIN:-}" ] && fail "CCM_BIN=$CCM_BIN is not an executable"
  echo "!!! verify-manifests: no built daemon at $ccm_bin: container flags are checked against the README's flag table only (cargo build, or set CCM_BIN)" >&2
  ccm_bin=""
fi

work=$(mktemp -d)
realkube_dir=""
cleanup() {
  status=$?
  if [ -n "$realkube_dir" ]; then
    "$root/target/realkube/bin/realkube" down --dir "$realkube_dir" >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT

# to_json FILE.yaml FILE.json: every document of a YAML stream as JSON, offline. A document that
# does not parse fails here, naming it.
to_json() {
  if ! "$kubectl" patch --local --type=merge -p '{}' -o json -f "$1" >"$2" 2>"$work/error"; then
    fail "$1 does not parse: $(cat "$work/error")"
  fi
}

# render NAME DIR: kubectl kustomize DIR into $work/NAME.{yaml,json}.
render() {
  if ! "$kubectl" kustomize "$2" >"$work/$1.yaml" 2>"$work/error"; then
    fail "kubectl kustomize $2 failed: $(cat "$work/error")"
  fi
  [ -s "$work/$1.yaml" ] || fail "kubectl kustomize $2 rendered nothing"
  to_json "$work/$1.yaml" "$work/$1.json"
}

# rbac_specs FILE...: the JSON list of {"file", "json"} of deploy/base/rbac.yaml and FILE...
rbac_specs() {
  local specs="" file json
  for file in deploy/base/rbac.yaml "$@"; do
    [ "$file" = - ] && continue
    [ -f "$file" ] || fail "$file (in the table of $0) does not exist"
    json="$work/rbac-$(echo "$file" | tr '/' '_').json"
    to_json "$file" "$json"
    specs+="${specs:+,}{\"file\":\"$file\",\"json\":\"$json\"}"
  done
  echo "[$specs]"
}

# The table covers every overlay directory and no other.
listed=$(for c in "${cases[@]}"; do read -r overlay _ <<<"$c"; echo "$overlay"; done | sort)
present=$(find deploy/overlays -mindepth 1 -maxdepth 1 -type d -exec basename {} \; | sort)
[ "$listed" = "$present" ] \
  || fail "the table in $0 lists [$(tr '\n' ' ' <<<"$listed")] but deploy/overlays has [$(tr '\n' ' ' <<<"$present")]: keep them in step"

echo "--- rendering"
specs=()
render base deploy/base
echo "rendered deploy/base: $(grep -c '^kind:' "$work/base.yaml") objects"
for c in "${cases[@]}"; do
  read -r overlay provider mode rbac secrets <<<"$c"
  render "$overlay" "deploy/overlays/$overlay"
  kinds=$(grep '^kind:' "$work/$overlay.yaml" | sed 's/^kind: //' | sort | uniq -c | awk '{printf "%s%s×%s", sep, $2, $1; sep=", "}')
  echo "rendered deploy/overlays/$overlay: $kinds"
  secrets_json="[]"
  [ "$secrets" != - ] && secrets_json="[\"$secrets\"]"
  specs+=("{\"name\":\"deploy/overlays/$overlay\",\"rendered\":\"$work/$overlay.json\",\"provider\":\"$provider\",\"mode\":\"$mode\",\"rbac\":$(rbac_specs "$rbac"),\"external_secrets\":$secrets_json,\"args\":[]}")
done

for c in "${compositions[@]}"; do
  read -r component overlay rbac arg <<<"$c"
  line=$(printf '%s\n' "${cases[@]}" | awk -v o="$overlay" '$1 == o')
  [ -n "$line" ] || fail "composition $component: overlay $overlay is not in the table"
  read -r _ provider mode base_rbac secrets <<<"$line"
  dir="$work/compose-$component"
  mkdir -p "$dir"
  deploy=$(python3 -c 'import os, sys; print(os.path.relpath(sys.argv[1], sys.argv[2]))' "$root/deploy" "$dir")
  cat >"$dir/kustomization.yaml" <<EOF
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - $deploy/overlays/$overlay
components:
  - $deploy/components/$component
EOF
  name="$overlay+$component"
  render "$name" "$dir"
  echo "rendered deploy/overlays/$overlay with deploy/components/$component: $(grep -c '^kind:' "$work/$name.yaml") objects"
  secrets_json="[]"
  [ "$secrets" != - ] && secrets_json="[\"$secrets\"]"
  webhook=false
  [ "$arg" = --webhooks=lb-service ] && webhook=true
  args_json="[]"
  [ "$arg" != - ] && args_json="[\"$arg\"]"
  specs+=("{\"name\":\"deploy/overlays/$overlay + components/$component\",\"rendered\":\"$work/$name.json\",\"provider\":\"$provider\",\"mode\":\"$mode\",\"rbac\":$(rbac_specs "$base_rbac" "$rbac"),\"external_secrets\":$secrets_json,\"args\":$args_json,\"webhook\":$webhook}")
done

echo "--- the Helm chart"
helm=$(hack/helm/build.sh | tail -n 1)
chart=deploy/helm/cloud-controller-manager
"$helm" lint --strict "$chart" >"$work/lint.log" 2>&1 || { cat "$work/lint.log" >&2; fail "helm lint $chart failed"; }
echo "helm lint $chart: ok ($("$helm" version --short))"
for c in "${chart_cases[@]}"; do
  read -r name provider mode rbac secrets priority sets <<<"$c"
  if ! "$helm" template ccm "$chart" --namespace kube-system --set "provider=$provider" --set-string "$sets" \
      >"$work/$name.yaml" 2>"$work/error"; then
    fail "helm template $chart ($name) failed: $(cat "$work/error")"
  fi
  to_json "$work/$name.yaml" "$work/$name.json"
  echo "rendered $chart ($name): $(grep -c '^kind:' "$work/$name.yaml") objects"
  secrets_json="[]"
  [ "$secrets" != - ] && secrets_json="[\"$secrets\"]"
  specs+=("{\"name\":\"$chart ($name)\",\"rendered\":\"$work/$name.json\",\"provider\":\"$provider\",\"mode\":\"$mode\",\"rbac\":$(rbac_specs "$rbac"),\"external_secrets\":$secrets_json,\"args\":[],\"priority\":\"$priority\"}")
done
# With --use-service-account-credentials in its arguments the chart adds the controllers' accounts.
name=helm-fake+service-account-credentials
"$helm" template ccm "$chart" --namespace kube-system --set provider=fake --set-string "cloudConfig=clusterID: helm" \
  --set 'args={--cloud-provider=fake,--cloud-config=/etc/kubernetes/cloud-config/cloud-config,--leader-elect=true,--secure-port=10258,--use-service-account-credentials=true}' \
  --set mode=Deployment >"$work/$name.yaml" 2>"$work/error" || fail "helm template ($name) failed: $(cat "$work/error")"
to_json "$work/$name.yaml" "$work/$name.json"
specs+=("{\"name\":\"$chart ($name)\",\"rendered\":\"$work/$name.json\",\"provider\":\"fake\",\"mode\":\"deployment\",\"rbac\":$(rbac_specs deploy/components/service-account-credentials/rbac.yaml),\"external_secrets\":[],\"args\":[\"--use-service-account-credentials=true\"]}")
# The admission webhook, with the made arguments (a DaemonSet) and with given ones (a Deployment).
name=helm-aws+webhook
"$helm" template ccm "$chart" --namespace kube-system --set provider=aws --set hostNetworking=true --set webhook.enabled=true \
  >"$work/$name.yaml" 2>"$work/error" || fail "helm template ($name) failed: $(cat "$work/error")"
to_json "$work/$name.yaml" "$work/$name.json"
specs+=("{\"name\":\"$chart ($name)\",\"rendered\":\"$work/$name.json\",\"provider\":\"aws\",\"mode\":\"daemonset\",\"rbac\":$(rbac_specs),\"external_secrets\":[],\"args\":[],\"priority\":\"system-node-critical\",\"webhook\":true}")
name=helm-fake+webhook
"$helm" template ccm "$chart" --namespace kube-system --set provider=fake --set-string "cloudConfig=clusterID: helm" \
  --set 'args={--cloud-provider=fake,--cloud-config=/etc/kubernetes/cloud-config/cloud-config,--leader-elect=true,--secure-port=10258}' \
  --set mode=Deployment --set webhook.enabled=true >"$work/$name.yaml" 2>"$work/error" || fail "helm template ($name) failed: $(cat "$work/error")"
to_json "$work/$name.yaml" "$work/$name.json"
specs+=("{\"name\":\"$chart ($name)\",\"rendered\":\"$work/$name.json\",\"provider\":\"fake\",\"mode\":\"deployment\",\"rbac\":$(rbac_specs),\"external_secrets\":[],\"args\":[],\"webhook\":true}")

# cloud-provider-aws's chart, from the module the AWS peer pins, against this one with the same values.
aws_module=$(sed -n 's#^[[:space:]]*k8s.io/cloud-provider-aws \(v[0-9.]*\)$#\1#p' hack/upstream/aws/go.mod)
[ -n "$aws_module" ] || fail "hack/upstream/aws/go.mod does not pin k8s.io/cloud-provider-aws"
upstream_dir=$(cd hack/upstream/aws && GOTOOLCHAIN=local GOFLAGS=-mod=mod go mod download -json "k8s.io/cloud-provider-aws@$aws_module" \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')
upstream_chart="$upstream_dir/charts/aws-cloud-controller-manager"
[ -f "$upstream_chart/Chart.yaml" ] || fail "no chart at $upstream_chart"
values=test/helm/cloud-provider-aws-values.yaml
mkdir -p "$work/upstream"
"$helm" template aws-ccm "$upstream_chart" -f "$values" >"$work/upstream/theirs.yaml" \
  || fail "cloud-provider-aws's chart does not render with $values"
"$helm" template aws-ccm "$chart" -f "$values" >"$work/upstream/ours.yaml" || fail "$chart does not render with $values"
to_json "$work/upstream/theirs.yaml" "$work/upstream/theirs.json"
to_json "$work/upstream/ours.yaml" "$work/upstream/ours.json"
python3 hack/lib/check-manifests.py --compare-upstream-chart "$work/upstream/theirs.json" "$work/upstream/ours.json" \
  || fail "cloud-provider-aws $aws_module's chart and $chart render $values differently (above)"

echo "--- checking the rendered objects"
python3 hack/lib/check-manifests.py --readme README.md ${ccm_bin:+--ccm-bin "$ccm_bin"} "${specs[@]}" \
  || fail "the rendered manifests do not hold what they should (above)"

echo "--- server-side dry run"
kubeconfig=${VERIFY_MANIFESTS_KUBECONFIG:-}
if [ -z "$kubeconfig" ] && [ -x target/realkube/bin/realkube ]; then
  realkube_dir="$work/realkube"
  echo "starting a control plane (hack/realkube) in $realkube_dir"
  target/realkube/bin/realkube up --dir "$realkube_dir" >"$work/realkube.log" 2>&1 \
    || { cat "$work/realkube.log" >&2; fail "could not start hack/realkube's control plane"; }
  kubeconfig="$realkube_dir/admin.kubeconfig"
fi
if [ -z "$kubeconfig" ]; then
  echo "!!! verify-manifests: no API server: the server-side dry run was NOT made (build target/realkube/bin/realkube with 'make realkube', or set VERIFY_MANIFESTS_KUBECONFIG)" >&2
else
  # The webhook's certificate is a cert-manager object: without cert-manager in the cluster its kinds are
  # registered for the dry run (open schemas; the API server checks the rest of each object), and removed after.
  cert_manager_kinds=""
  if ! "$kubectl" --kubeconfig "$kubeconfig" get crd certificates.cert-manager.io >/dev/null 2>&1; then
    "$kubectl" --kubeconfig "$kubeconfig" apply -f hack/lib/cert-manager-crds.yaml >/dev/null \
      && "$kubectl" --kubeconfig "$kubeconfig" wait --for=condition=Established --timeout=60s \
        crd/certificates.cert-manager.io crd/issuers.cert-manager.io >/dev/null \
      || fail "cannot register cert-manager's kinds for the dry run"
    cert_manager_kinds=hack/lib/cert-manager-crds.yaml
  fi
  for rendered in "$work"/*.yaml; do
    name=$(basename "$rendered" .yaml)
    if ! "$kubectl" --kubeconfig "$kubeconfig" apply --dry-run=server --validate=strict -f "$rendered" >"$work/apply.log" 2>&1; then
      cat "$work/apply.log" >&2
      fail "$name: the API server refuses the rendered objects (above)"
    fi
    echo "ok   $name: $(wc -l <"$work/apply.log") objects accepted"
  done
  if [ -n "$cert_manager_kinds" ]; then
    "$kubectl" --kubeconfig "$kubeconfig" delete -f "$cert_manager_kinds" >/dev/null || fail "cannot remove the cert-manager kinds"
  fi
  echo "--- helm install and upgrade"
  k() { "$kubectl" --kubeconfig "$kubeconfig" "$@"; }
  h() { "$helm" --kubeconfig "$kubeconfig" "$@"; }
  h install ccm "$chart" --namespace kube-system --set provider=fake --set-string "cloudConfig=clusterID: helm" \
    >"$work/helm.log" 2>&1 || { cat "$work/helm.log" >&2; fail "helm install of $chart failed"; }
  k -n kube-system get daemonset cloud-controller-manager >/dev/null || fail "helm install made no DaemonSet"
  h upgrade ccm "$chart" --namespace kube-system --set provider=fake --set-string "cloudConfig=clusterID: helm" \
    --set mode=Deployment --set 'args={--cloud-provider=fake,--cloud-config=/etc/kubernetes/cloud-config/cloud-config,--use-service-account-credentials}' \
    >"$work/helm.log" 2>&1 || { cat "$work/helm.log" >&2; fail "helm upgrade of $chart failed"; }
  k -n kube-system get deployment cloud-controller-manager >/dev/null || fail "helm upgrade made no Deployment"
  ! k -n kube-system get daemonset cloud-controller-manager >/dev/null 2>&1 || fail "helm upgrade left the DaemonSet"
  k -n kube-system get serviceaccount node-controller >/dev/null || fail "helm upgrade made no controller ServiceAccounts"
  echo "ok   helm install (DaemonSet) and upgrade (Deployment, service account credentials) of $chart"
  h uninstall ccm --namespace kube-system >/dev/null || fail "helm uninstall failed"
  # An operator's switch: the release of cloud-provider-aws's chart upgraded to this chart, same values.
  k create namespace cloud-controllers >/dev/null
  h install aws-ccm "$upstream_chart" -f "$values" --namespace cloud-controllers >"$work/helm.log" 2>&1 \
    || { cat "$work/helm.log" >&2; fail "helm install of cloud-provider-aws's chart failed"; }
  h upgrade aws-ccm "$chart" -f "$values" --namespace cloud-controllers >"$work/helm.log" 2>&1 \
    || { cat "$work/helm.log" >&2; fail "helm upgrade from cloud-provider-aws's chart to $chart failed"; }
  [ "$(h list --namespace cloud-controllers -o json | python3 -c 'import json, sys; print(json.load(sys.stdin)[0]["chart"])')" \
    = "cloud-controller-manager-$(sed -n 's/^version: //p' "$chart/Chart.yaml")" ] || fail "the release does not run $chart after the upgrade"
  k -n cloud-controllers get daemonset aws-ccm >/dev/null || fail "the upgrade lost the DaemonSet aws-ccm"
  echo "ok   a release of cloud-provider-aws $aws_module's chart upgraded to $chart with the same values"
fi
echo "verify-manifests: ok"

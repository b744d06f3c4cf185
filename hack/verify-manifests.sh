#!/usr/bin/env bash
# Renders every kustomize overlay of deploy/ with `kubectl kustomize` and checks what comes out:
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
#   - with an API server at hand, every overlay passes `kubectl apply --dry-run=server` (schemas,
#     unknown fields, defaulting, admission): VERIFY_MANIFESTS_KUBECONFIG, else a control plane of
#     hack/realkube started for the check when target/realkube/bin/realkube is built (make
#     realkube); without either this step is skipped, loudly.
#
#   hack/verify-manifests.sh            (make verify-manifests; part of make test)
#
# kubectl: $KUBECTL, else kubectl on PATH, else target/realkube/bin/kubectl. The daemon of the flag
# check: $CCM_BIN, else ${CARGO_TARGET_DIR:-target}/debug/cloud-controller-manager. Needs python3.
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
# Optional components, checked on top of an overlay: component  overlay  RBAC file it adds  argument it adds
compositions=(
  "service-account-credentials  kind  deploy/components/service-account-credentials/rbac.yaml  --use-service-account-credentials=true"
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
  specs+=("{\"name\":\"deploy/overlays/$overlay + components/$component\",\"rendered\":\"$work/$name.json\",\"provider\":\"$provider\",\"mode\":\"$mode\",\"rbac\":$(rbac_specs "$base_rbac" "$rbac"),\"external_secrets\":$secrets_json,\"args\":[\"$arg\"]}")
done

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
  for rendered in "$work"/*.yaml; do
    name=$(basename "$rendered" .yaml)
    if ! "$kubectl" --kubeconfig "$kubeconfig" apply --dry-run=server --validate=strict -f "$rendered" >"$work/apply.log" 2>&1; then
      cat "$work/apply.log" >&2
      fail "$name: the API server refuses the rendered objects (above)"
    fi
    echo "ok   $name: $(wc -l <"$work/apply.log") objects accepted"
  done
fi
echo "verify-manifests: ok"

#!/usr/bin/env bash
# Builds helm (test tooling: it lints, renders and installs deploy/helm in the tests) from the version pinned
# in go.mod into target/helm/bin/helm, with its version and the Kubernetes version of its client modules
# stamped as helm's release builds have them. The Go build cache makes a second build take seconds.
#
#   hack/helm/build.sh        prints the path of the binary on its last line
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="$root/target/helm/bin/helm"

# shellcheck source=../lib/go-build.sh
. "$root/hack/lib/go-build.sh"
require_go helm "helm, which the chart tests use"

module_version() {
  sed -n "s#^[[:space:]]*$1 \\(v[0-9.]*\\)\\( // indirect\\)\\{0,1\\}\$#\\1#p" "$here/go.mod"
}
helm_version="$(module_version helm.sh/helm/v3)"
kube_minor="$(module_version k8s.io/client-go | cut -d. -f2)"
if [ -z "$helm_version" ] || [ -z "$kube_minor" ]; then
  echo "helm: $here/go.mod does not pin helm.sh/helm/v3 and k8s.io/client-go at release versions" >&2
  exit 1
fi
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$helm_version -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
  ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$kube_minor"
done
mkdir -p "$(dirname "$out")"
(
  cd "$here"
  GOTOOLCHAIN=local GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0 \
    go build -trimpath -ldflags "$ldflags" -o "$out" helm.sh/helm/v3/cmd/helm
)
echo "$out"

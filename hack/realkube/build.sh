#!/usr/bin/env bash
# Builds hack/realkube (etcd, kube-apiserver, kube-controller-manager and kubectl in one test binary) from the
# Kubernetes modules pinned in go.mod, into target/realkube/bin/, with a `kubectl` link beside it.
# The Go build cache makes a second build take seconds.
#
#   hack/realkube/build.sh        prints the path of the binary on its last line
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="$root/target/realkube/bin"

if ! command -v go >/dev/null 2>&1; then
  echo "realkube: 'go' is not installed; install Go 1.25 or newer (https://go.dev/doc/install, or the golang" >&2
  echo "realkube: package of your distribution) to build the real Kubernetes control plane the tests run against" >&2
  exit 1
fi

# The Kubernetes version comes from go.mod; the components report it like release builds do.
version="$(sed -n 's#^[[:space:]]*k8s.io/kubernetes \(v[0-9.]*\)$#\1#p' "$here/go.mod")"
if [ -z "$version" ]; then
  echo "realkube: $here/go.mod does not require k8s.io/kubernetes at a release version" >&2
  exit 1
fi
minor="$(echo "$version" | cut -d. -f2)"
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done

mkdir -p "$out"
(
  cd "$here"
  # Never fetch a toolchain: build with the installed Go, modules from the module proxy (go.sum pins them).
  GOTOOLCHAIN=local GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out/realkube" .
)
ln -sf realkube "$out/kubectl"
echo "$out/realkube"
